// `vramspill exporter` serving a real job under the shim on simcuda (running_job.h): scraped over
// HTTP as Prometheus does, checked against the job's own figures and by promtool; stopped by a
// signal; and how it refuses an address it cannot use. All through the vramspill command, which
// execs the program vramspill-exporter (Note [The exporter is a program of its own] in
// tools/cli/exporter_launcher.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "promtool_check.h"
#include "running_job.h"
#include "subprocess.h"

namespace {

using vramspill::telemetry::StatsEntry;
using vramspill::testing::contains;
using vramspill::testing::has_figures;
using vramspill::testing::Job;
using vramspill::testing::job_environment;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;
using vramspill::testing::wait_for_entry;

constexpr uint64_t kMiB = 1ULL << 20;

// The value of the sample of `name` whose labels start with the job's pid and hold `labels`;
// empty when there is none.
std::string sample_value(const std::string& text, const std::string& name, pid_t pid,
                         const std::string& labels = "") {
  std::istringstream in(text);
  const std::string start = name + "{pid=\"" + std::to_string(pid) + "\",";
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(start) && contains(line, labels + "} "))
      return line.substr(line.rfind(' ') + 1);
  }
  return "";
}

class ExporterJobTest : public vramspill::testing::StatsJobTest {
 protected:
  // The exporter, serving the test's stats directory on a port the system chooses.
  void start_exporter() {
    exporter_.emplace(std::vector<std::string>{VRAMSPILL_CLI, "exporter", "--listen", "127.0.0.1:0",
                                               "--directory", stats_directory()},
                      vramspill::testing::Environment{}, (root_ / "exporter-stderr").string());
    const std::string banner = exporter_->wait_for_output("/metrics\n");
    const std::string prefix = "vramspill exporter: serving http://127.0.0.1:";
    ASSERT_TRUE(banner.starts_with(prefix)) << banner << exporter_->finish().describe();
    port_ = std::stoi(banner.substr(prefix.size()));
  }

  // Stops it with `signal`; how it ended.
  RunResult stop_exporter(int signal) {
    EXPECT_TRUE(exporter_->signal(signal));
    return exporter_->finish();
  }

  std::optional<Job> exporter_;
  int port_ = 0;
};

