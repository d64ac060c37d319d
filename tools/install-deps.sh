#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages vramspill needs to build and test, and checks for the CUDA
# toolkit headers (which do not come from the distribution's default repositories).
# Run with --help for details. Safe to run repeatedly: when everything is present it prints one line.

# The one list of distribution packages the project builds with (the tests' programs included).
PACKAGES=(
  build-essential
  cmake
  ninja-build
  python3
  pkg-config
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libtomlplusplus-dev
  libspdlog-dev
  libfmt-dev
  libmimalloc-dev
  libunwind-dev
  libcli11-dev
  libcpp-httplib-dev
  file
  binutils
  # Chart.js 3, which `vramspill report` embeds in its pages (found by tools/cli/CMakeLists.txt).
  libjs-chart.js
)
# What only running the tests needs (--tests; tools/test.sh asks for it, tools/demo.sh does not).
TEST_PACKAGES=(
  # The fuzzers' compiler and libFuzzer runtime (tools/test.sh's fuzz pass).
  clang
  libclang-rt-dev
  # For promtool, which the exporter's tests (tests/cli) check its output with. The package also
  # brings the Prometheus server, which on a systemd machine starts a service on :9090; Debian
  # has no package with promtool alone.
  prometheus
)
# Test packages installed on Debian only. chromium: a real browser for the report's test
# (tests/cli/report_job_test.py), which opens its pages in headless Chromium; large (a few
# hundred MB with its libraries). Ubuntu ships Chromium only as a snap, which containers cannot
# run: there the test skips.
DEBIAN_ONLY_TEST_PACKAGES=(
  chromium
)
MIN_CMAKE_VERSION=3.25   # keep in step with cmake_minimum_required in CMakeLists.txt
MIN_CUDA_VERSION=13000   # cuda.h's CUDA_VERSION; keep in step with cmake/VramspillDependencies.cmake

set -euo pipefail

prog=${0##*/}

usage() {
  cat <<EOF
Usage: $prog [--tests] [--help]

Installs the packages needed to build vramspill on Debian or Ubuntu (and with --tests, also those
its tests need) and checks that the NVIDIA CUDA toolkit headers are present. Installs only what is
missing (apt-get update runs once, and only then). Needs root: runs apt-get through sudo when not
root and sudo exists, otherwise prints the command to run.

  --tests   also the packages only the tests use (tools/test.sh passes it)

Packages: ${PACKAGES[*]}
With --tests: ${TEST_PACKAGES[*]}; on Debian also ${DEBIAN_ONLY_TEST_PACKAGES[*]}

The CUDA toolkit headers (cuda.h and cudaTypedefs.h) are looked for in \$CUDAToolkit_ROOT/include,
\$CUDA_HOME/include, /usr/local/cuda/include and /usr/include (the rest of the toolkit is found
by CMake's FindCUDAToolkit). nvcc is optional.

Exit status: 0 when everything is present afterwards, non-zero otherwise.
EOF
}

say() { printf '%s: %s\n' "$prog" "$*"; }
err() { printf '%s: error: %s\n' "$prog" "$*" >&2; }

cuda_help() {
  cat >&2 <<'EOF'
The NVIDIA CUDA toolkit 13.0 or later is required: its headers (cuda.h, cudaTypedefs.h) and its
stub libcuda.so, which test programs link like any CUDA application. nvcc is optional (without it
the test of the real CUDA runtime is skipped). No GPU or NVIDIA driver is needed: tests run on
simcuda. The distributions' own nvidia-cuda-toolkit packages are older (11.x, 12.0): install
from NVIDIA's apt repository (https://developer.nvidia.com/cuda-downloads: Linux > x86_64 >
Debian or Ubuntu > deb (network)), then:
        sudo apt-get install cuda-toolkit-13-0
If the toolkit is installed somewhere other than /usr/local/cuda, point the build at it:
        export CUDA_HOME=/path/to/cuda          # read by this script and by the CMake build
   or   cmake -DCUDAToolkit_ROOT=/path/to/cuda ...
EOF
}

tests=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --tests) tests=1; shift ;;
    *) err "unknown argument '$1'"; usage >&2; exit 2 ;;
  esac
done

# --- Distribution check -------------------------------------------------------------------------
is_debian_like() {
  [[ -r /etc/os-release ]] || return 1
  local id="" id_like=""
  # shellcheck disable=SC1091
  id=$(. /etc/os-release && printf '%s' "${ID:-}")
  # shellcheck disable=SC1091
  id_like=$(. /etc/os-release && printf '%s' "${ID_LIKE:-}")
  [[ " $id $id_like " == *" debian "* || " $id $id_like " == *" ubuntu "* ]] || return 1
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1
}

