# shellcheck shell=bash
# Shared by tools/demo.sh and tools/test.sh (sourced, not run).

# The repository root, whatever directory the caller runs from.
VRAMSPILL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Parallelism: the machine's cores unless JOBS says otherwise.
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

step() { printf '\n==> %s\n' "$*"; }
die() {
  printf '%s: error: %s\n' "${0##*/}" "$*" >&2
  exit 1
}

# configure_and_build BUILD_DIR [EXTRA_CMAKE_ARGS...]
# Configures BUILD_DIR with Ninja (the first time; an existing build directory keeps its generator)
# as a user or packager would (Release, no -Werror; EXTRA_CMAKE_ARGS may override both) and builds
# everything in it. Returns non-zero on failure.
configure_and_build() {
  local dir=$1
  shift
  local generator=()
  [[ -f $dir/CMakeCache.txt ]] || generator=(-G Ninja)
  cmake -S "$VRAMSPILL_ROOT" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" &&
    cmake --build "$dir" --parallel "$JOBS"
}
