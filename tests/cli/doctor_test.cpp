// `vramspill doctor`, run as a program on fake /proc and /sys trees (--root) and on simcuda (the
// driver path): each check's verdicts, the exit status, --quiet and --json.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using vramspill::testing::Environment;
using vramspill::testing::kUnset;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

constexpr const char* kGpuAddress = "0000:41:00.0";
constexpr const char* kSimcudaAddress = "0000:18:00.0";  // simcuda's device 0 (PCI bus 0x18)

// A directory that stands for "/", holding a healthy machine until a test changes it: 64 GiB of
// RAM, 48 GiB available, no swap, no memory cgroup, an 8 GiB /dev/shm, THP madvise, one NUMA
// node, one NVIDIA GPU on a full Gen5 x16 link.
class FakeMachine {
 public:
  FakeMachine() {
    std::string pattern = (fs::temp_directory_path() / "vramspill-doctor-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
    meminfo(64 << 20, 48 << 20, 0);
    write("/proc/self/mounts",
          "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
          "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=8388608k 0 0\n");
    write("/proc/sys/vm/swappiness", "60\n");
    write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
    numa_node(0, 64 << 20);
    gpu(kGpuAddress);
  }
  ~FakeMachine() { fs::remove_all(root_); }
  FakeMachine(const FakeMachine&) = delete;
  FakeMachine& operator=(const FakeMachine&) = delete;

  const std::string& root() const { return root_; }

  void write(const std::string& file, const std::string& text) const {
    const fs::path full = root_ + file;
    fs::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  void remove(const std::string& path) const { fs::remove_all(root_ + path); }

  void meminfo(uint64_t total_kib, uint64_t available_kib, uint64_t swap_kib) const {
    write("/proc/meminfo",
          "MemTotal:       " + std::to_string(total_kib) +
              " kB\nMemFree:         1000000 kB\nMemAvailable:   " + std::to_string(available_kib) +
              " kB\nSwapTotal:      " + std::to_string(swap_kib) + " kB\n");
  }
  void numa_node(int id, uint64_t total_kib) const {
    write("/sys/devices/system/node/node" + std::to_string(id) + "/meminfo",
          "Node " + std::to_string(id) + " MemTotal:       " + std::to_string(total_kib) +
              " kB\nNode " + std::to_string(id) + " MemFree:        1000 kB\n");
  }
  // An NVIDIA 3D controller at `address`.
  void gpu(const std::string& address, int numa = 0, const std::string& speed = "32.0 GT/s PCIe",
           int width = 16) const {
    const std::string directory = "/sys/bus/pci/devices/" + address;
    write(directory + "/vendor", "0x10de\n");
    write(directory + "/class", "0x030200\n");
    write(directory + "/device", "0x2335\n");
    write(directory + "/numa_node", std::to_string(numa) + "\n");
    write(directory + "/current_link_speed", speed + "\n");
    write(directory + "/current_link_width", std::to_string(width) + "\n");
    write(directory + "/max_link_speed", "32.0 GT/s PCIe\n");
    write(directory + "/max_link_width", "16\n");
  }
  // The process in cgroup v2 group `group` (memory.max `max`: no limit).
  void cgroup_v2(const std::string& group, const std::string& max, uint64_t current) const {
    write("/proc/self/cgroup", "0::" + group + "\n");
    write("/proc/self/mountinfo",
          "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    write("/sys/fs/cgroup" + group + "/memory.max", max + "\n");
    write("/sys/fs/cgroup" + group + "/memory.current", std::to_string(current) + "\n");
  }
  // The process in cgroup v1's memory group `group`.
  void cgroup_v1(const std::string& group, uint64_t limit, uint64_t usage) const {
    write("/proc/self/cgroup", "4:memory:" + group + "\n1:name=systemd:/\n");
    write("/proc/self/mountinfo",
          "40 30 0:35 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n");
    write("/sys/fs/cgroup/memory" + group + "/memory.limit_in_bytes", std::to_string(limit) + "\n");
    write("/sys/fs/cgroup/memory" + group + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
  }

 private:
  std::string root_;
};

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kGiBInKiB = uint64_t{1} << 20;

// The caller's environment without what would change the driver or the GPUs, plus `set`.
Environment clean(const Environment& set) {
  Environment environment = {{"LD_PRELOAD", kUnset},
                             {"LD_LIBRARY_PATH", kUnset},
                             {"SIMCUDA_ATTRS", kUnset},
                             {"SIMCUDA_VRAM", kUnset},
                             {"SIMCUDA_DEVICES", kUnset}};
  for (const auto& [name, value] : set) environment[name] = value;
  return environment;
}

RunResult run_with(const std::vector<std::string>& arguments, const Environment& set) {
  std::vector<std::string> argv = {VRAMSPILL_CLI};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  return run_program(argv, clean(set), 60);
}

// doctor on the fake machine, without a driver: the GPUs come from its sysfs.
RunResult doctor(const FakeMachine& machine, std::vector<std::string> extra = {}) {
  std::vector<std::string> arguments = {"doctor", "--root",    machine.root(), "--driver",
                                        "none",   "--memlock", "unlimited"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  return run_with(arguments, {});
}

// doctor on the fake machine, with simcuda as the driver (found as libcuda.so.1); RLIMIT_MEMLOCK
// is unlimited unless `extra` says otherwise.
RunResult doctor_on_simcuda(const FakeMachine& machine, const Environment& simcuda,
                            std::vector<std::string> extra = {}) {
  std::vector<std::string> arguments = {"doctor", "--root", machine.root()};
  if (std::find(extra.begin(), extra.end(), "--memlock") == extra.end())
    arguments.insert(arguments.end(), {"--memlock", "unlimited"});
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  Environment environment = simcuda;
  environment["LD_LIBRARY_PATH"] = VRAMSPILL_TEST_SIMCUDA_DIR;
  return run_with(arguments, environment);
}

// The report's line for `check` (of GPU `gpu`, if given): "VERDICT CHECK [gpu N: ]MESSAGE".
std::string line_of(const std::string& out, const std::string& check, int gpu = -1) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string verdict, name, gpu_word, index;
    words >> verdict >> name >> gpu_word >> index;
    if (name != check) continue;
    if (gpu < 0 || (gpu_word == "gpu" && index == std::to_string(gpu) + ":")) return line;
  }
  return "";
}

std::string verdict_of(const RunResult& result, const std::string& check, int gpu = -1) {
  const std::string line = line_of(result.out, check, gpu);
  return line.substr(0, line.find(' '));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- the whole report --------------------------------------------------------------------------

TEST(DoctorReport, a_healthy_machine_without_driver_prints_every_check_and_exits_0) {
  const FakeMachine machine;
  const RunResult result = doctor(machine);
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out,
            "warn  driver        not loaded (--driver none): the GPUs' features are not checked\n"
            "                    fix: run vramspill doctor without --driver none\n"
            "ok    gpu           gpu 0: NVIDIA PCI device 0x2335, PCI 0000:41:00.0 (from sysfs)\n"
            "ok    pcie          gpu 0: PCIe Gen5 x16\n"
            "ok    numa          one NUMA node: every GPU is near all of host memory\n"
            "ok    host-ram      64.0 GiB of RAM (device memory unknown without the driver)\n"
            "ok    mem-available 48.0 GiB available (spills may take half of it by default)\n"
            "ok    cgroup        no memory cgroup: no container memory limit\n"
            "ok    memlock       RLIMIT_MEMLOCK unlimited\n"
            "ok    shm           /dev/shm holds 8.0 GiB\n"
            "ok    swappiness    vm.swappiness 60, no swap\n"
            "ok    thp           transparent huge pages: madvise\n"
            "\n"
            "nothing blocks spilling: 1 warning\n");
}

TEST(DoctorReport, json_lists_the_findings_and_whether_anything_blocks) {
  const FakeMachine machine;
  machine.write("/proc/sys/vm/swappiness", "not a number\n");
  const RunResult result = doctor(machine, {"--json", "--quiet"});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out,
            "{\n"
            "  \"vramspill_doctor_version\": 1,\n"
            "  \"blocked\": false,\n"
            "  \"findings\": [\n"
            "    {\"check\": \"driver\", \"gpu\": null, \"verdict\": \"warn\", \"message\": "
            "\"not loaded (--driver none): the GPUs' features are not checked\", \"fix\": \"run "
            "vramspill doctor without --driver none\", \"figures\": {}},\n"
            "    {\"check\": \"swappiness\", \"gpu\": null, \"verdict\": \"warn\", \"message\": "
            "\"cannot read /proc/sys/vm/swappiness\", \"fix\": \"check that /proc is mounted (and "
            "readable) here\", \"figures\": {\"swappiness\": null, \"swap_bytes\": 0}}\n"
            "  ]\n"
            "}\n");

  machine.remove("/sys/bus/pci/devices");
  const RunResult blocked = doctor(machine, {"--json"});
  ASSERT_TRUE(blocked.exited(1)) << blocked.describe();
  EXPECT_TRUE(contains(blocked.out, "\"blocked\": true,")) << blocked.out;
  EXPECT_TRUE(contains(blocked.out,
                       "{\"check\": \"gpu\", \"gpu\": null, \"verdict\": \"block\", "
                       "\"message\": \"no NVIDIA GPU in /sys/bus/pci/devices\""))
      << blocked.out;
  EXPECT_TRUE(contains(blocked.out, "{\"check\": \"memlock\", \"gpu\": null, \"verdict\": \"ok\""))
      << blocked.out;
  // The numbers each check read, as numbers; null where there is none (memlock: unlimited; no
  // driver: no device memory).
  for (const char* figures :
       {"\"figures\": {\"mem_total_bytes\": 68719476736, \"device_memory_bytes\": null}}",
        "\"figures\": {\"mem_available_bytes\": 51539607552}}",
        "\"figures\": {\"memlock_bytes\": null}}", "\"figures\": {\"shm_bytes\": 8589934592}}",
        "\"figures\": {\"numa_nodes\": 1}}"})
    EXPECT_TRUE(contains(blocked.out, figures)) << figures << " not in\n" << blocked.out;
}

TEST(DoctorReport, quiet_prints_only_warnings_and_blocks) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  const RunResult healthy = doctor_on_simcuda(machine, {}, {"--quiet"});
  ASSERT_TRUE(healthy.exited(0)) << healthy.describe();
  EXPECT_EQ(healthy.out, "");

  machine.meminfo(64 * kGiBInKiB, 512 << 10, 0);
  const RunResult blocked = doctor_on_simcuda(machine, {}, {"-q"});
  ASSERT_TRUE(blocked.exited(1)) << blocked.describe();
  EXPECT_EQ(blocked.out,
            "block mem-available only 512.0 MiB available: spills have no room\n"
            "                    fix: free host memory (other jobs, files in tmpfs), or add "
            "memory\n");
}

TEST(DoctorReport, usage_errors_exit_2_and_help_documents_the_checks) {
  EXPECT_TRUE(run_with({"doctor", "--root", "/no/such/directory"}, {}).exited(2));
  EXPECT_TRUE(run_with({"doctor", "--memlock", "lots"}, {}).exited(2));
  EXPECT_TRUE(run_with({"doctor", "--frobnicate"}, {}).exited(2));
  const RunResult help = run_with({"doctor", "--help"}, {});
  ASSERT_TRUE(help.exited(0)) << help.describe();
  for (const char* part : {"--json", "--quiet", "--driver", "--root", "--memlock", "memlock",
                           "swappiness", "pcie", "vramspill_doctor_version", "\"figures\"", "Exit status"})
    EXPECT_TRUE(contains(help.out, part)) << part << " missing from\n" << help.out;
}

// --- the driver and the GPUs -------------------------------------------------------------------

TEST(DoctorDriver, simcuda_is_found_as_libcuda_with_its_device_and_features) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  const RunResult result =
      doctor_on_simcuda(machine, {{"SIMCUDA_DEVICES", "2"}, {"SIMCUDA_VRAM", "16GiB"}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(line_of(result.out, "driver"),
            "ok    driver        CUDA driver 13.0 (13000) from libcuda.so.1");
  EXPECT_EQ(line_of(result.out, "gpu", 0),
            "ok    gpu           gpu 0: simcuda simulated GPU 0, 16.0 GiB, PCI 0000:18:00.0");
  EXPECT_EQ(line_of(result.out, "gpu", 1),
            "ok    gpu           gpu 1: simcuda simulated GPU 1, 16.0 GiB, PCI 0000:19:00.0");
  for (const char* check : {"managed", "host-pool", "vmm", "pools", "pcie"})
    EXPECT_EQ(verdict_of(result, check, 0), "ok") << check << "\n" << result.out;
  // simcuda's device 1 (bus 0x19) is not in the fake sysfs.
  EXPECT_EQ(verdict_of(result, "pcie", 1), "warn") << result.out;
  EXPECT_TRUE(contains(line_of(result.out, "pcie", 1), "no NVIDIA device 0000:19:00.0"));
  EXPECT_EQ(line_of(result.out, "host-ram"),
            "ok    host-ram      64.0 GiB of RAM for 32.0 GiB of device memory (2.0x)");
}

TEST(DoctorDriver, a_driver_that_does_not_load_or_fails_blocks) {
  const FakeMachine machine;
  RunResult result = run_with({"doctor", "--root", machine.root(), "--driver",
                               "/no/such/libcuda.so.1", "--memlock", "unlimited"},
                              {});
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(verdict_of(result, "driver"), "block") << result.out;
  EXPECT_TRUE(contains(line_of(result.out, "driver"), "cannot load the driver: /no/such/"));
  // It falls back to sysfs for the GPUs.
  EXPECT_EQ(verdict_of(result, "gpu", 0), "ok") << result.out;

  result = run_with({"doctor", "--root", machine.root(), "--driver", CLI_TEST_EMPTY_LIBRARY}, {});
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_TRUE(contains(line_of(result.out, "driver"), "has no cuInit: not a CUDA driver"))
      << result.out;

  result = doctor_on_simcuda(machine, {{"SIMCUDA_DEVICES", "0"}});  // cuInit fails
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_TRUE(contains(line_of(result.out, "driver"),
                       "block driver        libcuda.so.1 loaded, but cuInit returned "
                       "CUDA_ERROR_INVALID_VALUE"))
      << result.out;
}

TEST(DoctorDriver, no_gpu_in_sysfs_blocks) {
  const FakeMachine machine;
  machine.remove("/sys/bus/pci/devices/" + std::string(kGpuAddress));
  machine.write("/sys/bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n");  // not NVIDIA
  machine.write("/sys/bus/pci/devices/0000:00:1f.0/class", "0x030000\n");
  machine.write("/sys/bus/pci/devices/0000:02:00.1/vendor", "0x10de\n");  // NVIDIA, not a GPU
  machine.write("/sys/bus/pci/devices/0000:02:00.1/class", "0x040300\n");
  const RunResult result = doctor(machine);
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(line_of(result.out, "gpu"),
            "block gpu           no NVIDIA GPU in /sys/bus/pci/devices");
  EXPECT_EQ(line_of(result.out, "numa"), "ok    numa          one NUMA node");  // no GPU to be near
}

TEST(DoctorDriver, spill_features_each_verdict) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  const auto with_attributes = [&](const std::string& attributes) {
    return doctor_on_simcuda(machine, {{"SIMCUDA_ATTRS", attributes}});
  };
  RunResult result = with_attributes("CONCURRENT_MANAGED_ACCESS=0");
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(verdict_of(result, "managed", 0), "warn") << result.out;
  EXPECT_EQ(verdict_of(result, "host-pool", 0), "ok") << result.out;

  result = with_attributes("CAN_MAP_HOST_MEMORY=0");
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(verdict_of(result, "managed", 0), "ok") << result.out;
  EXPECT_EQ(verdict_of(result, "host-pool", 0), "warn") << result.out;

  result = with_attributes("CONCURRENT_MANAGED_ACCESS=0,UNIFIED_ADDRESSING=0");
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(verdict_of(result, "host-pool", 0), "block") << result.out;

  result = with_attributes("INTEGRATED=1");
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(verdict_of(result, "integrated", 0), "block") << result.out;
  EXPECT_EQ(line_of(result.out, "managed", 0), "") << "an integrated GPU has no spill tiers";

  result = with_attributes("HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0,MEMORY_POOLS_SUPPORTED=0");
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(line_of(result.out, "vmm", 0),
                       "warn  vmm           gpu 0: virtual memory "
                       "management without host-located memory"))
      << result.out;
  EXPECT_EQ(verdict_of(result, "pools", 0), "warn") << result.out;

