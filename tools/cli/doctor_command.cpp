#include "doctor_command.h"

#include <iostream>
#include <optional>
#include <vector>

#include "doctor/checks.h"
#include "doctor/driver_probe.h"
#include "doctor/gpu_facts.h"
#include "doctor/host_facts.h"
#include "doctor/report.h"
#include "standard_output.h"
#include "util/sizes.h"

namespace vramspill::cli {
namespace {

constexpr const char* kUnlimited = "unlimited";

// --memlock: nullopt when not given; otherwise the limit (itself nullopt for "unlimited").
std::optional<doctor::MemlockLimit> memlock_override(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text == kUnlimited) return doctor::MemlockLimit();
  return doctor::MemlockLimit(parse_size(text));  // checked by the option's validator
}

}  // namespace

CLI::App* add_doctor_command(CLI::App& app, DoctorOptions& options) {
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Check this machine and its GPUs for what spilling needs, with the fixes.");
  doctor->add_flag("--json", options.json,
                   "Print the findings as JSON (the schema is below) instead of text.");
  doctor->add_flag("-q,--quiet", options.quiet,
                   "Print only warnings and blocks (nothing when all is well), without the "
                   "summary line.");
  doctor
      ->add_option("--driver", options.driver,
                   "The CUDA driver library to load (default libcuda.so.1, as the dynamic "
                   "loader finds it), or `none` to find the GPUs in sysfs only, unchecked.")
      ->type_name("LIBRARY");
  doctor
      ->add_option("--root", options.root, "For tests: read /proc and /sys below DIR instead of /.")
      ->check(CLI::ExistingDirectory.description(""))
      ->type_name("DIR");
  doctor
      ->add_option("--memlock", options.memlock,
                   "For tests: take this as RLIMIT_MEMLOCK (a size, or `unlimited`) instead of "
                   "asking getrlimit.")
      ->check(CLI::Validator(
          [](const std::string& text) {
            return text == kUnlimited || parse_size(text) ? std::string()
                                                          : "not a size or `unlimited`: " + text;
          },
          "", ""))
      ->type_name("SIZE");
  doctor->footer(
      "Checks, each printed as `VERDICT CHECK MESSAGE` with a `fix:` line unless ok: driver "
      "(loaded with dlopen, never linked; its version), gpu (each GPU found: by the driver, else "
      "NVIDIA display devices in /sys/bus/pci/devices), per GPU integrated, managed (concurrent "
      "managed access), host-pool (unified addressing and mapped host memory), vmm (VMM with "
      "host-located memory), pools (memory pools), pcie (link generation and width from sysfs), "
      "numa (the nodes, and each GPU's node); then host-ram (RAM against all device memory: "
      "training wants 1.5x), mem-available (MemAvailable), cgroup (what the memory cgroup's "
      "limit leaves, v1 or v2), memlock (RLIMIT_MEMLOCK against the default host limit), shm "
      "(the size of the /dev/shm tmpfs, from /proc/self/mounts), swappiness (vm.swappiness, "
      "when there is swap) and thp (transparent huge pages).\n\n"
      "Verdicts: ok; warn, spilling works but slower or smaller than it could; block, spilling "
      "does not work here.\n\n"
      "JSON: {\"vramspill_doctor_version\": 1, \"blocked\": BOOL, \"findings\": [{\"check\": "
      "NAME, \"gpu\": INDEX or null, \"verdict\": \"ok\"|\"warn\"|\"block\", \"message\": TEXT, "
      "\"fix\": TEXT or \"\", \"figures\": {NAME: NUMBER or null, ...}}, ...]}; each "
      "figure's name carries its unit (mem_total_bytes, pcie_speed_gts).\n\n"
      "Exit status: 0 when nothing blocks spilling, 1 when something does or standard output "
      "cannot be written, 2 for a usage error.");
  return doctor;
}

int run_doctor_command(const DoctorOptions& options) {
  using namespace doctor;
  const DriverProbe driver = probe_driver(options.driver);
  const std::vector<Gpu> gpus = find_gpus(options.root, driver);
  const HostFacts host = read_host_facts(options.root, memlock_override(options.memlock));
  std::vector<Finding> findings;
  check_gpus(driver, gpus, host, findings);
  check_host(host, gpus, findings);
  std::cout << render_report(findings, {.json = options.json, .quiet = options.quiet});
  return exit_status_after_output("vramspill doctor",
                                  any_blocks(findings) ? kDoctorBlocked : kDoctorNothingBlocks);
}

}  // namespace vramspill::cli
