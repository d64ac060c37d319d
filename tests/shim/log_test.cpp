// telemetry/log: the "[vramspill] level: message" lines, levels, the log file (appended to,
// with a fallback to stderr), the exit summary, rate-limited messages, and the descriptors the
// log writes to (never one the program may reuse).
#include "telemetry/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace vramspill {
namespace {

std::string temp_path(const std::string& suffix) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "vramspill_log_" + test->name() + suffix;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A log file that starts with one line from an earlier run (to check that it is appended to).
class LogFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = temp_path(".log");
    std::ofstream(path_, std::ios::trunc) << "earlier run\n";
  }

  void configure(LogLevel level) {
    LogConfig config;
    config.level = level;
    config.file = path_;
    config.summary = true;
    logging::configure(config);
  }

  std::string contents() {
    logging::flush();
    return read(path_);
  }

  std::string path_;
};

TEST_F(LogFileTest, AppendsLinesInTheShimsFormat) {
  configure(LogLevel::kInfo);
  logging::warn("budget is {} bytes", 42);
  logging::info("hello");
  logging::error("{}: failed", "cuMemAlloc_v2");
  logging::debug("not shown at info");
  EXPECT_EQ(contents(),
            "earlier run\n"
            "[vramspill] warning: budget is 42 bytes\n"
            "[vramspill] info: hello\n"
            "[vramspill] error: cuMemAlloc_v2: failed\n");
}

TEST_F(LogFileTest, EnabledFollowsTheLevel) {
  configure(LogLevel::kWarn);
  EXPECT_FALSE(logging::enabled(LogLevel::kTrace));
  EXPECT_FALSE(logging::enabled(LogLevel::kInfo));
  EXPECT_TRUE(logging::enabled(LogLevel::kWarn));
  EXPECT_TRUE(logging::enabled(LogLevel::kError));
  EXPECT_FALSE(logging::enabled(LogLevel::kOff));
  configure(LogLevel::kTrace);
  EXPECT_TRUE(logging::enabled(LogLevel::kTrace));
  logging::trace("t");
  EXPECT_EQ(contents(), "earlier run\n[vramspill] trace: t\n");
}

TEST_F(LogFileTest, OffWritesNothingNotEvenTheSummary) {
  configure(LogLevel::kOff);
  EXPECT_FALSE(logging::enabled(LogLevel::kError));
  logging::error("hidden");
  logging::write(LogLevel::kError, "hidden too");
  logging::summary("no summary either");
  EXPECT_EQ(contents(), "earlier run\n");
}

TEST_F(LogFileTest, SummaryIsWrittenAtAnyOtherLevel) {
  configure(LogLevel::kError);
  logging::info("hidden");
  logging::summary("peak 3 GiB");
  EXPECT_EQ(contents(), "earlier run\n[vramspill] info: peak 3 GiB\n");
}

TEST_F(LogFileTest, ReconfiguringSwitchesFiles) {
  configure(LogLevel::kInfo);
  logging::info("first");
  const std::string first = path_;
  path_ = temp_path(".second.log");
  std::ofstream(path_, std::ios::trunc).flush();
  configure(LogLevel::kInfo);
  logging::info("second");
  EXPECT_EQ(read(first), "earlier run\n[vramspill] info: first\n");
  EXPECT_EQ(contents(), "[vramspill] info: second\n");
}

// A message that repeats: kRateBurst lines, the last saying more are suppressed, then one line
// at exit with the count. Skipped in the rare run that straddles a window boundary.
TEST_F(LogFileTest, RateLimitedMessages) {
  configure(LogLevel::kInfo);
  reset_rate_limits();
  const auto window = [] {
    return std::chrono::steady_clock::now().time_since_epoch() / kRateWindow;
  };
  const auto started = window();
  for (int i = 0; i < 8; ++i)
    logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "refused allocation {}", i);
  logging::report_suppressed();
  logging::report_suppressed();  // reported once
  if (window() != started) GTEST_SKIP() << "crossed a rate-limit window; counts differ";
  EXPECT_EQ(contents(),
            "earlier run\n"
            "[vramspill] warning: refused allocation 0\n"
            "[vramspill] warning: refused allocation 1\n"
            "[vramspill] warning: refused allocation 2\n"
            "[vramspill] warning: refused allocation 3\n"
            "[vramspill] warning: refused allocation 4 (further similar messages suppressed for up "
            "to 10 s)\n"
            "[vramspill] warning: (suppressed 3 similar messages: allocations refused over the "
            "budget)\n");
}

