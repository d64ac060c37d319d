#!/usr/bin/env bash
# README command 2 (and CI's only command): install what is missing, build, run the tests, then build
# and run them again under AddressSanitizer + UndefinedBehaviorSanitizer, run the stress and
# concurrency tests under ThreadSanitizer, then run the fuzzers briefly. Run with --help for details.
set -uo pipefail
# shellcheck source=tools/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$VRAMSPILL_ROOT" || exit 1

usage() {
  cat <<EOF
Usage: tools/test.sh [--no-sanitizers] [--no-tsan] [--no-fuzz] [--help]

  1. tools/install-deps.sh --tests (installs missing packages; checks for the CUDA headers)
  2. configures and builds build/ exactly as a user or packager would (Ninja, Release, warnings
     not errors), runs its tests:
       ctest --test-dir build --output-on-failure -LE gpu -j$JOBS
  3. configures and builds build-asan/ as the project's own test build: RelWithDebInfo,
     -DVRAMSPILL_WERROR=ON (warnings are errors) and -DVRAMSPILL_SANITIZE="address;undefined", and
     runs the same tests there (skipped with --no-sanitizers). Sanitizer trees compile at -O1 -g1,
     not -O2 -g: the same checks and line numbers in stack traces, in half the build time (Note
     [Sanitizer builds compile at -O1 -g1] in cmake/VramspillSanitizers.cmake)
  4. configures build-tsan/ the same way but with -DVRAMSPILL_SANITIZE=thread, builds only the
     stress tests (every allocation route from eight threads, with spilling on and off and in
     tiered mode; tiered mode's threads submitting while blocks move; tiered runs in both remap
     windows and with the prefetch mover), the unit tests labelled
     'concurrency' (the ledger, use tracker, host pool, granule arena and remap window from many
     threads) and what they load, and runs them under ThreadSanitizer (skipped with --no-tsan):
       ctest --test-dir build-tsan --output-on-failure -L 'stress|concurrency' -j$JOBS
  5. configures build-fuzz/ with clang, -DVRAMSPILL_FUZZ=ON and the sanitizers of step 3, builds
     only the fuzzers (tests/fuzz: the policy file, the environment, sizes) and runs them: each
     replays its seed corpus, then fuzzes for 30 s (skipped with --no-fuzz):
       ctest --test-dir build-fuzz --output-on-failure -L fuzz -j$JOBS
Tests labelled 'gpu' need a real GPU and are excluded. Parallelism is the number of cores ($JOBS
here); set JOBS to change it. Prints a summary at the end; exits non-zero if any step failed.

  --no-sanitizers   skip step 3
  --no-tsan         skip step 4
  --no-fuzz         skip step 5
  -h, --help        show this help
EOF
}

sanitizers=1
tsan=1
fuzz=1
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --no-sanitizers) sanitizers=0 ;;
    --no-tsan) tsan=0 ;;
    --no-fuzz) fuzz=0 ;;
    *) printf 'test.sh: unknown argument %s\n' "$1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

summary=()
failed=0
record() {  # record NAME STATUS SECONDS
  local verdict=ok
  if [[ $2 -ne 0 ]]; then
    verdict="FAILED (exit $2)"
    failed=1
  fi
  summary+=("$(printf '  %-38s %5ss  %s' "$1" "$3" "$verdict")")
}

# run_pass NAME BUILD_DIR [CMAKE_ARGS...]: build, then (if the build worked) test.
run_pass() {
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS rc=0
  step "[$name] configure and build $dir"
  configure_and_build "$dir" "$@" || rc=$?
  record "$name: build ${dir#"$VRAMSPILL_ROOT"/}/" "$rc" $((SECONDS - start))
  if [[ $rc -ne 0 ]]; then
    summary+=("  $name: tests not run (build failed)")
    return
  fi
  start=$SECONDS
  step "[$name] ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -LE gpu -j"$JOBS" --no-tests=error --timeout 600 ||
    rc=$?
  record "$name: tests (ctest -LE gpu)" "$rc" $((SECONDS - start))
}

