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
readonly ALL_STEPS=probes,traces,tests,bench,demo

usage() {
  cat <<EOF
Usage: tools/gpu-check.sh [--no-build | --pack FILE] [--steps LIST] [--log-dir DIR] [--help]

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
Each step's output is printed, and written to DIR/NN-STEP.log with --log-dir (default: \$OUT
when it is set, as on a lent device machine, whose tool brings back what is there: the tail of
the printed output is all it brings back otherwise); the gpu tests' full log (LastTest.log,
every test's output, passing ones' too) goes there as well. Each step runs under a time limit
(its summary line says TIMED OUT), so that one that hangs leaves the others their time. The
summary at the end says which failed and how long each took. Exits 77 without a driver.

  --no-build    skip step 1: use what build-gpu/ holds
  --pack FILE   unpack FILE, made by tools/gpu-pack.sh on a machine with the build's packages
                (a GPU machine without them: a lent device machine), to the path it was built at
                and run the checks there with --no-build
  --steps LIST  run only these of steps 2-8, comma-separated: probes (2-4), traces (5), tests
                (6), bench (7), demo (8); default all: $ALL_STEPS. A device command may run
                10 minutes: split the checks over calls, e.g. --steps probes,traces, then
                --steps tests, then --steps bench,demo (unpacking again each time is quick)
  --log-dir DIR where the steps' logs go (created if missing)
EOF
}
build=1
pack=""
steps=$ALL_STEPS
log_dir=${OUT:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --no-build) build=0 ;;
    --pack)
      [[ -f ${2:-} ]] || die "--pack needs the file tools/gpu-pack.sh made"
      pack=$2; shift ;;
    --steps)
      [[ -n ${2:-} ]] || die "--steps needs a list, e.g. probes,traces"
      for wanted in ${2//,/ }; do
        [[ ,$ALL_STEPS, == *,$wanted,* ]] || die "--steps: unknown step '$wanted' (known: $ALL_STEPS)"
      done
      steps=$2; shift ;;
    --log-dir)
      [[ -n ${2:-} ]] || die "--log-dir needs a directory"
      log_dir=$(realpath -m -- "$2"); shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [[ -n $pack ]]; then
  # An earlier pack's tree goes first: its traces and files deleted since must not run again.
  rm -rf /tmp/vramspill-gpu/main
  tar -C / -xzf "$pack" tmp/vramspill-gpu/main || die "could not unpack $pack"
  # The pack holds one tree, at the path gpu-pack.sh built it (Note [A fixed place for the
  # pack] in tools/gpu-pack.sh).
  exec /tmp/vramspill-gpu/main/tools/gpu-check.sh --no-build --steps "$steps" \
    ${log_dir:+--log-dir "$log_dir"}
fi
wants() { [[ ,$steps, == *,$1,* ]]; }
if [[ -n $log_dir ]]; then
  mkdir -p "$log_dir" || die "cannot make the log directory $log_dir"
fi
if [[ ! -e /proc/driver/nvidia/version ]]; then
  echo "gpu-check.sh: no NVIDIA driver on this machine (/proc/driver/nvidia/version): nothing to do"
  exit 77
fi

build_dir=$VRAMSPILL_ROOT/build-gpu
results=()
failed=0
logged=0
# run_step NAME LIMIT COMMAND...: COMMAND (a program, not a shell function) for LIMIT seconds at
# most, its output also in the log directory when there is one.
run_step() {
  local name=$1 limit=$2
  shift 2
  step "$name"
  local start=$SECONDS status
  if [[ -n $log_dir ]]; then
    logged=$((logged + 1))
    local log
    log=$log_dir/$(printf '%02d' "$logged")-${name//[^A-Za-z0-9.]/-}.log
    timeout --kill-after=15 "$limit" "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
  else
    timeout --kill-after=15 "$limit" "$@"
    status=$?
  fi
  local verdict=ok
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    verdict="TIMED OUT after $limit s"
    failed=1
  elif [[ $status -ne 0 ]]; then
    verdict="FAILED ($status)"
    failed=1
  fi
  results+=("  $name: $verdict ($((SECONDS - start)) s)")
}

head -n 1 /proc/driver/nvidia/version
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>/dev/null || true
if [[ $build -eq 1 ]]; then
  step "build"
  configure_and_build "$build_dir" || die "the build failed"
elif [[ ! -f $build_dir/CMakeCache.txt ]]; then
  die "--no-build: $build_dir holds no build"
fi
kernels=$build_dir/simcuda/vs_kernels.fatbin
if wants probes; then
  run_step "tier probe" 240 "$build_dir/bin/tier_probe" --kernels "$kernels"
  run_step "mover probe" 120 "$build_dir/bin/mover_probe"
  run_step "capture probe" 120 "$build_dir/bin/capture_probe"
  run_step "reset probe" 60 "$build_dir/bin/reset_probe"
fi
if wants traces; then
  for trace in "$build_dir"/pack-traces/*.trace; do
    [[ -f $trace ]] || continue
    run_step "player: ${trace##*/}" 420 python3 tools/player/play_modes.py --system-driver \
      --player "$build_dir/bin/workload_player" --kernels "$kernels" \
      --shim "$build_dir/lib/libvramspill.so" --budget "$(cat "${trace%.trace}.budget")" \
      --runs no-shim,host,managed,tiered-lru,tiered-learned --mover remap --mover prefetch \
      --timeout 120 "$trace" -- --play-steps 3
  done
fi
if wants tests; then
  # From inside the build tree: `ctest --test-dir` needs CMake 3.20.
  run_step "gpu tests" 540 env -C "$build_dir" ctest -L gpu --output-on-failure --timeout 300
  if [[ -n $log_dir && -f $build_dir/Testing/Temporary/LastTest.log ]]; then
    cp "$build_dir/Testing/Temporary/LastTest.log" "$log_dir/gpu-tests-LastTest.log"
  fi
fi
# HOOK_BENCH_DRIVER=system: the machine's driver, not simcuda (the benchmark prints which). A
# packed build brings the benchmark's library (tools/gpu-pack.sh).
if wants bench; then
  run_step "hook benchmark" 180 env VRAMSPILL_LOG_LEVEL=warn HOOK_BENCH_DRIVER=system \
    HOOK_BENCH_KERNELS="$kernels" \
    LD_LIBRARY_PATH="$build_dir/pack-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$build_dir/tests/shim/bench/vramspill_hook_bench" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.3
fi
if wants demo; then
  run_step "demo" 240 env BUILD_DIR="$build_dir" "$VRAMSPILL_ROOT/tools/demo.sh" --no-build
fi

step "Summary"
printf '%s\n' "${results[@]}"
exit "$failed"
