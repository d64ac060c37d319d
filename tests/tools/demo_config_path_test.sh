#!/bin/bash
# tools/demo.sh --config FILE finds a relative FILE from the directory it was started in, not
# from the repository it changes to: the job's policy here names a bad budget, which the run
# under vramspill must report from this directory's file.
set -euo pipefail
demo=$1
build=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '[device]\nbudget = "lots"\n' > "$dir/job.toml"
cd "$dir"
output=$(BUILD_DIR=$build "$demo" --no-build --sim --config job.toml 2>&1) || true
printf '%s\n' "$output"
if [[ $output != *"bad value 'lots' for device.budget at $dir/job.toml:2:10"* ]]; then
  echo "FAIL: the run did not read $dir/job.toml" >&2
  exit 1
fi