TEST_F(ExporterJobTest, serves_the_figures_of_a_running_job) {
  // 16 + 16 MiB fill the 32 MiB budget; the third block spills.
  Job job({STATS_JOB_PROGRAM, "16", "16", "16"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::optional<StatsEntry> entry =
      wait_for_entry(stats_file_of(job.pid()), job, [](const StatsEntry& read) {
        return has_figures(read) && read.snapshot.devices[0].spills >= 1;
      });
  ASSERT_TRUE(entry.has_value()) << job.finish().describe();
  ASSERT_NO_FATAL_FAILURE(start_exporter());

  httplib::Client client("127.0.0.1", port_);
  const httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_TRUE(metrics->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"));
  const std::string& text = metrics->body;
  const auto& device = entry->snapshot.devices[0];
  const std::string device0 = "device=\"0\"";
  EXPECT_TRUE(contains(text, "\nvramspill_jobs 1\n")) << text;
  EXPECT_EQ(sample_value(text, "vramspill_spills_total", job.pid(), device0), "1") << text;
  EXPECT_EQ(sample_value(text, "vramspill_refusals_total", job.pid(), device0), "0") << text;
  EXPECT_EQ(sample_value(text, "vramspill_device_held_bytes", job.pid(), device0),
            std::to_string(32 * kMiB))
      << text;
  EXPECT_EQ(sample_value(text, "vramspill_device_memory_bytes", job.pid(), device0),
            std::to_string(64 * kMiB))
      << text;
  EXPECT_EQ(sample_value(text, "vramspill_device_limit_bytes", job.pid(), device0),
            std::to_string(device.limit_bytes))
      << text;
  EXPECT_EQ(sample_value(text, "vramspill_device_spilled_bytes", job.pid(), "tier=\"host\""),
            std::to_string(device.spilled_host_bytes))
      << text;
  EXPECT_EQ(sample_value(text, "vramspill_device_spilled_bytes", job.pid(), "tier=\"managed\""),
            std::to_string(device.spilled_managed_bytes))
      << text;
  EXPECT_TRUE(contains(text, "command=\"" + std::string(STATS_JOB_PROGRAM) + " 16 16 16\""))
      << text;

  const httplib::Result index = client.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_TRUE(contains(index->body, "/metrics")) << index->body;
  const httplib::Result elsewhere = client.Get("/metrics/more");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->status, 404);

  EXPECT_TRUE(stop_exporter(SIGTERM).exited(0));
  EXPECT_TRUE(job.finish().exited(0));
}

TEST_F(ExporterJobTest, what_it_serves_and_prints_passes_promtool) {
  if (!vramspill::testing::have_promtool())
    GTEST_SKIP() << "promtool not found (tools/install-deps.sh --tests installs it)";
  Job job({STATS_JOB_PROGRAM, "16", "16", "16"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  ASSERT_TRUE(wait_for_entry(stats_file_of(job.pid()), job, has_figures).has_value())
      << job.finish().describe();
  ASSERT_NO_FATAL_FAILURE(start_exporter());

  httplib::Client client("127.0.0.1", port_);
  const httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  const RunResult served = vramspill::testing::promtool_check_metrics(metrics->body, root_ / "m");
  EXPECT_TRUE(served.exited(0)) << served.describe() << metrics->body;

  const RunResult once =
      run_program({VRAMSPILL_CLI, "exporter", "--once", "--directory", stats_directory()}, {}, 60);
  ASSERT_TRUE(once.exited(0)) << once.describe();
  EXPECT_TRUE(contains(once.out, "pid=\"" + std::to_string(job.pid()) + "\"")) << once.out;
  const RunResult printed = vramspill::testing::promtool_check_metrics(once.out, root_ / "m");
  EXPECT_TRUE(printed.exited(0)) << printed.describe() << once.out;

  EXPECT_TRUE(stop_exporter(SIGINT).exited(0));
  EXPECT_TRUE(job.finish().exited(0));
}

TEST_F(ExporterJobTest, an_address_in_use_is_refused_with_the_reason) {
  const int taken = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string listen_at = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));

  const RunResult result = run_program(
      {VRAMSPILL_CLI, "exporter", "--listen", listen_at, "--directory", stats_directory()}, {}, 60);
  close(taken);
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_TRUE(contains(result.err, "cannot listen on " + listen_at + ": Address already in use"))
      << result.err;
}

// A second exporter on the port of a first would share it (SO_REUSEPORT) and take half the
// scrapes: it is refused.
TEST_F(ExporterJobTest, a_port_another_exporter_serves_is_refused) {
  start_exporter();
  const std::string listen_at = "127.0.0.1:" + std::to_string(port_);
  const RunResult second = run_program(
      {VRAMSPILL_CLI, "exporter", "--listen", listen_at, "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(second.exited(1)) << second.describe();
  EXPECT_TRUE(contains(second.err, "cannot listen on " + listen_at + ": Address already in use"))
      << second.err;
  EXPECT_TRUE(stop_exporter(SIGTERM).exited(0));
}

TEST(ExporterTest, help_documents_options_metrics_and_exit_statuses) {
  const RunResult top = run_program({VRAMSPILL_CLI, "--help"}, {}, 60);
  EXPECT_TRUE(contains(top.out, "exporter")) << top.out;
  const RunResult result = run_program({VRAMSPILL_CLI, "exporter", "--help"}, {}, 60);
  ASSERT_TRUE(result.exited(0)) << result.describe();
  for (const char* part :
       {"Usage: vramspill exporter [OPTIONS]", "--listen", "--once", "--directory",
        "127.0.0.1:9477", "/metrics", "SIGTERM", "vramspill_spills_total", "Exit status"})
    EXPECT_TRUE(contains(result.out, part)) << part << " not in:\n" << result.out;
  // Note [The exporter is a program of its own]: the same help, from the program itself.
  const RunResult direct = run_program({VRAMSPILL_EXPORTER, "--help"}, {}, 60);
  ASSERT_TRUE(direct.exited(0)) << direct.describe();
  EXPECT_EQ(direct.out, result.out);
}

TEST_F(ExporterJobTest, a_missing_exporter_program_is_named_with_the_reason) {
  // vramspill alone, without vramspill-exporter beside it.
  const std::filesystem::path alone = root_ / "vramspill";
  std::filesystem::copy_file(VRAMSPILL_CLI, alone);
  const RunResult result =
      run_program({alone.string(), "exporter", "--once", "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(result.err, "vramspill exporter: cannot run " +
                            (root_ / "vramspill-exporter").string() +
                            ": No such file or directory (it is installed beside vramspill)\n");
  EXPECT_EQ(result.out, "");
}

TEST(ExporterTest, a_bad_listen_address_is_a_usage_error) {
  for (const char* bad : {"9477", "127.0.0.1:", ":9477", "127.0.0.1:65536", "127.0.0.1:http",
                          "::1:9477", "[::1]9477"}) {
    const RunResult result = run_program({VRAMSPILL_CLI, "exporter", "--listen", bad}, {}, 60);
    EXPECT_TRUE(result.exited(2)) << bad << ": " << result.describe();
    EXPECT_TRUE(contains(result.err, "--listen")) << bad << ": " << result.err;
  }
}

}  // namespace
