#!/usr/bin/env bash
# Builds, on this machine, what tools/gpu-check.sh runs on a GPU machine that has no Debian
# packages (a lent device machine), and packs it into one tarball to carry there. Run with --help.
set -euo pipefail
# shellcheck source=tools/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Note [A fixed place for the pack]
# CMake and ctest write absolute paths into a build tree (every test's command names its program
# and its source files by absolute path), so a build tree runs only where it was built. The pack
# is therefore built in a copy of the working tree at a path that is the same on every machine,
# and unpacked at that path on the GPU machine, where ctest then finds every file.
readonly PACK_ROOT=/tmp/vramspill-gpu/main
# What tools/gpu-check.sh runs: the shim and its command, the demo programs and the nvcc-built
# kernels the gpu tests use, the probes, the workload player and the hook benchmark.
readonly TARGETS=(vramspill vramspill_cli train_demo driver_tour simcuda_vs_kernels tier_probe
                  mover_probe capture_probe reset_probe workload_player vramspill_hook_bench)
# The programs of those that the checks run, under build-gpu/.
readonly PROGRAMS=(lib/libvramspill.so bin/vramspill bin/train_demo bin/driver_tour bin/tier_probe
                   bin/mover_probe bin/capture_probe bin/reset_probe bin/workload_player
                   tests/shim/bench/vramspill_hook_bench)
# Libraries every Linux machine with a CUDA driver has; the pack carries any other that a program
# needs, and only the hook benchmark may need one (gpu-check.sh gives it the pack's).
readonly SYSTEM_LIBRARIES='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|ld-linux-x86-64)\.so'
readonly MAY_NEED_PACKED=vramspill_hook_bench

usage() {
  cat <<EOF
Usage: tools/gpu-pack.sh [--out FILE] [--trace BUDGET:FILE]... [--help]

Copies the working tree (uncommitted changes included) to $PACK_ROOT, configures build-gpu/
there (Ninja, Release, as a user builds) and builds what tools/gpu-check.sh runs:
  ${TARGETS[*]}
then packs that tree, without object files, into FILE (default build-gpu-pack/vramspill-gpu.tar.gz,
under the repository root, where git ignores it and the device tool can carry it). The shared
libraries those programs need beyond the C and C++ runtimes and libcuda (the hook benchmark's
libbenchmark) go into build-gpu/pack-libs/; any other program that needs one is an error, since
the GPU machine has no Debian packages. Each --trace is a vramspill trace that gpu-check.sh plays
there with tools/player/play_modes.py at BUDGET (e.g. 3GiB:../shared/traces/h200-pytorch-mlp-adam-2x.trace),
in every mode and with both movers. On the GPU machine, from the repository root:

  tools/gpu-check.sh --pack build-gpu-pack/vramspill-gpu.tar.gz [--steps LIST]

which unpacks to $PACK_ROOT and runs the checks there without building (its --help says how
to split them over calls that each fit a device command's time limit). The tree must be
built where the C++ toolchain and packages are (here), and nvcc must be installed for the kernels
(CUDA toolkit at /usr/local/cuda).

Environment: JOBS (build parallelism; default the number of cores).
EOF
}

out=$VRAMSPILL_ROOT/build-gpu-pack/vramspill-gpu.tar.gz
traces=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a file"; out=$(realpath -m -- "$2"); shift ;;
    --trace)
      [[ $# -ge 2 && $2 == *:* ]] || die "--trace needs BUDGET:FILE, e.g. 3GiB:job.trace"
      [[ -f ${2#*:} ]] || die "--trace: no such file: ${2#*:}"
      # The shim's size syntax (shim/util/sizes.cpp) or a percent: a typo found here costs no
      # GPU time, where every run of the trace would fail on it.
      [[ ${2%%:*} =~ ^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?([KMGT]i?B|[KMGT]|B|%)?$ ]] ||
        die "--trace: '${2%%:*}' is not a budget (a size such as 3GiB, 512MiB, 1.5GB, or a percent)"
      traces+=("$2"); shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

step "Copying the working tree to $PACK_ROOT"
mkdir -p "$PACK_ROOT"
# Everything but an earlier build-gpu/ goes, so that files deleted here are gone there too; the
# copies keep their times, so an unchanged file is not rebuilt.
find "$PACK_ROOT" -mindepth 1 -maxdepth 1 ! -name build-gpu -exec rm -rf {} +
(cd "$VRAMSPILL_ROOT" && git ls-files -z --cached --others --exclude-standard |
  tar --null --files-from=- --ignore-failed-read -cf -) | tar -C "$PACK_ROOT" -xf -

build_dir=$PACK_ROOT/build-gpu
step "Building in $build_dir"
cmake_args=(-DCMAKE_BUILD_TYPE=Release)
[[ -f $build_dir/CMakeCache.txt ]] || cmake_args+=(-G Ninja)
# The python3 the tests run: whichever is first on PATH, there as here (the GPU machine's holds
# PyTorch, at a path of its own), rather than this machine's path to it.
mkdir -p "$build_dir"
printf '#!/bin/sh\nexec python3 "$@"\n' >"$build_dir/python3-on-path"
chmod +x "$build_dir/python3-on-path"
cmake_args+=(-DPython3_EXECUTABLE="$build_dir/python3-on-path")
cmake -S "$PACK_ROOT" -B "$build_dir" "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" --parallel "$JOBS" --target "${TARGETS[@]}"
[[ -f $build_dir/simcuda/vs_kernels.fatbin ]] ||
  die "no $build_dir/simcuda/vs_kernels.fatbin: the gpu checks need nvcc (/usr/local/cuda/bin)"

step "Collecting the libraries the GPU machine lacks"
rm -rf "$build_dir/pack-libs" "$build_dir/pack-traces"
mkdir -p "$build_dir/pack-libs" "$build_dir/pack-traces"
missing=0
for program in "${PROGRAMS[@]}"; do
  [[ -f $build_dir/$program ]] || die "the build made no $program"
  while read -r name path; do
    [[ $name =~ $SYSTEM_LIBRARIES ]] && continue
    if [[ ${program##*/} != "$MAY_NEED_PACKED" ]]; then
      echo "$program needs $name, which the GPU machine lacks" >&2
      missing=1
    elif [[ -f $path ]]; then
      cp -L "$path" "$build_dir/pack-libs/$name"
    else
      echo "$program needs $name, which is not found here either" >&2
      missing=1
    fi
  done < <(ldd "$build_dir/$program" | awk '$2 == "=>" { print $1, $3 }')
done
[[ $missing -eq 0 ]] || die "the programs above would not start on the GPU machine"
ls "$build_dir/pack-libs"

for trace in "${traces[@]}"; do
  name=$(basename "${trace#*:}" .trace)
  [[ ! -e $build_dir/pack-traces/$name.trace ]] || die "two traces named $name.trace"
  cp "${trace#*:}" "$build_dir/pack-traces/$name.trace"
  echo "${trace%%:*}" >"$build_dir/pack-traces/$name.budget"
done

step "Packing"
mkdir -p "$(dirname "$out")"
tar -C / -czf "$out" --exclude='*.o' --exclude='*.a' --exclude=.ninja_log \
  --exclude="${PACK_ROOT#/}/build-gpu/Testing" "${PACK_ROOT#/}"
size=$(stat -c %s "$out")
echo "$out: $((size / 1024 / 1024)) MiB"
# The device tool carries at most 64 MiB.
((size < 64 * 1024 * 1024)) || die "$out is over the 64 MiB the device tool carries"
echo "On the GPU machine: tools/gpu-check.sh --pack ${out#"$VRAMSPILL_ROOT"/}"
