// The checks of `vramspill doctor`: facts in, findings out, in the order the report lists them.
// Pure functions of the facts (host_facts.h, gpu_facts.h); the thresholds and what each verdict
// means are in README.md ("vramspill doctor").
#pragma once

#include <vector>

#include "doctor/driver_probe.h"
#include "doctor/finding.h"
#include "doctor/gpu_facts.h"
#include "doctor/host_facts.h"

namespace vramspill::cli::doctor {

// The driver, the GPUs found, and per GPU its features, PCIe link and NUMA node.
void check_gpus(const DriverProbe& driver, const std::vector<Gpu>& gpus, const HostFacts& host,
                std::vector<Finding>& findings);

// Host memory against the GPUs' memory, what is available, the cgroup, RLIMIT_MEMLOCK,
// /dev/shm, swapping and transparent huge pages.
void check_host(const HostFacts& host, const std::vector<Gpu>& gpus,
                std::vector<Finding>& findings);

}  // namespace vramspill::cli::doctor
