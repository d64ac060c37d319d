// `vramspill exporter`, as the vramspill command has it: a line in --help, and an exec of the
// exporter program (exporter_command.h).
//
// Note [The exporter is a program of its own]
// The exporter serves HTTP with cpp-httplib, which Debian ships as a shared library that pulls in
// OpenSSL, brotli and zlib. vramspill must run where only it and the shim were copied
// (tools/container/Dockerfile) and on minimal machines, so the exporter is a program of its own,
// vramspill-exporter, built into and installed in the same directory as vramspill
// (tools/cli/CMakeLists.txt, cmake/VramspillInstall.cmake), and only it links cpp-httplib
// (tests/cli/check_not_linked.cmake keeps it so). main() hands everything after
// `exporter` to it before CLI11 parses, --help included, so `vramspill exporter ARGS...` answers
// exactly as `vramspill-exporter ARGS...` does.
#pragma once

#include <CLI/CLI.hpp>

namespace vramspill::cli {

// Adds the command to `app`, with no options of its own: they are the exporter's.
CLI::App* add_exporter_command(CLI::App& app);

// Execs vramspill-exporter from this program's directory with the `count` arguments at
// `arguments`; returns only when it cannot, with exit status 1, after saying why.
int exec_exporter(const char* const* arguments, int count);

}  // namespace vramspill::cli
