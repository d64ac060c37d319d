// How `vramspill doctor` prints its findings: aligned text for people, or JSON for programs.
//
// The JSON (--json) is one object:
//   {"vramspill_doctor_version": 1, "blocked": BOOL, "findings": [FINDING, ...]}
// with each FINDING
//   {"check": "memlock", "gpu": null or the GPU's index, "verdict": "ok" | "warn" | "block",
//    "message": "...", "fix": "..." (empty when ok),
//    "figures": {"memlock_bytes": 65536, ...} (the numbers the check read, by name with their
//    unit; null for one it could not read, or for no limit; {} when it read none)}
// in the order of the text report; "blocked" is whether any finding blocks (the exit status 1).
#pragma once

#include <string>
#include <vector>

#include "doctor/finding.h"

namespace vramspill::cli::doctor {

struct ReportStyle {
  bool json = false;
  bool quiet = false;  // only warnings and blocks, and no summary line
};

std::string render_report(const std::vector<Finding>& findings, ReportStyle style);

bool any_blocks(const std::vector<Finding>& findings);

}  // namespace vramspill::cli::doctor
