// One line of `vramspill doctor`'s report: a check, its verdict and, unless all is well, the fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramspill::cli::doctor {

enum class Verdict : uint8_t {
  kOk,
  kWarn,   // spilling works, slower or smaller than it could
  kBlock,  // spilling does not work (the exit status is 1)
};

// A number a check was judged by, for --json; no value when the fact could not be read.
struct Figure {
  std::string name;  // with its unit: "mem_total_bytes", "pcie_speed_gts"
  std::optional<double> value;

  template <typename Number>
  Figure(std::string figure_name, std::optional<Number> number) : name(std::move(figure_name)) {
    if (number) value = static_cast<double>(*number);
  }
  template <typename Number>
  Figure(std::string figure_name, Number number)
      : name(std::move(figure_name)), value(static_cast<double>(number)) {}
};

struct Finding {
  std::string check;       // "memlock", "pcie", ...
  std::optional<int> gpu;  // the GPU's index, for a check of one GPU
  Verdict verdict = Verdict::kOk;
  std::string message;
  std::string fix;  // one line; empty when ok
  std::vector<Figure> figures;
};

// `finding` with the figures its check read (the message has them as prose).
inline Finding with_figures(Finding finding, std::vector<Figure> figures) {
  finding.figures = std::move(figures);
  return finding;
}

// A finding about the whole machine, and one about one GPU.
inline Finding machine_finding(const char* check, Verdict verdict, std::string message,
                               std::string fix = "") {
  return {.check = check,
          .gpu = std::nullopt,
          .verdict = verdict,
          .message = std::move(message),
          .fix = std::move(fix),
          .figures = {}};
}
inline Finding gpu_finding(const char* check, int gpu, Verdict verdict, std::string message,
                           std::string fix = "") {
  return {.check = check,
          .gpu = gpu,
          .verdict = verdict,
          .message = std::move(message),
          .fix = std::move(fix),
          .figures = {}};
}

constexpr std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kBlock:
      return "block";
  }
  return "?";
}

}  // namespace vramspill::cli::doctor
