// What `vramspill exporter` serves (tools/cli/prometheus_metrics.h), from hand-built stats
// entries: the exposition format's rules (HELP and TYPE for every family, counters named
// `_total`), escaped and valid UTF-8 label values (Note [Prometheus label values]), which entries
// are served, and promtool's verdict on all of it.
#include "prometheus_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "prometheus_label.h"
#include "promtool_check.h"

namespace {

using vramspill::cli::prometheus_label_value;
using vramspill::cli::render_prometheus_metrics;
using vramspill::telemetry::DeviceFigures;
using vramspill::telemetry::StatsEntry;
using vramspill::telemetry::StatsState;

constexpr uint64_t kMiB = 1ULL << 20;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

StatsEntry live_job(uint64_t pid, const std::string& command) {
  StatsEntry entry;
  entry.path = "/run/user/1000/vramspill/" + std::to_string(pid) + ".stats";
  entry.state = StatsState::kLive;
  entry.snapshot.pid = pid;
  entry.snapshot.command = command;
  entry.snapshot.started_unix_ns = 1'700'000'000'250'000'000ULL;
  entry.snapshot.updated_unix_ns = 1'700'000'060'000'000'000ULL;
  entry.snapshot.publish_count = 120;
  entry.snapshot.host_pool_pinned_bytes = 64 * kMiB;
  entry.snapshot.host_spilled_bytes = 16 * kMiB;
  entry.snapshot.host_limit_bytes = 512 * kMiB;
  entry.snapshot.tiered = {.evicted_bytes = 48 * kMiB,
                           .promoted_bytes = 32 * kMiB,
                           .windows = 7,
                           .window_ns = 1'500'000'000,
                           .launches = 900,
                           .unreadable_launches = 12,
                           .move_vmm_calls = 4321};
  DeviceFigures device;
  device.device = 0;
  device.total_bytes = 64 * kMiB;
  device.limit_bytes = 30 * kMiB;
  device.device_bytes = 28 * kMiB;
  device.device_peak_bytes = 30 * kMiB;
  device.spilled_managed_bytes = 2 * kMiB;
  device.spilled_host_bytes = 16 * kMiB;
  device.spills = 3;
  device.refused = 1;
  device.tiered_device_bytes = 12 * kMiB;
  device.tiered_host_bytes = 4 * kMiB;
  entry.snapshot.devices.push_back(device);
  device.device = 1;
  entry.snapshot.devices.push_back(device);
  return entry;
}

// Every kind of entry `scan_stats_directories` returns, and commands that need escaping.
std::vector<StatsEntry> every_kind_of_entry() {
  std::vector<StatsEntry> entries;
  entries.push_back(live_job(4242, "python train.py --name \"run\\1\"\nnext"));
  entries.push_back(live_job(4243, "caf\xC3"));  // cut in the middle of a character
  StatsEntry stale = live_job(7, "killed");
  stale.state = StatsState::kStale;
  entries.push_back(stale);
  StatsEntry unreadable;
  unreadable.path = "/run/user/1000/vramspill/8.stats";
  unreadable.problem = "checksum mismatch";
  entries.push_back(unreadable);
  StatsEntry starting = live_job(4244, "starting");
  starting.snapshot.updated_unix_ns = 0;
  starting.snapshot.publish_count = 0;
  starting.snapshot.devices.clear();
  entries.push_back(starting);
  return entries;
}

std::string labels_of(uint64_t pid, const std::string& command) {
  return "pid=\"" + std::to_string(pid) + "\",command=\"" + command + "\"";
}

TEST(PrometheusMetricsTest, every_family_has_help_and_type_and_only_counters_end_in_total) {
  const std::vector<std::string> lines = lines_of(render_prometheus_metrics(every_kind_of_entry()));
  std::map<std::string, std::string> types;  // family -> type
  std::string help_of;                       // the family whose HELP line came last
  std::string family;                        // the family whose TYPE line came last
  std::size_t samples = 0;
  for (const std::string& line : lines) {
    std::istringstream words(line);
    std::string first, second, third;
    words >> first >> second >> third;
    if (first == "#" && second == "HELP") {
      EXPECT_FALSE(types.contains(third)) << "a second HELP for " << third;
      help_of = third;
      continue;
    }
    if (first == "#" && second == "TYPE") {
      EXPECT_EQ(help_of, third) << "TYPE without HELP: " << line;
      std::string type;
      words >> type;
      types[third] = type;
      family = third;
      continue;
    }
    const std::string name = first.substr(0, first.find('{'));
    EXPECT_EQ(name, family) << "a sample outside its family: " << line;
    ++samples;
  }
  EXPECT_GT(samples, 0U);
  EXPECT_GE(types.size(), 20U);
  for (const auto& [name, type] : types) {
    EXPECT_TRUE(name.starts_with("vramspill_")) << name;
    EXPECT_EQ(name.ends_with("_total"), type == "counter") << name << " is a " << type;
    EXPECT_TRUE(type == "counter" || type == "gauge") << name << " is a " << type;
  }
}

TEST(PrometheusMetricsTest, a_live_job_has_all_its_figures) {
  const std::string text = render_prometheus_metrics({live_job(42, "train")});
  const std::string job = labels_of(42, "train");
  const std::string device1 = job + ",device=\"1\"";
  for (const std::string& sample : std::vector<std::string>{
           "vramspill_jobs 1",
           "vramspill_job_start_time_seconds{" + job + "} 1700000000.25",
           "vramspill_job_last_publish_timestamp_seconds{" + job + "} 1700000060",
           "vramspill_job_publishes_total{" + job + "} 120",
           "vramspill_host_pool_pinned_bytes{" + job + "} 67108864",
           "vramspill_host_spilled_bytes{" + job + "} 16777216",
           "vramspill_host_tiered_bytes{" + job + "} 8388608",  // both devices
           "vramspill_host_limit_bytes{" + job + "} 536870912",
           "vramspill_tiered_evicted_bytes_total{" + job + "} 50331648",
           "vramspill_tiered_promoted_bytes_total{" + job + "} 33554432",
           "vramspill_remap_windows_total{" + job + "} 7",
           "vramspill_remap_window_seconds_total{" + job + "} 1.5",
           "vramspill_tiered_move_vmm_calls_total{" + job + "} 4321",
           "vramspill_tiered_launches_total{" + job + "} 900",
           "vramspill_tiered_unreadable_launches_total{" + job + "} 12",
           "vramspill_device_memory_bytes{" + device1 + "} 67108864",
           "vramspill_device_limit_bytes{" + device1 + "} 31457280",
           "vramspill_device_held_bytes{" + device1 + "} 29360128",
           "vramspill_device_peak_bytes{" + device1 + "} 31457280",
           "vramspill_device_spilled_bytes{" + device1 + ",tier=\"managed\"} 2097152",
           "vramspill_device_spilled_bytes{" + device1 + ",tier=\"host\"} 16777216",
           "vramspill_spills_total{" + device1 + "} 3",
           "vramspill_refusals_total{" + device1 + "} 1",
           "vramspill_tiered_block_bytes{" + device1 + ",location=\"device\"} 12582912",
           "vramspill_tiered_block_bytes{" + device1 + ",location=\"host\"} 4194304",
       })
    EXPECT_TRUE(contains(text, "\n" + sample + "\n")) << sample << "\nnot in:\n" << text;
}

TEST(PrometheusMetricsTest, label_values_are_escaped) {
  const std::string text = render_prometheus_metrics(every_kind_of_entry());
  EXPECT_TRUE(contains(text, R"(command="python train.py --name \"run\\1\"\nnext")")) << text;
  EXPECT_EQ(prometheus_label_value("a\\b\"c\nd"), R"(a\\b\"c\nd)");
}

TEST(PrometheusMetricsTest, label_values_are_valid_utf8) {
  EXPECT_EQ(prometheus_label_value("caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x9A\x80"),
            "caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x9A\x80");
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(prometheus_label_value("caf\xC3"), "caf" + replacement);         // cut short
  EXPECT_EQ(prometheus_label_value("\xC0\xAF"), replacement + replacement);  // overlong
  EXPECT_EQ(prometheus_label_value("\xED\xA0\x80"), replacement + replacement + replacement);
  EXPECT_EQ(prometheus_label_value("\xF4\x90\x80\x80x"),
            replacement + replacement + replacement + replacement + "x");  // past U+10FFFF
  EXPECT_EQ(prometheus_label_value("\xFF"), replacement);
  EXPECT_TRUE(contains(render_prometheus_metrics(every_kind_of_entry()),
                       labels_of(4243, "caf" + replacement)));
}

TEST(PrometheusMetricsTest, killed_and_unreadable_files_are_counted_not_served) {
  const std::string text = render_prometheus_metrics(every_kind_of_entry());
  EXPECT_TRUE(contains(text, "\nvramspill_jobs 3\n")) << text;
  EXPECT_TRUE(contains(text, "\nvramspill_stale_jobs 1\n")) << text;
  EXPECT_TRUE(contains(text, "\nvramspill_unreadable_stats_files 1\n")) << text;
  EXPECT_FALSE(contains(text, "pid=\"7\"")) << text;
  EXPECT_FALSE(contains(text, "command=\"killed\"")) << text;
}

TEST(PrometheusMetricsTest, a_job_that_has_published_nothing_has_only_its_start_time) {
  const std::string text = render_prometheus_metrics(every_kind_of_entry());
  const std::string job = labels_of(4244, "starting");
  std::size_t samples = 0;
  for (const std::string& line : lines_of(text)) samples += contains(line, job) ? 1 : 0;
  EXPECT_EQ(samples, 1U) << text;
  EXPECT_TRUE(contains(text, "\nvramspill_job_start_time_seconds{" + job + "} 1700000000.25\n"))
      << text;
}

TEST(PrometheusMetricsTest, jobs_with_the_same_pid_are_different_series) {
  // Two jobs in different PID namespaces, both pid 1 (Note [Stats liveness]), whose files have
  // the same name in two directories.
  const std::string text = render_prometheus_metrics({live_job(1, "a"), live_job(1, "a")});
  EXPECT_TRUE(contains(text, "\nvramspill_spills_total{pid=\"1\",command=\"a\",device=\"0\"} 3\n"))
      << text;
  EXPECT_TRUE(
      contains(text, "\nvramspill_spills_total{pid=\"1-1\",command=\"a\",device=\"0\"} 3\n"))
      << text;
}

TEST(PrometheusMetricsTest, a_jobs_pid_label_is_its_files_name) {
  // The directory lists the second job's file first (`-` sorts before `.`): each job still keeps
  // the label its file names, whoever came first.
  StatsEntry first = live_job(1, "a");
  StatsEntry second = live_job(1, "a");
  second.path = "/run/user/1000/vramspill/1-1.stats";
  second.snapshot.devices[0].spills = 5;
  StatsEntry tenth = live_job(1, "a");
  tenth.path = "/run/user/1000/vramspill/1-10.stats";
  const std::string text = render_prometheus_metrics({second, tenth, first});
  EXPECT_TRUE(contains(text, "\nvramspill_spills_total{pid=\"1\",command=\"a\",device=\"0\"} 3\n"))
      << text;
  EXPECT_TRUE(
      contains(text, "\nvramspill_spills_total{pid=\"1-1\",command=\"a\",device=\"0\"} 5\n"))
      << text;
  EXPECT_TRUE(
      contains(text, "\nvramspill_spills_total{pid=\"1-10\",command=\"a\",device=\"0\"} 3\n"))
      << text;
}

TEST(PrometheusMetricsTest, jobs_of_one_file_name_in_two_directories_get_distinct_labels) {
  StatsEntry first = live_job(7, "a");
  first.path = "/run/user/1000/vramspill/7.stats";
  StatsEntry numbered = live_job(7, "a");
  numbered.path = "/run/user/1000/vramspill/7-1.stats";
  StatsEntry fallback = live_job(7, "a");
  fallback.path = "/tmp/vramspill-1000/7.stats";
  const std::string text = render_prometheus_metrics({first, numbered, fallback});
  for (const char* pid : {"7", "7-1", "7-2"}) {
    EXPECT_TRUE(contains(text, std::string("vramspill_spills_total{pid=\"") + pid +
                                   "\",command=\"a\",device=\"0\"} 3\n"))
        << pid << "\n"
        << text;
  }
}

TEST(PrometheusMetricsTest, no_jobs_is_every_family_without_samples) {
  const std::string text = render_prometheus_metrics({});
  EXPECT_TRUE(contains(text, "\nvramspill_jobs 0\n")) << text;
  EXPECT_TRUE(contains(text, "# TYPE vramspill_spills_total counter\n")) << text;
}

TEST(PrometheusMetricsTest, promtool_accepts_it) {
  if (!vramspill::testing::have_promtool())
    GTEST_SKIP() << "promtool not found (tools/install-deps.sh --tests installs it)";
  const auto scratch = std::filesystem::temp_directory_path() /
                       ("vramspill-prometheus-test-" + std::to_string(getpid()) + ".txt");
  for (const auto& entries : {std::vector<StatsEntry>{}, every_kind_of_entry()}) {
    const auto result =
        vramspill::testing::promtool_check_metrics(render_prometheus_metrics(entries), scratch);
    EXPECT_TRUE(result.exited(0)) << result.describe();
  }
  std::filesystem::remove(scratch);
}

}  // namespace