// The report of suppressed messages has their level: suppressed spills (info) are not a warning.
TEST_F(LogFileTest, SuppressedMessagesAreReportedAtTheirOwnLevel) {
  configure(LogLevel::kInfo);
  reset_rate_limits();
  const auto window = [] {
    return std::chrono::steady_clock::now().time_since_epoch() / kRateWindow;
  };
  const auto started = window();
  for (int i = 0; i < 7; ++i) logging::limited(LogLevel::kInfo, RateKey::kSpilled, "spill {}", i);
  logging::report_suppressed();
  if (window() != started) GTEST_SKIP() << "crossed a rate-limit window; counts differ";
  EXPECT_NE(contents().find("[vramspill] info: (suppressed 2 similar messages: allocations "
                            "spilled to host memory)\n"),
            std::string::npos)
      << contents();
}

TEST_F(LogFileTest, RateLimitedMessagesBelowTheLevelAreNotCounted) {
  configure(LogLevel::kError);
  reset_rate_limits();
  for (int i = 0; i < 8; ++i) logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "x{}", i);
  EXPECT_EQ(take_suppressed(RateKey::kOverBudget), 0u);
  EXPECT_EQ(contents(), "earlier run\n");
}

TEST_F(LogFileTest, SuppressedCountRidesOnTheNextWindowsFirstMessage) {
  configure(LogLevel::kInfo);
  reset_rate_limits();
  RateDecision decision;
  decision.log = true;
  decision.suppressed_before = 12;
  logging::write_limited(LogLevel::kWarn, decision, "again");
  EXPECT_EQ(contents(),
            "earlier run\n[vramspill] warning: again (suppressed 12 similar messages)\n");
}

TEST(LogFallback, UnopenableFileFallsBackToStderrWithAWarning) {
  // A path below a regular file: neither the directory nor the file can be created.
  const std::string blocker = temp_path(".blocker");
  std::ofstream(blocker, std::ios::trunc) << "not a directory\n";
  LogConfig config;
  config.level = LogLevel::kInfo;
  config.file = blocker + "/vramspill.log";
  ::testing::internal::CaptureStderr();
  logging::configure(config);
  logging::info("still logged");
  logging::flush();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[vramspill] warning: cannot open log file '" + config.file + "' ("),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("); logging to standard error\n"), std::string::npos) << err;
  EXPECT_NE(err.find("[vramspill] info: still logged\n"), std::string::npos) << err;
}

// Note [Only regular files]: a named pipe or a directory as [log] file is refused without
// blocking (a named pipe nobody reads would otherwise stop the job at start-up).
TEST(LogFallback, FileThatIsNotARegularFileFallsBackToStderr) {
  const std::string fifo = temp_path(".fifo");
  const std::string directory = temp_path(".directory");
  std::filesystem::remove(fifo);
  std::filesystem::remove_all(directory);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(std::filesystem::create_directory(directory));
  for (const auto& [path, what] : {std::pair{fifo, std::string("a pipe")},
                                   std::pair{directory, std::string("a directory")}}) {
    LogConfig config;
    config.level = LogLevel::kInfo;
    config.file = path;
    ::testing::internal::CaptureStderr();
    logging::configure(config);
    logging::info("still logged");
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("[vramspill] warning: cannot open log file '" + path + "' (it is " + what +
                       ", not a regular file); logging to standard error\n"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("[vramspill] info: still logged\n"), std::string::npos) << err;
  }
}

// The descriptor this process has open on `path`, or -1.
int descriptor_of(const std::string& path) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    if (std::filesystem::read_symlink(entry.path(), error) == path)
      return std::stoi(entry.path().filename().string());
  }
  return -1;
}

bool file_is_empty(const std::string& path) {
  struct stat status {};
  return stat(path.c_str(), &status) == 0 && status.st_size == 0;
}

