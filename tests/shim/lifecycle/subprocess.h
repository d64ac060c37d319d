// Runs a program with a chosen environment and collects its exit status, standard output and
// standard error: the life-cycle tests compare runs with and without the shim preloaded.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace vramspill::testing {

struct RunResult {
  int exit_code = -1;  // when the program exited
  int signal = 0;      // when a signal killed it
  std::string out;
  std::string err;

  bool exited(int code) const { return signal == 0 && exit_code == code; }
  std::string describe() const {
    std::string text = signal != 0 ? "killed by signal " + std::to_string(signal)
                                   : "exit code " + std::to_string(exit_code);
    return text + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
  }
};

// The environment of this process with `set` applied; a value of "\x01unset" removes the
// variable.
inline constexpr const char* kUnset = "\x01unset";
using Environment = std::map<std::string, std::string>;

inline std::vector<std::string> make_environment(const Environment& set) {
  Environment merged;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const auto equals = text.find('=');
    if (equals != std::string::npos) merged[text.substr(0, equals)] = text.substr(equals + 1);
  }
  for (const auto& [name, value] : set) {
    if (value == kUnset)
      merged.erase(name);
    else
      merged[name] = value;
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

inline RunResult run_program(const std::vector<std::string>& argv, const Environment& set,
                             int timeout_seconds = 120) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> environment = make_environment(set);
  std::vector<char*> env_pointers;
  for (std::string& entry : environment) env_pointers.push_back(entry.data());
  env_pointers.push_back(nullptr);
  std::vector<std::string> arguments = argv;
  std::vector<char*> arg_pointers;
  for (std::string& argument : arguments) arg_pointers.push_back(argument.data());
  arg_pointers.push_back(nullptr);

  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, arg_pointers[0], &actions, nullptr, arg_pointers.data(),
                                  env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(spawned));
  }

  RunResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  int waited_ms = 0;
  while (open_count > 0) {
    const int ready = poll(fds, 2, 1000);
    if (ready == 0 && (waited_ms += 1000) > timeout_seconds * 1000) {
      kill(pid, SIGKILL);
      result.err += "\n[test harness] killed after " + std::to_string(timeout_seconds) + " s\n";
      break;
    }
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buffer[4096];
      const ssize_t got = read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (pollfd& fd : fds)
    if (fd.fd >= 0) close(fd.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace vramspill::testing
