#include "exporter_launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "exporter_command.h"

namespace vramspill::cli {

CLI::App* add_exporter_command(CLI::App& app) {
  return app.add_subcommand("exporter", kExporterSummary);
}

int exec_exporter(const char* const* arguments, int count) {
  // Note [The exporter is a program of its own]. Without /proc, relative to the working
  // directory: reported as missing below.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string program =
      ((error ? std::filesystem::path() : self.parent_path()) / "vramspill-exporter").string();
  // execv's argv is char* const* for C's sake; it writes to none of them.
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (int i = 0; i < count; ++i) argv.push_back(const_cast<char*>(arguments[i]));
  argv.push_back(nullptr);
  execv(program.c_str(), argv.data());
  std::cerr << "vramspill exporter: cannot run " << program << ": " << std::strerror(errno)
            << " (it is installed beside vramspill)\n";
  return 1;
}

}  // namespace vramspill::cli
