// The fault matrix (README.md in this folder): for each cell of fault_matrix_cells.h, runs
// faults_program under the shim on simcuda once per listed call, with SIMCUDA_FAIL failing that
// call, and checks what the program saw:
//   - it exited normally (no signal) after its own checks: every byte it wrote read back, the
//     device never held more than the budget, and after every free cuMemGetInfo reports the whole
//     budget free and the device holds nothing;
//   - at most one of its calls departed from the clean run (one call was failed), and that one
//     got the injected error from the injected function itself, or what the cell's outcome
//     allows (a spill that could not be placed, or the driver's answer about a stream);
//   - the shim logged no error.
//
// `vramspill_fault_matrix_test --print-matrix` prints the table README.md holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fault_matrix_cells.h"
#include "subprocess.h"

namespace {

using faults::Cell;
using faults::Outcome;
using faults::Spill;
using vramspill::testing::Environment;
using vramspill::testing::kUnset;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

constexpr int kBudgetMiB = 256;
constexpr int kTimeoutSeconds = 60;

const char* spill_name(Spill spill) {
  switch (spill) {
    case Spill::kAuto:
      return "auto";
    case Spill::kHost:
      return "host";
    case Spill::kOff:
      return "off";
  }
  return "?";
}

const char* outcome_text(Outcome outcome) {
  switch (outcome) {
    case Outcome::kInjectedOnly:
      return "the shim copes; a call of the program's own gets the error";
    case Outcome::kSpillOutOfMemory:
      return "or an allocation past the budget is CUDA_ERROR_OUT_OF_MEMORY (no spill tier)";
    case Outcome::kStreamOrderedError:
      return "or a stream-ordered allocation or free gets the error (the shim's capture check)";
    case Outcome::kDeviceQueryError:
      return "or an allocation or cuMemGetInfo gets the error (the shim cannot tell its device)";
  }
  return "?";
}

// The program's run in the cell's environment, failing call `call` of the cell's function:
// simcuda with 1 GiB, the shim with a 256 MiB budget, a host limit given as a size (so that
// RLIMIT_MEMLOCK does not apply) and a host pool growing by 32 MiB; none of the caller's
// VRAMSPILL_* or SIMCUDA_* settings.
RunResult run_cell(const Cell& cell, int call) {
  Environment environment = {
      {"LD_LIBRARY_PATH", VRAMSPILL_TEST_SIMCUDA_DIR},
      {"LD_PRELOAD", VRAMSPILL_TEST_PRELOAD},
      {"SIMCUDA_VRAM", "1GiB"},
      {"SIMCUDA_DEVICES", "1"},
      {"SIMCUDA_FAIL",
       std::string(cell.function) + "@" + std::to_string(call) + "=" + cell.result.name},
      {"VRAMSPILL_DEVICE_BUDGET", std::to_string(kBudgetMiB) + "MiB"},
      {"VRAMSPILL_SPILL_MODE", spill_name(cell.spill)},
      {"VRAMSPILL_SPILL_HOST_LIMIT", "1GiB"},
      {"VRAMSPILL_SPILL_HOST_POOL_STEP", "32MiB"},
      {"VRAMSPILL_LOG_LEVEL", "warn"},
      {"FAULTS_SPILL", spill_name(cell.spill)},
      {"FAULTS_BUDGET_MIB", std::to_string(kBudgetMiB)},
      {"FAULTS_FUNCTION", cell.function},
      {"FAULTS_RESULT", std::to_string(static_cast<int>(cell.result.value))}};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (text.starts_with("VRAMSPILL_") || text.starts_with("SIMCUDA_"))
      environment.emplace(text.substr(0, text.find('=')), kUnset);
  }
  return run_program({FAULTS_PROGRAM}, environment, kTimeoutSeconds);
}

// The program's departures from its clean run: "injected NAME = R" and "surfaced NAME = R ...".
std::vector<std::string> departures(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("injected ") || line.starts_with("surfaced ")) lines.push_back(line);
  return lines;
}

