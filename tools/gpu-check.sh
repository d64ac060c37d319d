#!/usr/bin/env bash
# The checks that need a real GPU, as one script for a machine with an NVIDIA driver (a lent
# device machine runs exactly this, from a tools/gpu-pack.sh pack): build, what tiered mode's
# moves cost (tier_probe), the rate of tiered mode's own mover (mover_probe), which calls break a
# capture (capture_probe), packed traces played in every mode, the gpu-labelled tests (the demo
# programs on the GPU, the train demo spilling and tiered under the shim, PyTorch under the shim
# when torch is installed), the hook benchmark against the real driver, and the demo. Run with
# --help for details.
set -uo pipefail
# shellcheck source=tools/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# --pack's file as the caller named it, before the cd below.
[[ ${1:-} == --pack && -n ${2:-} ]] && set -- --pack "$(realpath -m -- "$2")" "${@:3}"
cd "$VRAMSPILL_ROOT" || exit 1

usage() {
  cat <<EOF
Usage: tools/gpu-check.sh [--no-build | --pack FILE] [--help]

On a machine with an NVIDIA driver, in this order (what a GPU tells us first, the longest last):
  1. configures and builds build-gpu/ (Ninja, Release; no dependency installation)
  2. tier_probe (build-gpu/bin/tier_probe): what tiered mode's moves cost here, pinned copies
     against the mover's, one granule's map/set-access/unmap, a kernel reading device,
     host-located VMM and pinned zero-copy memory, what cuMemAlloc and cuMemFree cost as the
     size grows, what a managed spill costs, prefetches of managed memory each way and both
     ways at once, a prefetch call's host time and a migration on fault, what a host function
     costs the work behind it, and the step by which a fresh stream-ordered pool grows
  3. mover_probe (build-gpu/bin/mover_probe): the rate tiered mode's own mover reaches, 1 GiB
     each way in one remap window, and its VMM calls per GiB moved
  4. capture_probe (build-gpu/bin/capture_probe): which driver calls, made on another thread,
     break a stream capture in global mode (what simcuda must refuse, and the shim keep off
     while one is in progress); reset_probe (build-gpu/bin/reset_probe): what a device reset
     and the release of a primary context's last reference take with them (what the shim's
     handling of a reset and simcuda assume)
  5. the traces packed with tools/gpu-pack.sh --trace (build-gpu/pack-traces/), each played by
     tools/player/play_modes.py --system-driver at its budget, 3 steps: without the shim, in
     host and managed mode, and tiered with lru and learned and each mover, timed on the GPU
  6. ctest -L gpu: the demo programs with nvcc-built kernels, train_demo under the shim with a
     256 MiB budget (spilling, and in tiered mode: conf/demo-tiered.toml, with the safe and the
     tracked remap window), the workload player in every mode, PyTorch under the shim (skipped
     without torch): spilling, and in tiered mode with every launch read and a late-arriving
     model ending on the device (its step time printed against the same job without the shim),
     with each mover (remap, prefetch), and the frameworks' own memory settings (PyTorch's
     expandable segments and cudaMallocAsync, JAX's allocators, CuPy's pools; each skipped
     without its package) over the budget in each mode
  7. the hook benchmark (build-gpu/tests/shim/bench/vramspill_hook_bench) on the real driver
  8. tools/demo.sh --no-build against build-gpu/
Each step's output is printed; the summary at the end says which failed and how long each took.
Exits 77 without a driver.

  --no-build   skip step 1: use what build-gpu/ holds
  --pack FILE  unpack FILE, made by tools/gpu-pack.sh on a machine with the build's packages
               (a GPU machine without them: a lent device machine), to the path it was built at
               and run the checks there with --no-build
EOF
}
build=1
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  --no-build) build=0 ;;
  --pack)
    [[ -f ${2:-} ]] || die "--pack needs the file tools/gpu-pack.sh made"
    [[ $# -eq 2 ]] || die "unexpected argument '$3' (see --help)"
    # An earlier pack's tree goes first: its traces and files deleted since must not run again.
    rm -rf /tmp/vramspill-gpu/main
    tar -C / -xzf "$2" tmp/vramspill-gpu/main || die "could not unpack $2"
    # The pack holds one tree, at the path gpu-pack.sh built it (Note [A fixed place for the
    # pack] in tools/gpu-pack.sh).
    exec /tmp/vramspill-gpu/main/tools/gpu-check.sh --no-build ;;
  "") ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac
[[ $# -le 1 ]] || die "unexpected argument '$2' (see --help)"
if [[ ! -e /proc/driver/nvidia/version ]]; then
  echo "gpu-check.sh: no NVIDIA driver on this machine (/proc/driver/nvidia/version): nothing to do"
  exit 77
fi

build_dir=$VRAMSPILL_ROOT/build-gpu
results=()
failed=0
run_step() {  # run_step NAME COMMAND...
  local name=$1
  shift
  step "$name"
  local start=$SECONDS
  "$@"
  local status=$?
  local verdict=ok
  [[ $status -eq 0 ]] || { verdict="FAILED ($status)"; failed=1; }
  results+=("  $name: $verdict ($((SECONDS - start)) s)")
}

head -n 1 /proc/driver/nvidia/version
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>/dev/null || true
if [[ $build -eq 1 ]]; then
  run_step "build" configure_and_build "$build_dir"
elif [[ ! -f $build_dir/CMakeCache.txt ]]; then
  die "--no-build: $build_dir holds no build"
fi
kernels=$build_dir/simcuda/vs_kernels.fatbin
run_step "tier probe" "$build_dir/bin/tier_probe" --kernels "$kernels"
run_step "mover probe" "$build_dir/bin/mover_probe"
run_step "capture probe" "$build_dir/bin/capture_probe"
run_step "reset probe" "$build_dir/bin/reset_probe"
for trace in "$build_dir"/pack-traces/*.trace; do
  [[ -f $trace ]] || continue
  run_step "player: ${trace##*/}" python3 tools/player/play_modes.py --system-driver \
    --player "$build_dir/bin/workload_player" --kernels "$kernels" \
    --shim "$build_dir/lib/libvramspill.so" --budget "$(cat "${trace%.trace}.budget")" \
    --runs no-shim,host,managed,tiered-lru,tiered-learned --mover remap --mover prefetch \
    --timeout 120 "$trace" -- --play-steps 3
done
run_step "gpu tests" ctest --test-dir "$build_dir" -L gpu --output-on-failure
# HOOK_BENCH_DRIVER=system: the machine's driver, not simcuda (the benchmark prints which). A
# packed build brings the benchmark's library (tools/gpu-pack.sh).
run_step "hook benchmark" env VRAMSPILL_LOG_LEVEL=warn HOOK_BENCH_DRIVER=system \
  HOOK_BENCH_KERNELS="$kernels" \
  LD_LIBRARY_PATH="$build_dir/pack-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$build_dir/tests/shim/bench/vramspill_hook_bench" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.3
run_step "demo" env BUILD_DIR="$build_dir" "$VRAMSPILL_ROOT/tools/demo.sh" --no-build

step "Summary"
printf '%s\n' "${results[@]}"
exit "$failed"