if ! is_debian_like; then
  err "this script installs packages on Debian or Ubuntu only (no apt-get/dpkg, or /etc/os-release"
  err "does not name debian or ubuntu)."
  cat >&2 <<EOF
Install the equivalents of these Debian packages with your system's package manager:
  ${PACKAGES[*]}
  and for the tests: ${TEST_PACKAGES[*]} ${DEBIAN_ONLY_TEST_PACKAGES[*]}
That is: a C++20 compiler (GCC 12+ or Clang 15+), CMake >= $MIN_CMAKE_VERSION, Ninja, Python 3,
pkg-config, GoogleTest + GoogleMock, Google Benchmark, toml++, spdlog, fmt, mimalloc, libunwind
(nongnu.org), CLI11, cpp-httplib, file, binutils and Chart.js 3 (chart.min.js, embedded by
\`vramspill report\`); for the tests also clang with its libFuzzer runtime for the fuzzers,
Prometheus's promtool, which checks what \`vramspill exporter\` serves, and Chromium, whose
headless mode tests the report.
EOF
  cuda_help
  exit 1
fi

# --- Packages -----------------------------------------------------------------------------------
if [[ $tests -eq 1 ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
  # shellcheck disable=SC1091
  if [[ $(. /etc/os-release && printf '%s' "${ID:-}") == debian ]]; then
    PACKAGES+=("${DEBIAN_ONLY_TEST_PACKAGES[@]}")
  fi
fi
is_installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done

if [[ ${#missing[@]} -gt 0 ]]; then
  apt_install=(apt-get install -y --no-install-recommends "${missing[@]}")
  if [[ $EUID -eq 0 ]]; then
    as_root=(env DEBIAN_FRONTEND=noninteractive)
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo env DEBIAN_FRONTEND=noninteractive)
  else
    err "missing packages: ${missing[*]}"
    err "not root and sudo is not available; as root, run:"
    printf '  apt-get update && DEBIAN_FRONTEND=noninteractive %s\n' "${apt_install[*]}" >&2
    exit 1
  fi
  say "installing missing packages: ${missing[*]}"
  "${as_root[@]}" apt-get update -q
  "${as_root[@]}" "${apt_install[@]}"

  still_missing=()
  for pkg in "${missing[@]}"; do
    is_installed "$pkg" || still_missing+=("$pkg")
  done
  if [[ ${#still_missing[@]} -gt 0 ]]; then
    err "still not installed after apt-get: ${still_missing[*]}"
    exit 1
  fi
fi

# --- CMake version (older Ubuntu releases ship an older one) ------------------------------------
cmake_version=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
if [[ -z $cmake_version ]] || ! printf '%s\n%s\n' "$MIN_CMAKE_VERSION" "$cmake_version" | sort -V -C; then
  err "CMake >= $MIN_CMAKE_VERSION is required, found '${cmake_version:-none}'."
  err "On older releases use Kitware's apt repository (https://apt.kitware.com) or 'pip install cmake'."
  exit 1
fi

# --- CUDA toolkit headers -----------------------------------------------------------------------
cuda_include=""
for dir in ${CUDAToolkit_ROOT:+"$CUDAToolkit_ROOT/include"} ${CUDA_HOME:+"$CUDA_HOME/include"} \
  /usr/local/cuda/include /usr/include; do
  if [[ -f $dir/cuda.h && -f $dir/cudaTypedefs.h ]]; then
    cuda_include=$dir
    break
  fi
done
if [[ -z $cuda_include ]]; then
  err "CUDA toolkit headers not found (looked for cuda.h and cudaTypedefs.h in" \
    "${CUDAToolkit_ROOT:+\$CUDAToolkit_ROOT/include, }${CUDA_HOME:+\$CUDA_HOME/include, }/usr/local/cuda/include, /usr/include)."
  cuda_help
  exit 1
fi
cuda_version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda_include/cuda.h" | head -n 1)
# The shim hooks entry points that only CUDA 13.0's headers declare (shim/driver/undeclared_exports.h).
if [[ -z $cuda_version || $cuda_version -lt $MIN_CUDA_VERSION ]]; then
  err "the CUDA headers in $cuda_include are ${cuda_version:+CUDA $((cuda_version / 1000)).$((cuda_version % 1000 / 10)), }older than the CUDA 13.0 the build needs."
  cuda_help
  exit 1
fi
cuda_version="$((cuda_version / 1000)).$((cuda_version % 1000 / 10))"

what="build dependencies"
[[ $tests -eq 1 ]] && what="build and test dependencies"
say "OK: $what present (CUDA ${cuda_version:-?} headers in $cuda_include)"
