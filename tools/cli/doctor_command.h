// `vramspill doctor`: checks this machine and its GPUs for what spilling needs and prints each
// finding with a verdict (ok, warn, block) and the fix. The checks are in doctor/: the facts
// (host_facts, driver_probe, pci_devices, gpu_facts), the verdicts (checks) and the report.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vramspill::cli {

struct DoctorOptions {
  bool json = false;
  bool quiet = false;
  std::string driver = "libcuda.so.1";  // "none": sysfs only
  std::string root;                     // empty: the real /proc and /sys
  std::string memlock;                  // empty: getrlimit; else a size or "unlimited"
};

// Exit statuses of `vramspill doctor` (2 for usage errors, as every command).
inline constexpr int kDoctorNothingBlocks = 0;
inline constexpr int kDoctorBlocked = 1;

CLI::App* add_doctor_command(CLI::App& app, DoctorOptions& options);

int run_doctor_command(const DoctorOptions& options);

}  // namespace vramspill::cli
