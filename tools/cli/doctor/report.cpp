#include "doctor/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report_json.h"  // script_json_string: JSON strings, safe in HTML too

namespace vramspill::cli::doctor {
namespace {

constexpr int kVerdictWidth = 6;
constexpr int kCheckWidth = 14;

// A figure's value in JSON: a whole number without a fraction, null when unknown.
std::string json_number(const std::optional<double>& value) {
  if (!value) return "null";
  char text[32];
  if (*value == std::floor(*value) && std::fabs(*value) < 0x1p53)
    std::snprintf(text, sizeof text, "%.0f", *value);
  else
    std::snprintf(text, sizeof text, "%.17g", *value);
  return text;
}

std::string json_figures(const std::vector<Figure>& figures) {
  std::string out = "{";
  for (const Figure& figure : figures) {
    if (&figure != &figures.front()) out += ", ";
    out += script_json_string(figure.name) + ": " + json_number(figure.value);
  }
  return out + "}";
}

std::string render_json(const std::vector<const Finding*>& shown, bool blocked) {
  std::string out = "{\n  \"vramspill_doctor_version\": 1,\n  \"blocked\": ";
  out += blocked ? "true" : "false";
  out += ",\n  \"findings\": [";
  for (const Finding* finding : shown) {
    out += finding == shown.front() ? "\n" : ",\n";
    out += "    {\"check\": " + script_json_string(finding->check) +
           ", \"gpu\": " + (finding->gpu ? std::to_string(*finding->gpu) : std::string("null")) +
           ", \"verdict\": " + script_json_string(verdict_name(finding->verdict)) +
           ", \"message\": " + script_json_string(finding->message) +
           ", \"fix\": " + script_json_string(finding->fix) +
           ", \"figures\": " + json_figures(finding->figures) + "}";
  }
  out += shown.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string summary(const std::vector<Finding>& findings) {
  const auto count = [&](Verdict verdict) {
    return std::count_if(findings.begin(), findings.end(),
                         [&](const Finding& finding) { return finding.verdict == verdict; });
  };
  const auto blocks = count(Verdict::kBlock);
  const auto warnings = count(Verdict::kWarn);
  std::string out = blocks > 0 ? "spilling is blocked: " + std::to_string(blocks) +
                                     (blocks == 1 ? " block" : " blocks")
                               : std::string("nothing blocks spilling");
  if (warnings > 0)
    out += (blocks > 0 ? ", " : ": ") + std::to_string(warnings) +
           (warnings == 1 ? " warning" : " warnings");
  return out + "\n";
}

std::string render_text(const std::vector<const Finding*>& shown) {
  std::string out;
  char line[64];
  for (const Finding* finding : shown) {
    const std::string check = finding->check;
    std::snprintf(line, sizeof line, "%-*s%-*s", kVerdictWidth,
                  std::string(verdict_name(finding->verdict)).c_str(), kCheckWidth, check.c_str());
    out += line;
    if (finding->gpu) out += "gpu " + std::to_string(*finding->gpu) + ": ";
    out += finding->message + "\n";
    if (!finding->fix.empty())
      out += std::string(kVerdictWidth + kCheckWidth, ' ') + "fix: " + finding->fix + "\n";
  }
  return out;
}

}  // namespace

bool any_blocks(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(),
                     [](const Finding& finding) { return finding.verdict == Verdict::kBlock; });
}

std::string render_report(const std::vector<Finding>& findings, ReportStyle style) {
  std::vector<const Finding*> shown;
  for (const Finding& finding : findings)
    if (!style.quiet || finding.verdict != Verdict::kOk) shown.push_back(&finding);
  if (style.json) return render_json(shown, any_blocks(findings));
  if (style.quiet) return render_text(shown);
  return render_text(shown) + "\n" + summary(findings);
}

}  // namespace vramspill::cli::doctor
