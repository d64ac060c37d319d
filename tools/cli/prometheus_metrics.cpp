#include "prometheus_metrics.h"

#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <string_view>

#include "prometheus_label.h"

namespace vramspill::cli {
namespace {

using telemetry::DeviceFigures;
using telemetry::StatsEntry;
using telemetry::StatsSnapshot;
using telemetry::StatsState;

enum class Type { kGauge, kCounter };

// How a figure is written: as it is, or nanoseconds as seconds (Prometheus's base unit).
enum class Unit { kAsIs, kNanosecondsAsSeconds };

// One row of a family: a sample per job (Figures = StatsSnapshot) or per job and device (Figures
// = DeviceFigures). Rows with the same name are one family, split by their extra label pair.
template <typename Figures>
struct Row {
  const char* name;
  Type type;
  const char* help;
  uint64_t (*value)(const Figures&);
  const char* label = "";  // e.g. tier="host"
  Unit unit = Unit::kAsIs;
  bool before_first_publish = false;  // known from the file's header, before any figure
};

constexpr Row<StatsSnapshot> kJobRows[] = {
    {"vramspill_job_start_time_seconds", Type::kGauge,
     "When the job's stats file was created (it starts CUDA), in seconds since the epoch.",
     [](const StatsSnapshot& job) { return job.started_unix_ns; }, "", Unit::kNanosecondsAsSeconds,
     true},
    {"vramspill_job_last_publish_timestamp_seconds", Type::kGauge,
     "When the job last published its figures (twice a second while it runs).",
     [](const StatsSnapshot& job) { return job.updated_unix_ns; }, "", Unit::kNanosecondsAsSeconds},
    {"vramspill_job_publishes_total", Type::kCounter, "Publishes of the job's figures.",
     [](const StatsSnapshot& job) { return job.publish_count; }},
    {"vramspill_host_pool_pinned_bytes", Type::kGauge,
     "Host memory pinned for the spill pool, used or not.",
     [](const StatsSnapshot& job) { return job.host_pool_pinned_bytes; }},
    {"vramspill_host_spilled_bytes", Type::kGauge,
     "Host bytes holding spilled allocations, all devices.",
     [](const StatsSnapshot& job) { return job.host_spilled_bytes; }},
    {"vramspill_host_tiered_bytes", Type::kGauge,
     "Host bytes holding tiered blocks' granules, all devices (not spills, under the same limit).",
     [](const StatsSnapshot& job) { return job.tiered_host_bytes(); }},
    {"vramspill_host_limit_bytes", Type::kGauge,
     "The host limit: the most pinned and managed host bytes spills may take.",
     [](const StatsSnapshot& job) { return job.host_limit_bytes; }},
    {"vramspill_tiered_evicted_bytes_total", Type::kCounter,
     "Bytes tiered mode moved from the devices to the host.",
     [](const StatsSnapshot& job) { return job.tiered.evicted_bytes; }},
    {"vramspill_tiered_promoted_bytes_total", Type::kCounter,
     "Bytes tiered mode moved from the host to the devices.",
     [](const StatsSnapshot& job) { return job.tiered.promoted_bytes; }},
    {"vramspill_remap_windows_total", Type::kCounter,
     "Remap windows tiered mode opened to move granules.",
     [](const StatsSnapshot& job) { return job.tiered.windows; }},
    {"vramspill_remap_window_seconds_total", Type::kCounter,
     "Time from asking for each remap window to opening the device to the job again.",
     [](const StatsSnapshot& job) { return job.tiered.window_ns; }, "",
     Unit::kNanosecondsAsSeconds},
    {"vramspill_tiered_move_vmm_calls_total", Type::kCounter,
     "VMM calls tiered mode's moves made (map, set-access, unmap, and the granules they made "
     "and released).",
     [](const StatsSnapshot& job) { return job.tiered.move_vmm_calls; }},
    {"vramspill_tiered_launches_total", Type::kCounter,
     "Kernel launches while tiered blocks were tracked.",
     [](const StatsSnapshot& job) { return job.tiered.launches; }},
    {"vramspill_tiered_unreadable_launches_total", Type::kCounter,
     "Kernel launches whose arguments could not be read: taken as touching every tiered block.",
     [](const StatsSnapshot& job) { return job.tiered.unreadable_launches; }},
};

constexpr Row<DeviceFigures> kDeviceRows[] = {
    {"vramspill_device_memory_bytes", Type::kGauge, "The device's memory.",
     [](const DeviceFigures& device) { return device.total_bytes; }},
    {"vramspill_device_limit_bytes", Type::kGauge,
     "Device memory the job may hold: the budget less the reserve.",
     [](const DeviceFigures& device) { return device.limit_bytes; }},
    {"vramspill_device_held_bytes", Type::kGauge, "Device memory the job holds.",
     [](const DeviceFigures& device) { return device.device_bytes; }},
    {"vramspill_device_peak_bytes", Type::kGauge, "The most device memory the job has held.",
     [](const DeviceFigures& device) { return device.device_peak_bytes; }},
    {"vramspill_device_spilled_bytes", Type::kGauge,
     "Bytes of the device's allocations spilled, by where they live now: managed memory, or "
     "pinned host memory (the pool, host-located VMM).",
     [](const DeviceFigures& device) { return device.spilled_managed_bytes; }, R"(tier="managed")"},
    {"vramspill_device_spilled_bytes", Type::kGauge, "",
     [](const DeviceFigures& device) { return device.spilled_host_bytes; }, R"(tier="host")"},
    {"vramspill_spills_total", Type::kCounter, "Allocations over the budget that were spilled.",
     [](const DeviceFigures& device) { return device.spills; }},
    {"vramspill_refusals_total", Type::kCounter,
     "Allocations over the budget that failed with OUT_OF_MEMORY instead of spilling.",
     [](const DeviceFigures& device) { return device.refused; }},
    {"vramspill_tiered_block_bytes", Type::kGauge,
     "Bytes of tiered blocks' granules, by where they are now.",
     [](const DeviceFigures& device) { return device.tiered_device_bytes; },
     R"(location="device")"},
    {"vramspill_tiered_block_bytes", Type::kGauge, "",
     [](const DeviceFigures& device) { return device.tiered_host_bytes; }, R"(location="host")"},
};

std::string number(uint64_t value, Unit unit) {
  if (unit == Unit::kAsIs) return std::to_string(value);
  // Whole seconds and the fraction apart: a double holds a time since the epoch in seconds to
  // the microsecond, but not in nanoseconds.
  constexpr uint64_t kNsPerSecond = 1'000'000'000;
  const double seconds =
      static_cast<double>(value / kNsPerSecond) + static_cast<double>(value % kNsPerSecond) / 1e9;
  char text[32];
  const auto written = std::to_chars(text, text + sizeof text, seconds).ptr;
  return std::string(text, written);
}

void family_header(std::string& out, const char* name, Type type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += type == Type::kCounter ? " counter\n" : " gauge\n";
}

void sample(std::string& out, const char* name, const std::string& labels, const char* label,
            const std::string& value) {
  out += name;
  out += '{';
  out += labels;
  if (*label != '\0') {
    out += ',';
    out += label;
  }
  out += "} ";
  out += value;
  out += '\n';
}

// A live job and its labels. Jobs in different PID namespaces can have the same pid; their files
// are `<pid>.stats`, `<pid>-1.stats`, ... (Note [Stats liveness]), and the pid label is the
// file's name without `.stats`: a job keeps its series while others of its pid come and go,
// and no two jobs' series are the same series. A file named otherwise is labelled with its pid,
// and `-1`, `-2`, ... after the first of that label.
struct LabelledJob {
  const StatsSnapshot* job;
  std::string labels;  // pid="...",command="..."
};

std::string pid_label(const StatsEntry& entry) {
  const std::string pid = std::to_string(entry.snapshot.pid);
  std::string_view name = entry.path;
  name.remove_prefix(name.rfind('/') + 1);  // npos + 1: no directory
  if (!name.ends_with(".stats")) return pid;
  name.remove_suffix(std::string_view(".stats").size());
  const bool numbered = name.starts_with(pid + "-") && name.size() > pid.size() + 1 &&
                        name.find_first_not_of("0123456789", pid.size() + 1) == name.npos;
  return name == pid || numbered ? std::string(name) : pid;
}

std::vector<LabelledJob> live_jobs(const std::vector<StatsEntry>& entries) {
  std::vector<const StatsEntry*> live;
  std::set<std::string> taken;  // the labels files name, kept by the first job of each
  for (const StatsEntry& entry : entries) {
    if (entry.state != StatsState::kLive) continue;
    live.push_back(&entry);
    taken.insert(pid_label(entry));
  }
  std::vector<LabelledJob> jobs;
  std::set<std::string> used;
  for (const StatsEntry* entry : live) {
    const std::string named = pid_label(*entry);
    std::string pid = named;
    // Two files of one name (in the two default directories): the second job takes the first
    // `-N` no file names and no job has taken.
    for (int n = 1; used.contains(pid) || (pid != named && taken.contains(pid)); ++n)
      pid = named + "-" + std::to_string(n);
    used.insert(pid);
    jobs.push_back({&entry->snapshot, "pid=\"" + pid + "\",command=\"" +
                                          prometheus_label_value(entry->snapshot.command) + "\""});
  }
  return jobs;
}

bool published(const StatsSnapshot& job) { return job.updated_unix_ns != 0; }

template <typename Figures>
bool starts_family(const Row<Figures>* rows, std::size_t i) {
  return i == 0 || std::string_view(rows[i].name) != rows[i - 1].name;
}

void job_families(std::string& out, const std::vector<LabelledJob>& jobs) {
  for (std::size_t i = 0; i < std::size(kJobRows); ++i) {
    const Row<StatsSnapshot>& row = kJobRows[i];
    if (starts_family(kJobRows, i)) family_header(out, row.name, row.type, row.help);
    for (const LabelledJob& labelled : jobs) {
      if (!published(*labelled.job) && !row.before_first_publish) continue;
      sample(out, row.name, labelled.labels, row.label, number(row.value(*labelled.job), row.unit));
    }
  }
}

void device_families(std::string& out, const std::vector<LabelledJob>& jobs) {
  for (std::size_t i = 0; i < std::size(kDeviceRows); ++i) {
    const Row<DeviceFigures>& row = kDeviceRows[i];
    if (starts_family(kDeviceRows, i)) family_header(out, row.name, row.type, row.help);
    for (const LabelledJob& labelled : jobs) {
      for (const DeviceFigures& device : labelled.job->devices) {
        sample(out, row.name, labelled.labels + ",device=\"" + std::to_string(device.device) + "\"",
               row.label, number(row.value(device), row.unit));
      }
    }
  }
}

void count_family(std::string& out, const char* name, const char* help, std::size_t count) {
  family_header(out, name, Type::kGauge, help);
  out += name;
  out += ' ';
  out += std::to_string(count);
  out += '\n';
}

std::size_t count_in(const std::vector<StatsEntry>& entries, StatsState state) {
  std::size_t count = 0;
  for (const StatsEntry& entry : entries) count += entry.state == state ? 1 : 0;
  return count;
}

}  // namespace

std::string render_prometheus_metrics(const std::vector<StatsEntry>& entries) {
  const std::vector<LabelledJob> jobs = live_jobs(entries);
  std::string out;
  count_family(out, "vramspill_jobs", "Jobs running under the shim (live stats files).",
               jobs.size());
  count_family(out, "vramspill_stale_jobs",
               "Stats files of killed jobs found by this scrape (and deleted, as vramspill stat "
               "does).",
               count_in(entries, StatsState::kStale));
  count_family(out, "vramspill_unreadable_stats_files",
               "Stats files skipped: damaged, cut short, another vramspill version.",
               count_in(entries, StatsState::kInvalid));
  job_families(out, jobs);
  device_families(out, jobs);
  return out;
}

}  // namespace vramspill::cli