// Note [The shim's own descriptors]: with standard error closed when the logger is set up, a file
// the program opens next gets descriptor 2, and no log line may reach it.
TEST(LogDescriptor, ClosedStderrIsNotWrittenToWhenTheProgramReusesDescriptor2) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = temp_path(".program");
  EXPECT_EXIT(
      {
        close(STDERR_FILENO);
        LogConfig config;
        config.level = LogLevel::kInfo;
        logging::configure(config);
        const int own = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (own != STDERR_FILENO) std::_Exit(2);  // the test's premise
        logging::warn("must not reach the program's file");
        logging::summary("nor must the summary");
        logging::flush();
        std::_Exit(file_is_empty(path) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [No SIGPIPE from the shim's writes]: standard error is a pipe whose reader has gone (a
// `| head` that exited). Log lines and the summary are dropped, and the process lives on where
// SIGPIPE's default action would end it; a SIGPIPE of the program's own, pending before, stays.
TEST(LogDescriptor, APipeNobodyReadsRaisesNoSigpipe) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::signal(SIGPIPE, SIG_DFL);
        int ends[2];
        if (pipe(ends) != 0 || dup2(ends[1], STDERR_FILENO) < 0) std::_Exit(2);
        close(ends[0]);
        close(ends[1]);
        LogConfig config;
        config.level = LogLevel::kInfo;
        logging::configure(config);
        logging::warn("to nobody");
        logging::summary("nor this");
        sigset_t pipe_signal;
        sigemptyset(&pipe_signal);
        sigaddset(&pipe_signal, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
        raise(SIGPIPE);  // the program's own, held pending by its mask
        logging::warn("still to nobody");
        sigset_t pending;
        if (sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE) != 1) std::_Exit(3);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [A full pipe never holds the job]: standard error is a pipe that is full and that nobody
// reads for now. A line waits for room a while, then is dropped, and the next does not wait; once
// the reader has made room, lines are written again, whole.
TEST(LogDescriptor, AFullPipeDropsLinesUntilItHasRoomAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(60);  // a write that never gives up ends the test by SIGALRM
        int ends[2];
        if (pipe(ends) != 0 || dup2(ends[1], STDERR_FILENO) < 0) std::_Exit(2);
        close(ends[1]);
        if (fcntl(ends[0], F_SETFL, O_NONBLOCK) != 0) std::_Exit(2);
        LogConfig config;
        config.level = LogLevel::kInfo;
        logging::configure(config);
        if (fcntl(STDERR_FILENO, F_SETFL, O_NONBLOCK) != 0) std::_Exit(2);
        static const char filler[4096] = {};
        while (write(STDERR_FILENO, filler, sizeof filler) > 0) {
        }
        if (fcntl(STDERR_FILENO, F_SETFL, 0) != 0) std::_Exit(2);
        logging::warn("dropped after a wait");
        logging::summary("dropped at once");
        char drained[4096];
        while (::read(ends[0], drained, sizeof drained) > 0) {
        }
        logging::warn("written whole");
        char got[256] = {};
        const ssize_t length = ::read(ends[0], got, sizeof got - 1);
        std::_Exit(length > 0 && std::string(got) == "[vramspill] warning: written whole\n" ? 0
                                                                                            : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// Opened while descriptor 2 is closed, the [log] file must not take it: the program's next
// open() would not get it, and the program's own writes to standard error would land in the log.
TEST(LogDescriptor, LogFileNeverTakesDescriptors0To2) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string log_path = temp_path(".log");
  std::filesystem::remove(log_path);
  EXPECT_EXIT(
      {
        close(STDERR_FILENO);
        LogConfig config;
        config.level = LogLevel::kInfo;
        config.file = log_path;
        logging::configure(config);
        if (fcntl(STDERR_FILENO, F_GETFD) != -1) std::_Exit(1);  // the log took descriptor 2
        logging::info("logged");
        logging::flush();
        std::_Exit(read(log_path) == "[vramspill] info: logged\n" ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// A program that closes the log's descriptor (closefrom(3)) and gets the same number for a file
// of its own: the log notices that the descriptor is another file and writes nothing more.
TEST(LogDescriptor, DescriptorTakenOverByTheProgramIsNotWrittenTo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string log_path = temp_path(".log");
  const std::string program_path = temp_path(".program");
  std::filesystem::remove(log_path);
  EXPECT_EXIT(
      {
        LogConfig config;
        config.level = LogLevel::kInfo;
        config.file = log_path;
        logging::configure(config);
        const int log_descriptor = descriptor_of(log_path);
        if (log_descriptor < 3) std::_Exit(2);
        const int own = open(program_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (own < 0 || dup2(own, log_descriptor) < 0) std::_Exit(3);
        logging::warn("must not reach the program's file");
        logging::flush();
        std::_Exit(file_is_empty(program_path) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(LogDefaults, BeforeConfigureMessagesGoToStderrAtTheDefaultLevel) {
  // "threadsafe" death tests run the test again in a fresh process, where no logger exists yet.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        logging::warn("config error: {}", "unknown key");
        logging::debug("hidden");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "^\\[vramspill\\] warning: config error: unknown key\n$");
}

}  // namespace
}  // namespace vramspill
