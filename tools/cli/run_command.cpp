#include "run_command.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string_view>
#include <system_error>

#include "config/config.h"
#include "config/options.h"
#include "config/suggest.h"
#include "init_process.h"
#include "shim_library.h"

extern char** environ;

namespace vramspill::cli {
namespace {

namespace fs = std::filesystem;

// Options of `run` that take a value, for find_command_start(); add_run_command() registers the
// same names.
constexpr std::array<std::string_view, 6> kValueOptions = {"-c",       "--config", "--library",
                                                           "--budget", "--mode",   "--set"};

bool takes_value(std::string_view argument) {
  for (std::string_view option : kValueOptions)
    if (argument == option) return true;
  return false;
}

// "NAME=VALUE" strings, like environ.
class Environment {
 public:
  Environment() {
    for (char** entry = environ; *entry != nullptr; ++entry) entries_.emplace_back(*entry);
  }
  std::optional<std::string> get(std::string_view name) const {
    for (const std::string& entry : entries_)
      if (is(entry, name)) return entry.substr(name.size() + 1);
    return std::nullopt;
  }
  void set(std::string_view name, std::string_view value) {
    remove(name);
    entries_.push_back(std::string(name) + "=" + std::string(value));
  }
  void remove(std::string_view name) {
    std::erase_if(entries_, [&](const std::string& entry) { return is(entry, name); });
  }
  // A null-terminated array of pointers into this object; valid until it changes.
  std::vector<char*> pointers() {
    std::vector<char*> out;
    for (std::string& entry : entries_) out.push_back(entry.data());
    out.push_back(nullptr);
    return out;
  }

 private:
  static bool is(const std::string& entry, std::string_view name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
           entry[name.size()] == '=';
  }
  std::vector<std::string> entries_;
};

int fail(int status, const std::string& message) {
  std::cerr << "vramspill run: " << message << "\n";
  return status;
}

// The shim: --library, else $VRAMSPILL_LIBRARY, else the one installed or built with this
// program (default_shim_library).
fs::path library_path(const RunOptions& options, const Environment& environment) {
  if (!options.library.empty()) return fs::absolute(options.library);
  if (auto from_environment = environment.get(kLibraryVariable);
      from_environment && !from_environment->empty())
    return fs::absolute(*from_environment);
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  // Without /proc, relative to the working directory: reported as missing below.
  return default_shim_library(error ? fs::path() : self.parent_path(),
                              VRAMSPILL_LIBDIR_FROM_BINDIR);
}

// Note [The policy the job reads]
// `run` checks the policy, then the job reads it again: the shim in each of its processes reads
// VRAMSPILL_CONFIG when that process starts CUDA, possibly much later. So the path handed over
// must name, for every process of the job, the file that was checked:
// - Only regular files are policies (Note [Only regular files] in config/config.h): a pipe
//   (`-c /dev/stdin` from a pipe, `-c <(...)`) is read once and is empty, or gone, when the
//   job reads it, and is refused here, as the shim would refuse it.
// - A path through a process's own descriptors (/dev/stdin, /dev/fd/N, /proc/self/fd/N) names
//   another file in the job, or none: it is replaced by the path of the file it leads to, as is
//   any symbolic link.
// A policy edited after `run` checked it is read as edited, and checked again by the shim, which
// fails cuInit on an invalid one (never defaults). Handing over a private copy instead (a temp
// file, a memfd) would freeze the checked bytes, but a temp file outlives the job (`run` execs
// and cannot remove it) and a memfd's /proc/<pid>/fd path dies with the process that holds it
// and is closed by children started with close_fds.
//
// The path to hand the job for the policy at `path`: the real path of the file opened for it.
// A path that cannot be opened as a regular file stays as it is, made absolute (reading the
// configuration reports why, in the shim's words); nullopt, with `problem`, when the file opened
// has no path that leads to it.
std::optional<std::string> policy_path_for_job(const std::string& path, std::string& problem) {
  std::string unreadable;
  const int fd = open_regular_file(path, O_RDONLY, 0, unreadable);
  if (fd < 0) return fs::absolute(path).lexically_normal().string();
  std::error_code error;
  const fs::path real = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), error);
  struct stat opened {};
  struct stat named {};
  const bool same = !error && fstat(fd, &opened) == 0 && stat(real.c_str(), &named) == 0 &&
                    opened.st_dev == named.st_dev && opened.st_ino == named.st_ino;
  close(fd);
  if (same) return real.string();
  problem = "it has no path the job could open it by (was it deleted?); give the policy's own path";
  return std::nullopt;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return a == b || fs::equivalent(a, b, error);
}

