#!/bin/bash
# tools/gpu-check.sh and tools/gpu-pack.sh refuse bad arguments before they build, copy or run
# anything: on a lent GPU every minute counts, and a typo must not spend one.
set -uo pipefail
tools=$1
failures=0
expect_refused() {  # expect_refused MESSAGE COMMAND...
  local message=$1
  shift
  local output status
  output=$("$@" 2>&1)
  status=$?
  if [[ $status -ne 1 || $output != *"$message"* ]]; then
    printf 'FAIL: %s exited %d, expected 1 and "%s"; it printed:\n%s\n' "$*" "$status" \
      "$message" "$output" >&2
    failures=$((failures + 1))
  fi
}
expect_refused "unknown argument '--bogus'" "$tools/gpu-check.sh" --no-build --bogus
pack=$(mktemp)
trap 'rm -f "$pack"' EXIT
expect_refused "unknown argument 'extra'" "$tools/gpu-check.sh" --pack "$pack" extra
expect_refused "--steps: unknown step 'probe'" "$tools/gpu-check.sh" --pack "$pack" --steps probe
expect_refused "--steps needs a list" "$tools/gpu-check.sh" --no-build --steps
expect_refused "'3GiBB' is not a budget" "$tools/gpu-pack.sh" --trace "3GiBB:$pack"
expect_refused "'3 GiB' is not a budget" "$tools/gpu-pack.sh" --trace "3 GiB:$pack"
exit $((failures > 0))