# labelled_pass NAME BUILD_DIR LABEL WHAT TARGET... -- [CMAKE_ARGS...]: a tree in which only
# TARGETs are built (the project's strict build: RelWithDebInfo, warnings are errors, then
# CMAKE_ARGS) and only the tests labelled LABEL run; WHAT names them in the summary.
labelled_pass() {
  local name=$1 dir=$2 label=$3 what=$4 targets=()
  shift 4
  while [[ $# -gt 0 && $1 != -- ]]; do
    targets+=("$1")
    shift
  done
  shift
  local start=$SECONDS rc=0 generator=()
  [[ -f $dir/CMakeCache.txt ]] || generator=(-G Ninja)
  step "[$name] configure $dir and build the $what"
  { cmake -S "$VRAMSPILL_ROOT" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DVRAMSPILL_WERROR=ON "$@" &&
      cmake --build "$dir" --parallel "$JOBS" --target "${targets[@]}"; } || rc=$?
  record "$name: build ${dir#"$VRAMSPILL_ROOT"/}/ ($what only)" "$rc" $((SECONDS - start))
  if [[ $rc -ne 0 ]]; then
    summary+=("  $name: $what not run (build failed)")
    return
  fi
  start=$SECONDS
  step "[$name] ctest -L $label in $dir"
  ctest --test-dir "$dir" --output-on-failure -L "$label" -j"$JOBS" --no-tests=error || rc=$?
  record "$name: $what (ctest -L $label)" "$rc" $((SECONDS - start))
}

# tsan_pass: ThreadSanitizer cannot share a build with AddressSanitizer, and it slows everything
# down many times over, so build-tsan/ builds only the stress tests, the shim and simcuda, and the
# unit tests of the parts that many threads use at once, and runs only those.
tsan_pass() {
  labelled_pass tsan "$VRAMSPILL_ROOT/build-tsan" 'stress|concurrency' \
    "stress and concurrency tests" vramspill simcuda vramspill_stress_test vramspill_tiered_test \
    vramspill_ledger_test vramspill_use_tracking_test vramspill_tiers_test -- \
    -DVRAMSPILL_SANITIZE=thread
}

# fuzz_pass: build-fuzz/ is a clang tree in which everything is instrumented for libFuzzer, so
# only the fuzzers and the libraries they test are built there (target vramspill_fuzzers), and
# only their tests run (label fuzz).
fuzz_pass() {
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    labelled_pass fuzz "$VRAMSPILL_ROOT/build-fuzz" fuzz fuzzers vramspill_fuzzers -- \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DVRAMSPILL_FUZZ=ON \
      '-DVRAMSPILL_SANITIZE=address;undefined'
}

step "Checking build dependencies"
start=$SECONDS
rc=0
"$VRAMSPILL_ROOT/tools/install-deps.sh" --tests || rc=$?
record "dependencies (tools/install-deps.sh)" "$rc" $((SECONDS - start))

if [[ $rc -eq 0 ]]; then
  run_pass plain "$VRAMSPILL_ROOT/build"
  if [[ $sanitizers -eq 1 ]]; then
    # halt_on_error etc. come from -fno-sanitize-recover=all; print stacks for UBSan too.
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
      run_pass asan+ubsan "$VRAMSPILL_ROOT/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DVRAMSPILL_WERROR=ON '-DVRAMSPILL_SANITIZE=address;undefined'
  else
    summary+=("  asan+ubsan: skipped (--no-sanitizers)")
  fi
  if [[ $tsan -eq 1 ]]; then
    tsan_pass
  else
    summary+=("  tsan: skipped (--no-tsan)")
  fi
  if [[ $fuzz -eq 1 ]]; then
    fuzz_pass
  else
    summary+=("  fuzz: skipped (--no-fuzz)")
  fi
else
  summary+=("  build and tests not run (dependencies missing)")
fi

printf '\n==> Summary\n'
printf '%s\n' "${summary[@]}"
if [[ $failed -ne 0 ]]; then
  printf 'test.sh: FAILED\n'
  exit 1
fi
printf 'test.sh: all passed\n'