// LD_PRELOAD with the shim first (it must interpose dlsym before anything else does), any other
// preloaded libraries kept after it, and an earlier copy of the shim dropped.
std::string preload_value(const std::string& library, const std::optional<std::string>& current) {
  std::string value = library;
  if (!current) return value;
  std::size_t start = 0;
  while (start <= current->size()) {
    std::size_t end = current->find_first_of(": ", start);
    if (end == std::string::npos) end = current->size();
    const std::string item = current->substr(start, end - start);
    if (!item.empty() && !same_file(item, library)) value += ":" + item;
    start = end + 1;
  }
  return value;
}

// --budget, --mode and --set as VRAMSPILL_* variables; false (reported) on an unknown key.
// Each value is checked here, so that a bad one is reported with the option the user gave, not
// the variable it becomes.
bool apply_settings(const RunOptions& options, Environment& environment) {
  struct Setting {
    std::string name;  // "section.key"
    std::string value;
    std::string given;  // the option, for errors
  };
  std::vector<Setting> settings;
  if (!options.budget.empty()) settings.push_back({"device.budget", options.budget, "--budget"});
  if (!options.mode.empty()) settings.push_back({"spill.mode", options.mode, "--mode"});
  for (const std::string& setting : options.settings) {
    const std::size_t equals = setting.find('=');
    if (equals == std::string::npos) {
      fail(kRunBadInput, "--set '" + setting + "': expected SECTION.KEY=VALUE");
      return false;
    }
    settings.push_back({setting.substr(0, equals), setting.substr(equals + 1), "--set"});
  }
  for (const auto& [name, value, given] : settings) {
    const std::size_t dot = name.find('.');
    const OptionSpec* option =
        dot == std::string::npos ? nullptr : find_option(name.substr(0, dot), name.substr(dot + 1));
    if (option == nullptr) {
      std::vector<std::string> known;
      for (const OptionSpec& spec : vramspill::options()) known.push_back(option_name(spec));
      const std::optional<std::string> match = closest_match(name, known);
      std::string message = "unknown option '" + name + "'";
      if (match) message += " (did you mean " + *match + "?)";
      message += "; the options are:";
      for (const std::string& item : known) message += " " + item;
      fail(kRunBadInput, message);
      return false;
    }
    if (const ParsedOption parsed = parse_option_text(*option, value); !parsed.ok()) {
      fail(kRunBadInput, given + " " + (given == "--set" ? name + "=" : "") + "'" + value +
                             "': " + parsed.problem + "; expected " + expected_text(*option));
      return false;
    }
    environment.set(env_name(*option), value);
  }
  return true;
}

}  // namespace

CommandStart find_command_start(int argc, const char* const* argv, int first) {
  int index = first;
  while (index < argc) {
    const std::string_view argument = argv[index];
    if (argument == "--") return {index + 1, true};
    if (argument.size() < 2 || argument[0] != '-') return {index, false};  // the command
    // "--config=job.toml" and "-cjob.toml" carry their value; "-c job.toml" takes the next word.
    index += takes_value(argument) ? 2 : 1;
  }
  return {argc, false};
}

