#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo — on the GPU when an NVIDIA
# driver is present, otherwise on simcuda, the simulated driver. Run with --help for details.
set -euo pipefail
# shellcheck source=tools/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$VRAMSPILL_ROOT"

usage() {
  cat <<EOF
Usage: tools/demo.sh [--sim] [--help] [-- DEMO_ARGS...]

Installs missing build dependencies (tools/install-deps.sh), configures and builds build/
(Ninja, RelWithDebInfo) and runs the demo, build/bin/oom_demo: a plain CUDA driver-API program that
asks for 1.5 times the device's memory and verifies every byte it got. Without vramspill it runs
out of device memory; that is the expected outcome today (the shim that removes it comes next),
and demo.sh exits 0 for it. Any other failure exits non-zero.

The demo runs on the real GPU when an NVIDIA driver is present (/proc/driver/nvidia/version, or a
libcuda.so.1 in the loader cache that is not simcuda); otherwise it runs on the simulated GPU, with
build/simcuda (simcuda's libcuda.so.1) first on LD_LIBRARY_PATH. simcuda reads SIMCUDA_* variables
from the environment (see tools/simcuda/README.md).

  --sim        run on the simulated GPU even when a driver is present
  -h, --help   show this help
  DEMO_ARGS    passed to the demo program
EOF
}

force_sim=0
demo_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --sim) force_sim=1 ;;
    --) shift; demo_args=("$@"); break ;;
    *) printf 'demo.sh: unknown argument %s\n' "$1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

build_dir=$VRAMSPILL_ROOT/build
sim_dir=$build_dir/simcuda
demo=$build_dir/bin/oom_demo   # tools/demo/CMakeLists.txt

# Prints the path of the NVIDIA driver's libcuda.so.1 when one is installed, else nothing.
# simcuda's copy (anything inside this repository or a directory named simcuda) and the toolkit's
# link-time stubs do not count.
real_driver_lib() {
  command -v ldconfig >/dev/null 2>&1 || return 0
  local path real
  while read -r path; do
    real=$(readlink -f "$path" 2>/dev/null || printf '%s' "$path")
    case $real in
      "$VRAMSPILL_ROOT"/* | */simcuda/* | */stubs/*) continue ;;
    esac
    printf '%s\n' "$path"
    return 0
  done < <(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libcuda\.so\.1 (.*) => //p')
}

step "Checking build dependencies"
"$VRAMSPILL_ROOT/tools/install-deps.sh"

step "Configuring and building $build_dir"
configure_and_build "$build_dir" || die "the build failed (see the output above)"

if [[ ! -x $demo ]]; then
  die "the demo program $demo was not built (its target is oom_demo in tools/demo/)"
fi

driver_lib=$(real_driver_lib)
if [[ $force_sim -eq 0 && ( -r /proc/driver/nvidia/version || -n $driver_lib ) ]]; then
  # A demo linked against simcuda with a build-tree RUNPATH would load simcuda even here.
  linked=$(ldd "$demo" 2>/dev/null || true)
  if [[ $linked == *"libcuda.so.1 => $sim_dir/"* ]]; then
    die "$demo resolves libcuda.so.1 to simcuda through its RUNPATH, so it cannot run on the GPU;" \
      "run 'tools/demo.sh --sim' or rebuild it without a RUNPATH to build/simcuda"
  fi
  step "Running the demo on the GPU (NVIDIA driver: ${driver_lib:-$(head -n 1 /proc/driver/nvidia/version)})"
else
  [[ -f $sim_dir/libcuda.so.1 ]] || die "simcuda's $sim_dir/libcuda.so.1 was not built"
  export LD_LIBRARY_PATH=$sim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  step "Running the demo on the simulated GPU (simcuda: $sim_dir/libcuda.so.1, SIMCUDA_VRAM=${SIMCUDA_VRAM:-1GiB (default)})"
fi

rc=0
"$demo" "${demo_args[@]}" || rc=$?
echo
case $rc in
  0) echo "demo.sh: the whole working set was allocated and verified." ;;
  2)
    echo "demo.sh: the demo ran out of device memory (CUDA_ERROR_OUT_OF_MEMORY), as a CUDA program does"
    echo "without vramspill. Removing that failure is vramspill's job: today the shim (build/lib/libvramspill.so)"
    echo "enforces a device budget on every allocation route; spilling the overflow to host memory comes next."
    rc=0
    ;;
  *) echo "demo.sh: the demo FAILED (exit status $rc)." >&2 ;;
esac
exit "$rc"