  result = with_attributes("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0");
  EXPECT_TRUE(contains(line_of(result.out, "vmm", 0), "no virtual memory management"))
      << result.out;
}

TEST(DoctorDriver, pcie_link_each_verdict) {
  FakeMachine machine;
  EXPECT_EQ(line_of(doctor(machine).out, "pcie"), "ok    pcie          gpu 0: PCIe Gen5 x16");

  machine.gpu(kGpuAddress, 0, "2.5 GT/s PCIe", 16);  // idle: the link slows down
  EXPECT_EQ(line_of(doctor(machine).out, "pcie"),
            "ok    pcie          gpu 0: PCIe Gen5 x16 (Gen1 x16 now: an idle GPU slows its link)");

  machine.gpu(kGpuAddress, 0, "32.0 GT/s PCIe", 8);
  const RunResult narrow = doctor(machine);
  EXPECT_TRUE(narrow.exited(0)) << narrow.describe();
  EXPECT_EQ(line_of(narrow.out, "pcie"),
            "warn  pcie          gpu 0: PCIe link Gen5 x8 of Gen5 x16: spills cross it at a "
            "fraction of its bandwidth");

  machine.write("/sys/bus/pci/devices/" + std::string(kGpuAddress) + "/max_link_speed",
                "Unknown\n");
  EXPECT_EQ(line_of(doctor(machine).out, "pcie"),
            "warn  pcie          gpu 0: sysfs does not report the PCIe link");
}

