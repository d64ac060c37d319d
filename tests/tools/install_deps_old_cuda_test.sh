#!/bin/bash
# tools/install-deps.sh refuses CUDA headers older than 13.0 (the distributions' own toolkits),
# naming the version found and the one needed, instead of saying OK for a build that would fail.
set -euo pipefail
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
mkdir "$fake/include"
printf '#define CUDA_VERSION 11080\n' > "$fake/include/cuda.h"
: > "$fake/include/cudaTypedefs.h"
status=0
output=$(CUDAToolkit_ROOT=$fake "$1" 2>&1) || status=$?
printf '%s\n' "$output"
if [[ $status -ne 1 ]]; then
  echo "FAIL: exit status $status, expected 1" >&2
  exit 1
fi
if [[ $output != *"are CUDA 11.8, older than the CUDA 13.0 the build needs"* ]]; then
  echo "FAIL: the error does not name the version found and the one needed" >&2
  exit 1
fi
