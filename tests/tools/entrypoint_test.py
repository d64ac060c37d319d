#!/usr/bin/env python3
"""Tests of tools/container/entrypoint.sh, run directly (no Docker, no GPU): the policy it hands
the job, the doctor's warnings, and that the command replaces it, so that its exit status and the
signals sent to the entrypoint's pid are the command's.

Usage: entrypoint_test.py VRAMSPILL (the built vramspill command; it finds the shim at
../lib/libvramspill.so, as in the build tree). A fake `vramspill` first on PATH stands in for the
doctor and hands `run` to the real one; every run gets a small environment made here, so nothing
of the caller's (a VRAMSPILL_* variable, LD_PRELOAD) leaks in."""

import os
import signal
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "tools" / "container" / "entrypoint.sh"
POLICY = ROOT / "conf" / "demo.toml"
VRAMSPILL = None  # set from the command line


def loaded_libc():
    """The path of the C library this process mapped: a library any process can preload."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "/libc.so" in path:
            return path
    raise unittest.SkipTest("no libc.so in /proc/self/maps")


def kill_group(leader):
    try:
        os.killpg(leader, signal.SIGKILL)
    except ProcessLookupError:
        pass


def environment_lines(stdout):
    """`env`'s output as a dict."""
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


class Entrypoint(unittest.TestCase):
    def setUp(self):
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.dir = Path(directory.name)
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        self.doctor_calls = self.dir / "doctor-calls"
        self.marker = self.dir / "command-ran"
        self.fake_doctor(status=0, says="")
        # Where a test mounts a policy, named by ENTRYPOINT_POLICY (the default path,
        # /etc/vramspill/policy.toml, is the machine's).
        self.mounted = self.dir / "etc" / "vramspill" / "policy.toml"

    def fake_doctor(self, status, says):
        """`vramspill doctor` prints `says` and exits with `status`; anything else is the real
        vramspill."""
        fake = self.bin / "vramspill"
        fake.write_text(
            "#!/bin/sh\n"
            'if [ "$1" = doctor ]; then\n'
            f"  printf '%s\\n' \"$*\" >> '{self.doctor_calls}'\n"
            f"  printf '%s' '{says}'\n"
            f"  exit {status}\n"
            "fi\n"
            f"exec '{VRAMSPILL}' \"$@\"\n")
        fake.chmod(0o755)

    def environment(self, **extra):
        environment = {"PATH": f"{self.bin}:/usr/bin:/bin"}
        environment.update(extra)
        return environment

    def run_entrypoint(self, *command, **extra):
        return subprocess.run([str(ENTRYPOINT), *command], env=self.environment(**extra),
                              capture_output=True, text=True, check=False, timeout=60)

    def touch_marker(self):
        return ("sh", "-c", f"touch '{self.marker}'")

    def mount_policy(self):
        self.mounted.parent.mkdir(parents=True)
        self.mounted.write_text(POLICY.read_text())

    # --- LD_PRELOAD and the policy ---------------------------------------------------------------

    def test_the_shim_is_preloaded(self):
        result = self.run_entrypoint("env")
        self.assertEqual(result.returncode, 0, result.stderr)
        preload = environment_lines(result.stdout)["LD_PRELOAD"]
        self.assertEqual(Path(preload).name, "libvramspill.so")
        self.assertTrue(Path(preload).is_file(), preload)

    def test_libraries_already_preloaded_stay_and_the_shim_is_not_added_twice(self):
        libc = loaded_libc()
        shim = environment_lines(self.run_entrypoint("env").stdout)["LD_PRELOAD"]
        for before in (libc, f"{shim}:{libc}"):
            with self.subTest(LD_PRELOAD=before):
                result = self.run_entrypoint("env", LD_PRELOAD=before)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(environment_lines(result.stdout)["LD_PRELOAD"], f"{shim}:{libc}")

    def test_the_policy_at_entrypoint_policy_is_used(self):
        self.mount_policy()
        result = self.run_entrypoint("env", ENTRYPOINT_POLICY=str(self.mounted))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(environment_lines(result.stdout)["VRAMSPILL_CONFIG"],
                         os.path.realpath(self.mounted))

    def test_vramspill_config_beats_the_mounted_policy(self):
        self.mount_policy()
        named = self.dir / "job.toml"
        named.write_text(POLICY.read_text())
        result = self.run_entrypoint("env", VRAMSPILL_CONFIG=str(named),
                                     ENTRYPOINT_POLICY=str(self.mounted))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(environment_lines(result.stdout)["VRAMSPILL_CONFIG"],
                         os.path.realpath(named))

    def test_no_policy_anywhere_runs_on_the_defaults(self):
        if Path("/etc/vramspill/policy.toml").exists():
            self.skipTest("this machine has a policy at /etc/vramspill/policy.toml")
        result = self.run_entrypoint("env")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("VRAMSPILL_CONFIG", environment_lines(result.stdout))

    def test_a_named_policy_that_does_not_exist_is_an_error_naming_it(self):
        absent = self.dir / "absent.toml"
        result = self.run_entrypoint(*self.touch_marker(), VRAMSPILL_CONFIG=str(absent))
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"the policy VRAMSPILL_CONFIG={absent} does not exist", result.stderr)
        self.assertFalse(self.marker.exists())

    def test_an_entrypoint_policy_that_does_not_exist_is_an_error_naming_it(self):
        result = self.run_entrypoint(*self.touch_marker(), ENTRYPOINT_POLICY=str(self.mounted))
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"the policy ENTRYPOINT_POLICY={self.mounted} does not exist",
                      result.stderr)
        self.assertFalse(self.marker.exists())

    # --- The doctor -------------------------------------------------------------------------------

    def test_the_doctors_findings_are_printed_and_the_command_runs_anyway(self):
        self.fake_doctor(status=1, says="block driver no CUDA driver loads\n")
        result = self.run_entrypoint(*self.touch_marker())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(self.marker.exists())
        self.assertIn("block driver no CUDA driver loads", result.stderr)
        self.assertIn("vramspill doctor failed (exit status 1); starting the command anyway",
                      result.stderr)
        self.assertEqual(self.doctor_calls.read_text(), "doctor --quiet\n")

    def test_strict_does_not_start_the_command_when_the_doctor_fails(self):
        self.fake_doctor(status=1, says="block driver no CUDA driver loads\n")
        result = self.run_entrypoint(*self.touch_marker(), ENTRYPOINT_DOCTOR="strict")
        self.assertEqual(result.returncode, 1)
        self.assertFalse(self.marker.exists())
        self.assertIn("so the command was not started", result.stderr)

    def test_off_does_not_run_the_doctor(self):
        result = self.run_entrypoint(*self.touch_marker(), ENTRYPOINT_DOCTOR="off")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(self.marker.exists())
        self.assertFalse(self.doctor_calls.exists())

    def test_an_unknown_doctor_setting_is_an_error(self):
        result = self.run_entrypoint(*self.touch_marker(), ENTRYPOINT_DOCTOR="maybe")
        self.assertEqual(result.returncode, 2)
        self.assertIn("ENTRYPOINT_DOCTOR=maybe: expected warn (the default), strict or off",
                      result.stderr)
        self.assertFalse(self.marker.exists())

    def test_the_real_doctor_accepts_what_the_entrypoint_asks(self):
        # Whatever this machine lacks, the doctor answers 0 or 1; 2 would be a usage error.
        (self.bin / "vramspill").unlink()
        (self.bin / "vramspill").symlink_to(VRAMSPILL)
        result = self.run_entrypoint(*self.touch_marker())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(self.marker.exists())
        self.assertNotIn("exit status 2", result.stderr)

    # --- The command replaces the entrypoint ------------------------------------------------------

    def test_the_commands_exit_status_is_the_entrypoints(self):
        result = self.run_entrypoint("sh", "-c", "exit 7")
        self.assertEqual(result.returncode, 7, result.stderr)

    def test_a_signal_to_the_entrypoints_pid_reaches_the_command(self):
        # Python, not a shell trap: a shell may put off a trap that comes just before its `wait`
        # until the wait ends. The handler is in place before "ready".
        script = ("import os, signal\n"
                  "def on_term(number, frame):\n"
                  "    os.write(1, b'got TERM\\n')\n"
                  "    os._exit(42)\n"
                  "signal.signal(signal.SIGTERM, on_term)\n"
                  "print('ready', flush=True)\n"
                  "while True:\n"
                  "    signal.pause()\n")
        process = subprocess.Popen([str(ENTRYPOINT), sys.executable, "-c", script],
                                   env=self.environment(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        # Were the command the entrypoint's child, it would outlive it: end them all.
        self.addCleanup(process.communicate)  # after the kill below: closes the pipes
        self.addCleanup(kill_group, process.pid)
        self.assertEqual(process.stdout.readline(), "ready\n")
        # The command runs in the entrypoint's own process.
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        self.assertEqual(cmdline[1:3], [b"-c", script.encode()])
        process.send_signal(signal.SIGTERM)
        self.assertEqual(process.wait(timeout=30), 42, "the command did not get the SIGTERM")
        self.assertEqual(process.communicate()[0], "got TERM\n")

    # --- Usage ------------------------------------------------------------------------------------

    def test_no_command_is_an_error(self):
        result = self.run_entrypoint()
        self.assertEqual(result.returncode, 2)
        self.assertIn("no command given: give the image a CMD", result.stderr)

    def test_vramspill_not_on_path_is_an_error(self):
        result = self.run_entrypoint(*self.touch_marker(), PATH="/usr/bin:/bin")
        self.assertEqual(result.returncode, 127)
        self.assertIn("vramspill is not on PATH", result.stderr)
        self.assertFalse(self.marker.exists())


class PodExample(unittest.TestCase):
    def test_the_configmaps_policy_is_conf_training_toml(self):
        """The policy in pod.yaml is a copy of conf/training.toml, which the demo tests load."""
        lines = (ROOT / "tools" / "container" / "pod.yaml").read_text().splitlines()
        start = lines.index("  policy.toml: |") + 1
        block = []
        for line in lines[start:]:
            if line and not line.startswith("    "):
                break
            block.append(line[4:])
        self.assertEqual("\n".join(block).strip() + "\n",
                         (ROOT / "conf" / "training.toml").read_text())


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    VRAMSPILL = Path(sys.argv.pop(1)).resolve()
    unittest.main()