bool allowed_surface(const Cell& cell, std::string_view name, int result) {
  // The routes that spill (cuMemCreate as a host-located handle, in every mode but off).
  static constexpr std::array<std::string_view, 8> kAllocations = {
      "cuMemAlloc_v2",         "cuMemAllocPitch_v2",      "cuMemAllocManaged",
      "cuMemAllocAsync",       "cuMemAllocAsync_ptsz",    "cuMemAllocFromPoolAsync",
      "cuMemAllocFromPoolAsync_ptsz", "cuMemCreate"};
  static constexpr std::array<std::string_view, 6> kStreamOrdered = {
      "cuMemAllocAsync",         "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
      "cuMemAllocFromPoolAsync_ptsz", "cuMemFreeAsync",   "cuMemFreeAsync_ptsz"};
  // The routes that ask for the current device (Note [A failed device query fails the request]
  // in shim/hooks/devices.h).
  static constexpr std::array<std::string_view, 7> kCurrentDeviceRoutes = {
      "cuMemGetInfo_v2",  "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuMipmappedArrayCreate",
      "cuMemAlloc",       "cuMemAllocPitch",  "cuMemCreate"};
  const auto one_of = [name](const auto& names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  switch (cell.outcome) {
    case Outcome::kInjectedOnly:
      return false;
    case Outcome::kSpillOutOfMemory:
      return result == CUDA_ERROR_OUT_OF_MEMORY && one_of(kAllocations);
    case Outcome::kStreamOrderedError:
      return result == cell.result.value && one_of(kStreamOrdered);
    case Outcome::kDeviceQueryError:
      return result == cell.result.value && (one_of(kAllocations) || one_of(kCurrentDeviceRoutes));
  }
  return false;
}

// A departure line, "injected NAME = N" or "surfaced NAME = N (expected M)".
struct Departure {
  bool injected = false;
  std::string name;
  int result = 0;
};

std::optional<Departure> parse_departure(const std::string& line) {
  std::istringstream fields(line);
  std::string kind;
  std::string equals;
  Departure departure;
  if (!(fields >> kind >> departure.name >> equals >> departure.result) || equals != "=")
    return std::nullopt;
  if (kind != "injected" && kind != "surfaced") return std::nullopt;
  departure.injected = kind == "injected";
  return departure;
}

void check_run(const Cell& cell, int call) {
  SCOPED_TRACE(std::string("SIMCUDA_FAIL=") + cell.function + "@" + std::to_string(call) + "=" +
               cell.result.name + ", [spill] mode " + spill_name(cell.spill));
  const RunResult result = run_cell(cell, call);
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.err.find("[vramspill] error"), std::string::npos) << result.err;
  const std::vector<std::string> lines = departures(result.out);
  EXPECT_LE(lines.size(), 1u) << "one failed call, several departures:\n" << result.out;
  for (const std::string& line : lines) {
    const std::optional<Departure> departure = parse_departure(line);
    ASSERT_TRUE(departure.has_value()) << line;
    if (departure->injected) {
      EXPECT_EQ(departure->result, static_cast<int>(cell.result.value)) << line;
    } else {
      EXPECT_TRUE(allowed_surface(cell, departure->name, departure->result))
          << line << "\nallowed: " << outcome_text(cell.outcome);
    }
  }
}

class FaultMatrix : public ::testing::TestWithParam<Cell> {};

}  // namespace

namespace faults {

// How gtest names a cell in its messages (the test's name says it too).
void PrintTo(const Cell& cell, std::ostream* out) {
  *out << cell.function << " " << cell.result.name << " [spill] mode " << spill_name(cell.spill);
}

}  // namespace faults

namespace {

TEST_P(FaultMatrix, ProgramGetsTheErrorOrASpillAndTheBudgetIsWhole) {
  for (const int call : GetParam().calls) check_run(GetParam(), call);
}

std::vector<Cell> select(bool known_findings) {
  std::vector<Cell> out;
  for (const Cell& cell : faults::cells())
    if ((cell.finding != nullptr) == known_findings) out.push_back(cell);
  return out;
}

std::string cell_name(const ::testing::TestParamInfo<Cell>& info) {
  std::string result = info.param.result.name;
  result.erase(0, std::strlen("CUDA_ERROR_"));
  // A function and error can be split over two cells (some calls a finding, the rest not).
  return std::string(info.param.function) + "_" + result + "_" + spill_name(info.param.spill) +
         "_" + std::to_string(info.param.calls.front());
}

INSTANTIATE_TEST_SUITE_P(Cells, FaultMatrix, ::testing::ValuesIn(select(false)), cell_name);
// Known bugs (README.md's findings): run them with --gtest_also_run_disabled_tests.
INSTANTIATE_TEST_SUITE_P(DISABLED_KnownFindings, FaultMatrix, ::testing::ValuesIn(select(true)),
                         cell_name);

// README.md's table: one row per cell.
void print_matrix() {
  std::printf("| Function | Error | [spill] mode | Calls failed (of a clean run's) | Expected |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Cell& cell : faults::cells()) {
    std::string calls;
    for (const int call : cell.calls) {
      if (!calls.empty()) calls += ' ';
      calls += std::to_string(call);
    }
    std::printf("| `%s` | `%s` | %s | %s (of %d) | %s |\n", cell.function, cell.result.name,
                spill_name(cell.spill), calls.c_str(), cell.clean_calls,
                cell.finding != nullptr ? (std::string("known bug ") + cell.finding).c_str()
                                        : outcome_text(cell.outcome));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--print-matrix") == 0) {
    print_matrix();
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
