#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo — on the GPU when an NVIDIA
# driver is present, otherwise on simcuda, the simulated driver. Run with --help for details.
set -euo pipefail
# shellcheck source=tools/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
caller_dir=$PWD   # where a relative --config is found
cd "$VRAMSPILL_ROOT"

usage() {
  cat <<EOF
Usage: tools/demo.sh [--sim] [--no-build] [--config FILE] [--help] [-- DEMO_ARGS...]

Installs missing build dependencies (tools/install-deps.sh), configures and builds build/
(Ninja, Release) and runs the demo job twice. The job, build/bin/train_demo, is a plain
CUDA driver-API program that trains like a framework: parameters, activations, gradients and
momentum in many 64 MiB cuMemAlloc blocks, three times the device memory that cuMemGetInfo
reports, updated by SGD with momentum (vs_copy and vs_axpy_f32 kernels) and verified element by
element on the host (train_demo --help says more).

  1. Without vramspill: the job runs out of device memory (CUDA_ERROR_OUT_OF_MEMORY, exit 2).
     That is the expected outcome.
  2. Under vramspill (build/bin/vramspill run -c conf/demo.toml -- ...; when that command is
     not built, LD_PRELOAD=build/lib/libvramspill.so with VRAMSPILL_CONFIG): the job gets a
     256 MiB device budget, cuMemGetInfo reports that budget, and what the job allocates beyond
     it is spilled to host memory. The job finishes and verifies; it prints where its blocks
     live (cuPointerGetAttribute) and vramspill logs what it spilled where. On simcuda,
     demo.sh then prints simcuda's modeled cost of the run (SIMCUDA_STATS).

demo.sh exits 0 when both runs end as described, non-zero on any other outcome.

The demo runs on the real GPU when an NVIDIA driver is present (/proc/driver/nvidia/version, or a
libcuda.so.1 in the loader cache that is not simcuda), with the kernels nvcc built into
build/simcuda/vs_kernels.fatbin; on a GPU, run 1 sizes itself from the whole device and fails
at the first allocation the device cannot hold, before any data is written. Otherwise it runs on
the simulated GPU, with build/simcuda (simcuda's libcuda.so.1) first on LD_LIBRARY_PATH and
SIMCUDA_VRAM=256MiB unless set, so both runs ask for the same 768 MiB. simcuda reads SIMCUDA_*
variables from the environment (see tools/simcuda/README.md).

  --sim          run on the simulated GPU even when a driver is present
  --no-build     skip the dependency check and the build; use what BUILD_DIR holds
  --config FILE  vramspill policy for run 2 (default conf/demo.toml)
  -h, --help     show this help
  DEMO_ARGS      passed to train_demo in both runs (e.g. --steps 5, --bytes 1GiB)

Environment:
  BUILD_DIR      build directory (default build/, relative to the repository root)
  JOBS           build parallelism (default: the number of cores)
  SIMCUDA_VRAM   simulated device memory (default here 256MiB)
EOF
}

# A path as the caller meant it, from the directory the script was started in.
from_caller() {
  if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "$caller_dir" "$1"; fi
}

force_sim=0
build=1
config=conf/demo.toml
demo_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --sim) force_sim=1 ;;
    --no-build) build=0 ;;
    --config)
      [[ $# -ge 2 ]] || { printf 'demo.sh: --config needs a file\n' >&2; exit 2; }
      config=$(from_caller "$2")
      shift
      ;;
    --config=*) config=$(from_caller "${1#--config=}") ;;
    --) shift; demo_args=("$@"); break ;;
    *) printf 'demo.sh: unknown argument %s\n' "$1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