TEST(DoctorDriver, numa_nodes_and_where_each_gpu_is_attached) {
  FakeMachine machine;
  machine.numa_node(1, 16 * kGiBInKiB);
  machine.gpu(kSimcudaAddress, 1);
  machine.gpu("0000:19:00.0", 0);
  RunResult result =
      doctor_on_simcuda(machine, {{"SIMCUDA_DEVICES", "2"}, {"SIMCUDA_VRAM", "8GiB"}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(line_of(result.out, "numa"),
            "ok    numa          2 NUMA nodes: node 0 64.0 GiB, node 1 16.0 GiB");
  EXPECT_EQ(line_of(result.out, "numa", 0), "ok    numa          gpu 0: attached to node 1");
  EXPECT_EQ(line_of(result.out, "numa", 1), "ok    numa          gpu 1: attached to node 0");

  result = doctor_on_simcuda(machine, {{"SIMCUDA_DEVICES", "2"}, {"SIMCUDA_VRAM", "32GiB"}});
  EXPECT_EQ(verdict_of(result, "numa", 0), "warn") << result.out;
  EXPECT_TRUE(contains(line_of(result.out, "numa", 0),
                       "attached to node 1, which has 16.0 GiB, less than its 32.0 GiB"));
  EXPECT_EQ(verdict_of(result, "numa", 1), "ok") << result.out;

  machine.gpu(kSimcudaAddress, -1);
  result = doctor_on_simcuda(machine, {});
  EXPECT_EQ(verdict_of(result, "numa", 0), "warn") << result.out;
  EXPECT_TRUE(contains(line_of(result.out, "numa", 0), "numa_node -1")) << result.out;
}

// --- the host ----------------------------------------------------------------------------------

TEST(DoctorHost, host_ram_against_device_memory) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  RunResult result = doctor_on_simcuda(machine, {{"SIMCUDA_VRAM", "48GiB"}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(line_of(result.out, "host-ram"),
            "warn  host-ram      64.0 GiB of RAM for 48.0 GiB of device memory (1.3x): training "
            "wants 1.5x or more, and more with optimizer offload");
  result = doctor_on_simcuda(machine, {{"SIMCUDA_VRAM", "80GiB"}});
  EXPECT_TRUE(contains(line_of(result.out, "host-ram"),
                       "warn  host-ram      64.0 GiB of RAM for 80.0 GiB of device memory (0.8x): "
                       "less RAM than device memory"))
      << result.out;
  machine.remove("/proc/meminfo");
  EXPECT_EQ(verdict_of(doctor(machine), "host-ram"), "warn");
}

TEST(DoctorHost, mem_available_each_verdict) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  EXPECT_EQ(verdict_of(doctor_on_simcuda(machine, {}), "mem-available"), "ok");
  machine.meminfo(64 * kGiBInKiB, 8 * kGiBInKiB, 0);
  const RunResult less = doctor_on_simcuda(machine, {{"SIMCUDA_VRAM", "16GiB"}});
  EXPECT_TRUE(less.exited(0)) << less.describe();
  EXPECT_EQ(line_of(less.out, "mem-available"),
            "warn  mem-available 8.0 GiB available, less than the 16.0 GiB of device memory "
            "(spills may take half of it by default)");
  machine.meminfo(64 * kGiBInKiB, 512 << 10, 0);
  const RunResult none = doctor(machine);
  EXPECT_TRUE(none.exited(1)) << none.describe();
  EXPECT_EQ(verdict_of(none, "mem-available"), "block") << none.out;
}

TEST(DoctorHost, cgroup_v2_and_v1_each_verdict) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  machine.cgroup_v2("/job", "max", kGiB);
  EXPECT_EQ(line_of(doctor(machine).out, "cgroup"),
            "ok    cgroup        /sys/fs/cgroup/job: no memory limit");
  machine.cgroup_v2("/job", std::to_string(40 * kGiB), 8 * kGiB);
  EXPECT_EQ(line_of(doctor_on_simcuda(machine, {{"SIMCUDA_VRAM", "16GiB"}}).out, "cgroup"),
            "ok    cgroup        /sys/fs/cgroup/job leaves 32.0 GiB under its memory limit");
  machine.cgroup_v2("/job", std::to_string(40 * kGiB), 39 * kGiB + (kGiB / 2));
  const RunResult v2_full = doctor(machine);
  EXPECT_TRUE(v2_full.exited(1)) << v2_full.describe();
  EXPECT_EQ(line_of(v2_full.out, "cgroup"),
            "block cgroup        /sys/fs/cgroup/job leaves 512.0 MiB under its memory limit: "
            "spills have no room");

  machine.cgroup_v1("/docker/abc", 24 * kGiB, 16 * kGiB);
  const RunResult v1_less = doctor_on_simcuda(machine, {{"SIMCUDA_VRAM", "16GiB"}});
  EXPECT_TRUE(v1_less.exited(0)) << v1_less.describe();
  EXPECT_EQ(line_of(v1_less.out, "cgroup"),
            "warn  cgroup        /sys/fs/cgroup/memory/docker/abc leaves 8.0 GiB under its memory "
            "limit, less than the 16.0 GiB of device memory");
  machine.cgroup_v1("/docker/abc", 24 * kGiB, 23 * kGiB + (kGiB / 2));
  EXPECT_EQ(verdict_of(doctor(machine), "cgroup"), "block");
}

TEST(DoctorHost, memlock_each_verdict_and_read_with_getrlimit) {
  FakeMachine machine;
  machine.gpu(kSimcudaAddress);
  EXPECT_EQ(line_of(doctor_on_simcuda(machine, {}, {"--memlock", "24GiB"}).out, "memlock"),
            "ok    memlock       RLIMIT_MEMLOCK 24.0 GiB, no less than the default host limit "
            "(24.0 GiB)");
  const RunResult small = doctor_on_simcuda(machine, {}, {"--memlock", "64KiB"});
  EXPECT_TRUE(small.exited(0)) << small.describe();
  EXPECT_EQ(line_of(small.out, "memlock"),
            "warn  memlock       RLIMIT_MEMLOCK 64.0 KiB: host-pool spills stop there (managed "
            "spills do not count)");
  const RunResult host_pool_only = doctor_on_simcuda(
      machine, {{"SIMCUDA_ATTRS", "CONCURRENT_MANAGED_ACCESS=0"}}, {"--memlock", "64KiB"});
  EXPECT_TRUE(host_pool_only.exited(1)) << host_pool_only.describe();
  EXPECT_EQ(line_of(host_pool_only.out, "memlock"),
            "block memlock       RLIMIT_MEMLOCK 64.0 KiB: gpu 0 spills only to the pinned host "
            "pool, which may pin no more");
  EXPECT_TRUE(contains(host_pool_only.out,
                       "fix: raise the locked-memory limit (docker run "
                       "--ulimit memlock=-1"))
      << host_pool_only.out;

  // Without --memlock, getrlimit's answer: lowered by the shell first (lowering needs no
  // privilege).
  const RunResult real = run_program(
      {"/bin/sh", "-c", "ulimit -l 64 && exec \"$0\" doctor --driver none --root \"$1\"",
       VRAMSPILL_CLI, machine.root()},
      clean({}), 60);
  EXPECT_TRUE(contains(line_of(real.out, "memlock"), "RLIMIT_MEMLOCK 64.0 KiB")) << real.describe();
}

TEST(DoctorHost, dev_shm_each_verdict) {
  const FakeMachine machine;
  const auto shm_line = [&](const std::string& mounts) {
    machine.write("/proc/self/mounts", mounts);
    return line_of(doctor(machine).out, "shm");
  };
  EXPECT_EQ(shm_line("shm /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n"),
            "warn  shm           /dev/shm holds 64.0 MiB: PyTorch's DataLoader workers and NCCL "
            "need more");
  EXPECT_EQ(shm_line("tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n"),  // a tmpfs holds half of RAM
            "ok    shm           /dev/shm holds 32.0 GiB");
  EXPECT_EQ(shm_line("tmpfs /dev/shm tmpfs rw,size=25% 0 0\n"),
            "ok    shm           /dev/shm holds 16.0 GiB");
  EXPECT_EQ(shm_line("tmpfs /dev/shm tmpfs rw,size=64g 0 0\nshm /dev/shm tmpfs rw,size=1m 0 0\n"),
            "warn  shm           /dev/shm holds 1.0 MiB: PyTorch's DataLoader workers and NCCL "
            "need more");  // the last mount wins
  EXPECT_EQ(shm_line("/dev/sda1 /dev/shm ext4 rw 0 0\n"),
            "warn  shm           /dev/shm is ext4, not tmpfs");
  EXPECT_EQ(shm_line("proc /proc proc rw 0 0\n"),
            "warn  shm           /dev/shm is not a mount point");
}

TEST(DoctorHost, swappiness_and_transparent_huge_pages_each_verdict) {
  const FakeMachine machine;
  machine.meminfo(64 * kGiBInKiB, 48 * kGiBInKiB, 8 * kGiBInKiB);
  EXPECT_EQ(line_of(doctor(machine).out, "swappiness"),
            "warn  swappiness    vm.swappiness 60 with 8.0 GiB of swap: under memory pressure "
            "the kernel swaps out managed spills, and GPU page faults then wait for the disk");
  machine.write("/proc/sys/vm/swappiness", "10\n");
  EXPECT_EQ(line_of(doctor(machine).out, "swappiness"), "ok    swappiness    vm.swappiness 10");

  machine.write("/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  const RunResult never = doctor(machine);
  EXPECT_EQ(verdict_of(never, "thp"), "warn") << never.out;
  EXPECT_TRUE(
      contains(never.out, "fix: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"))
      << never.out;
  machine.write("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
  EXPECT_EQ(line_of(doctor(machine).out, "thp"),
            "ok    thp           transparent huge pages: always");
  machine.remove("/sys/kernel/mm/transparent_hugepage");
  EXPECT_EQ(line_of(doctor(machine).out, "thp"),
            "ok    thp           transparent huge pages: not in this kernel");
}

}  // namespace
