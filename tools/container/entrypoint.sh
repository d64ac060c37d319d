#!/bin/sh
# The entrypoint of a container image with vramspill: runs the image's command under the shim.
#
#   ENTRYPOINT ["/usr/local/bin/vramspill-entrypoint"]
#   CMD ["python", "train.py"]
#
# 1. The policy: VRAMSPILL_CONFIG when it is set, else ENTRYPOINT_POLICY when it is set (either
#    file must exist: a typo must not run the job on the defaults), else
#    /etc/vramspill/policy.toml when one is mounted there, else none (the defaults and the
#    VRAMSPILL_* variables).
# 2. `vramspill doctor --quiet`, its findings on standard error, as set by ENTRYPOINT_DOCTOR:
#    warn (the default) starts the command whatever the doctor finds; strict does not start it
#    when the doctor fails, and exits with the doctor's status (1: something blocks spilling);
#    off does not run the doctor.
# 3. exec `vramspill run -- COMMAND...`, which checks the configuration and puts libvramspill.so
#    first in LD_PRELOAD (entries already there stay after it; an earlier copy of the shim is
#    dropped). This script's process becomes `vramspill run`: as the container's PID 1 it stays,
#    starts the command as its child, passes it the signals sent to the container, reaps orphans,
#    and exits with the command's status (Note [vramspill run as the first process] in
#    tools/cli/init_process.h); where it is not PID 1 it replaces itself with the command.
#
# This script's own settings are not named VRAMSPILL_*: the shim refuses VRAMSPILL_* variables it
# does not know (README.md, "Configuration"), and every process in the container inherits them.
# Exit status, when the command does not start: 2 for a usage error or a missing policy, 127 when
# vramspill is not on PATH, the doctor's status under ENTRYPOINT_DOCTOR=strict, or vramspill
# run's (README.md, "`vramspill run` and `vramspill stat`").
set -eu

prog=vramspill-entrypoint

fail() {
  status=$1
  shift
  printf '%s: %s\n' "$prog" "$*" >&2
  exit "$status"
}

if [ "$#" -eq 0 ]; then
  fail 2 "no command given: give the image a CMD, or the command after the image's name"
fi
command -v vramspill >/dev/null 2>&1 ||
  fail 127 "vramspill is not on PATH ($PATH)"

if [ -n "${VRAMSPILL_CONFIG:-}" ]; then
  [ -e "$VRAMSPILL_CONFIG" ] ||
    fail 2 "the policy VRAMSPILL_CONFIG=$VRAMSPILL_CONFIG does not exist: mount it there, or" \
      "unset VRAMSPILL_CONFIG to use the one at ${ENTRYPOINT_POLICY:-/etc/vramspill/policy.toml}"
elif [ -n "${ENTRYPOINT_POLICY:-}" ]; then
  [ -e "$ENTRYPOINT_POLICY" ] ||
    fail 2 "the policy ENTRYPOINT_POLICY=$ENTRYPOINT_POLICY does not exist: mount it there, or" \
      "unset ENTRYPOINT_POLICY to use /etc/vramspill/policy.toml when one is mounted there"
  VRAMSPILL_CONFIG=$ENTRYPOINT_POLICY
  export VRAMSPILL_CONFIG
elif [ -e /etc/vramspill/policy.toml ]; then
  VRAMSPILL_CONFIG=/etc/vramspill/policy.toml
  export VRAMSPILL_CONFIG
fi

doctor=${ENTRYPOINT_DOCTOR:-warn}
case $doctor in
  off) ;;
  warn | strict)
    # Captured, then printed with a heading: the job's standard output stays the job's.
    status=0
    findings=$(vramspill doctor --quiet 2>&1) || status=$?
    if [ -n "$findings" ]; then
      printf '%s: vramspill doctor --quiet (ENTRYPOINT_DOCTOR=off skips it):\n%s\n' \
        "$prog" "$findings" >&2
    fi
    if [ "$status" -ne 0 ]; then
      if [ "$doctor" = strict ]; then
        fail "$status" "vramspill doctor failed (exit status $status), so the command was not" \
          "started (ENTRYPOINT_DOCTOR=strict; =warn starts it anyway)"
      fi
      printf '%s: vramspill doctor failed (exit status %s); starting the command anyway %s\n' \
        "$prog" "$status" "(ENTRYPOINT_DOCTOR=strict would stop here)" >&2
    fi
    ;;
  *) fail 2 "ENTRYPOINT_DOCTOR=$doctor: expected warn (the default), strict or off" ;;
esac

exec vramspill run -- "$@"