build_dir=${BUILD_DIR:-build}
[[ $build_dir == /* ]] || build_dir=$VRAMSPILL_ROOT/$build_dir
sim_dir=$build_dir/simcuda
demo=$build_dir/bin/train_demo      # tools/demo/CMakeLists.txt
cli=$build_dir/bin/vramspill        # `vramspill run`
shim=$build_dir/lib/libvramspill.so
fatbin=$sim_dir/vs_kernels.fatbin   # tools/simcuda/kernels (needs nvcc)
[[ -r $config ]] || die "the policy file $config is not readable"

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

# Prints simcuda's statistics file (tools/simcuda/README.md, "The statistics file") as a few
# lines: device 0's traffic and each stream's modeled clock. Every figure is modeled.
print_modeled_cost() {
  awk -F': *' '
    function value(s) { gsub(/[",]/, "", s); return s }
    function human(b,   u, i) { split("B KiB MiB GiB TiB", u, " "); i = 1
      while (b >= 1024 && i < 5) { b /= 1024; i++ }
      return sprintf(i == 1 ? "%d %s" : "%.1f %s", b, u[i]) }
    /"hbm_bytes_per_second"/ { hbm = value($2) }
    /"link_bytes_per_second"/ { link = value($2) }
    /"ordinal"/ { device = value($2) }
    device != 0 { next }
    /"(total_bytes|peak_device_bytes|link_bytes_[a-z_]+|device_bytes_touched|managed_[a-z]+|kernel_launches)"/ {
      key = $1; gsub(/[" ]/, "", key); f[key] = value($2) }
    /"kind"/ { kind = value($2) }
    /"modeled_seconds"/ {
      name = kind == "created" ? "the training stream" : kind == "legacy_default" ? "the default stream (uploads, verification copies)" : kind
      streams = streams sprintf("%s %s %.3f ms", streams == "" ? "" : ",", name, value($2) * 1000) }
    END {
      printf("  simcuda cost model: HBM %.3g B/s, link %.3g B/s (SIMCUDA_HBM_BW, SIMCUDA_LINK_BW)\n", hbm, link)
      printf("  device memory: peak %s of %s; kernels, copies and memsets touched %s in device memory\n",
             human(f["peak_device_bytes"]), human(f["total_bytes"]), human(f["device_bytes_touched"]))
      printf("  over the link: copies %s, zero-copy access by kernels %s, managed migrations %s\n",
             human(f["link_bytes_copies"]), human(f["link_bytes_zero_copy"]), human(f["link_bytes_migrations"]))
      printf("  managed memory: %d faults, %d evictions; %d kernel launches\n",
             f["managed_faults"], f["managed_evictions"], f["kernel_launches"])
      printf("  modeled stream clocks at exit:%s\n", streams)
    }' "$1"
}

if [[ $build -eq 1 ]]; then
  step "Checking build dependencies"
  "$VRAMSPILL_ROOT/tools/install-deps.sh"

  step "Configuring and building $build_dir"
  configure_and_build "$build_dir" || die "the build failed (see the output above)"
fi

[[ -x $demo ]] || die "the demo program $demo was not built (its target is train_demo in tools/demo/)"
[[ -f $shim ]] || die "the shim $shim was not built (its target is vramspill in shim/)"

on_gpu=0
driver_lib=$(real_driver_lib)
if [[ $force_sim -eq 0 && ( -r /proc/driver/nvidia/version || -n $driver_lib ) ]]; then
  on_gpu=1
  # A demo linked against simcuda with a build-tree RUNPATH would load simcuda even here.
  linked=$(ldd "$demo" 2>/dev/null || true)
  if [[ $linked == *"libcuda.so.1 => $sim_dir/"* ]]; then
    die "$demo resolves libcuda.so.1 to simcuda through its RUNPATH, so it cannot run on the GPU;" \
      "run 'tools/demo.sh --sim' or rebuild it without a RUNPATH to build/simcuda"
  fi
  [[ -f $fatbin ]] || die "$fatbin, the vs_* kernels for the GPU, was not built: it needs nvcc" \
    "(CMake's CUDA compiler); install the CUDA toolkit's compiler and rebuild, or run 'tools/demo.sh --sim'"
  demo_args=(--kernels "$fatbin" "${demo_args[@]}")
  where="on the GPU (NVIDIA driver: ${driver_lib:-$(head -n 1 /proc/driver/nvidia/version)})"
else
  [[ -f $sim_dir/libcuda.so.1 ]] || die "simcuda's $sim_dir/libcuda.so.1 was not built"
  export LD_LIBRARY_PATH=$sim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export SIMCUDA_VRAM=${SIMCUDA_VRAM:-256MiB}
  where="on the simulated GPU (simcuda: $sim_dir/libcuda.so.1, SIMCUDA_VRAM=$SIMCUDA_VRAM)"
fi

# Run 1: the job as it is.
step "Run 1 of 2: train_demo $where, without vramspill"
rc=0
"$demo" "${demo_args[@]}" || rc=$?
echo
case $rc in
  2) echo "demo.sh: as expected, the job ran out of device memory (CUDA_ERROR_OUT_OF_MEMORY)." ;;
  0) echo "demo.sh: the job fit in device memory this time (DEMO_ARGS or SIMCUDA_VRAM made it small enough)." ;;
  *) echo "demo.sh: run 1 FAILED (exit status $rc), which is not the out-of-memory failure expected." >&2
     exit "$rc" ;;
esac

# Run 2: the same job under vramspill.
if [[ -x $cli ]]; then
  shimmed=("$cli" run -c "$config" --)
  how="$cli run -c $config --"
else
  # Until the vramspill command is built: what `vramspill run` does, by hand.
  shimmed=(env "LD_PRELOAD=$shim" "VRAMSPILL_CONFIG=$config")
  how="LD_PRELOAD=$shim VRAMSPILL_CONFIG=$config (no $cli in this build)"
fi
stats=
if [[ $on_gpu -eq 0 ]]; then
  stats=$build_dir/demo/train_demo-vramspill.simcuda-stats.json
  mkdir -p "${stats%/*}"
  rm -f "$stats"
  shimmed=(env "SIMCUDA_STATS=$stats" "${shimmed[@]}")
fi
step "Run 2 of 2: the same job under vramspill: $how"
rc=0
"${shimmed[@]}" "$demo" "${demo_args[@]}" || rc=$?
echo
case $rc in
  0)
    echo "demo.sh: under vramspill the whole working set was allocated, trained on and verified:"
    echo "what did not fit in the budget was spilled to host memory (placement above, from the job's"
    echo "own cuPointerGetAttribute, and vramspill's log lines)."
    if [[ -n $stats && -s $stats ]]; then
      echo
      echo "simcuda's modeled cost of run 2 (modeled from simcuda's cost model, not measured; $stats):"
      print_modeled_cost "$stats"
    fi
    ;;
  2)
    echo "demo.sh: run 2 FAILED: under vramspill the job still ran out of device memory; the log" >&2
    echo "lines above say why the overflow could not be spilled." >&2
    ;;
  *) echo "demo.sh: run 2 FAILED (exit status $rc)." >&2 ;;
esac
exit "$rc"