CLI::App* add_run_command(CLI::App& app, RunOptions& options) {
  CLI::App* run = app.add_subcommand(
      "run", "Check a policy, then run a command with libvramspill.so preloaded.");
  run->add_option("COMMAND", options.usage_only, "The command to run, and its arguments.");
  run->add_option("-c,--config", options.config,
                  "The policy (a regular TOML file, at most 1 MiB). It is checked before the "
                  "command starts and passed to the shim as VRAMSPILL_CONFIG, by its real path "
                  "(symbolic links and /dev/stdin resolved; a pipe is refused). Without it, the "
                  "VRAMSPILL_CONFIG already set, if any, is used.")
      ->type_name("FILE");
  run->add_option("--budget", options.budget,
                  "Device memory the job may use, e.g. 20GiB or 90% (sets "
                  "VRAMSPILL_DEVICE_BUDGET, which beats the policy file).")
      ->type_name("SIZE");
  std::string modes;
  for (const std::string_view mode : kSpillModeNames)
    modes.append(modes.empty() ? "" : ", ").append(mode);
  run->add_option("--mode", options.mode,
                  "What happens to allocations over the budget: one of " + modes +
                      " (sets VRAMSPILL_SPILL_MODE).")
      ->type_name("MODE");
  run->add_option("--set", options.settings,
                  "Any option of the policy, e.g. --set log.level=debug (sets its VRAMSPILL_* "
                  "variable). May be repeated.")
      ->type_name("SECTION.KEY=VALUE");
  run->add_option("--library", options.library,
                  "The shim to preload. Default: $VRAMSPILL_LIBRARY, else the libvramspill.so "
                  "installed with this program (in the install's library directory, e.g. "
                  "../lib, from this program's directory) or built with it (../lib). It must be "
                  "a shared library for this machine, on a path without spaces or colons "
                  "(LD_PRELOAD's separators).")
      ->type_name("PATH");
  run->footer(
      "The command runs with libvramspill.so first in LD_PRELOAD (libraries already there stay, "
      "after it) and VRAMSPILL_CONFIG set; the configuration is read exactly as the shim will "
      "read it: the policy file, then VRAMSPILL_* variables of the environment and the options "
      "above, which beat the file. An invalid configuration is reported, one line per problem "
      "(file:line:column, key, what was expected), and the command is not started. The command "
      "is everything after `--`, or from the first argument that is not an option of run.\n\n"
      "vramspill replaces itself with the command, so the exit status is the command's; as the "
      "first process of a PID namespace (a container's command) it stays as the job's init "
      "instead, passing signals on to it and reaping orphans, and exits with the job's status "
      "(128 + the signal that ended it). Its own: "
      "1 when the shim library is missing or cannot be preloaded, 2 for a usage error or an "
      "invalid configuration, "
      "126 when the command cannot be executed, 127 when it is not found.\n\n"
      "Example: vramspill run -c job.toml -- python train.py");
  return run;
}

int run_run_command(const RunOptions& options, const std::vector<std::string>& command) {
  if (command.empty())
    return fail(kRunBadInput,
                "no command given (usage: vramspill run [OPTIONS] [--] COMMAND "
                "[ARGS...]; see vramspill run --help)");
  Environment environment;

  const fs::path library = library_path(options, environment);
  environment.remove(kLibraryVariable);
  std::error_code error;
  if (!fs::is_regular_file(library, error) || access(library.c_str(), R_OK) != 0)
    return fail(kRunCannotStart, "cannot find the shim library " + library.string() +
                                     " (give its path with --library or VRAMSPILL_LIBRARY)");
  // Note [A preload that cannot load]
  if (const std::string problem = shim_library_problem(library.string()); !problem.empty())
    return fail(kRunCannotStart, "cannot preload the shim library " + library.string() + ": " +
                                     problem + " (give its path with --library or "
                                     "VRAMSPILL_LIBRARY)");

  // Note [The policy the job reads]. A policy that cannot be opened is left as it is: reading
  // it below reports why, in the shim's words.
  const std::string policy =
      options.config.empty() ? environment.get(kConfigFileVariable).value_or("") : options.config;
  if (!policy.empty()) {
    std::string problem;
    const std::optional<std::string> for_job = policy_path_for_job(policy, problem);
    if (!for_job) return fail(kRunBadInput, "the policy '" + policy + "': " + problem);
    environment.set(kConfigFileVariable, *for_job);
  }
  if (!apply_settings(options, environment)) return kRunBadInput;

  // The environment the command will have, read as the shim will read it.
  std::vector<char*> pointers = environment.pointers();
  const ConfigResult config = load_config(pointers.data());
  if (!config) {
    std::cerr << "vramspill run: invalid configuration; the command was not started:\n";
    for (const std::string& problem : config.error().problems) std::cerr << "  " << problem << "\n";
    return kRunBadInput;
  }

  environment.set("LD_PRELOAD", preload_value(library.string(), environment.get("LD_PRELOAD")));
  pointers = environment.pointers();
  std::vector<char*> arguments;
  for (const std::string& word : command) arguments.push_back(const_cast<char*>(word.c_str()));
  arguments.push_back(nullptr);
  if (getpid() == 1) {
    // Note [vramspill run as the first process]
    if (const std::optional<int> status = run_as_init(arguments.data(), pointers.data()))
      return *status;
  } else {
    execvpe(arguments[0], arguments.data(), pointers.data());
  }

  // Only on failure, worded as a shell would.
  const int exec_error = errno;
  if (exec_error == ENOENT) {
    const bool is_path = command[0].find('/') != std::string::npos;
    return fail(kRunNotFound, command[0] + (is_path ? ": no such file" : ": command not found"));
  }
  return fail(kRunNotExecutable, "cannot execute " + command[0] + ": " + std::strerror(exec_error));
}

}  // namespace vramspill::cli
