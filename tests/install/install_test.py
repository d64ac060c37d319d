#!/usr/bin/env python3
"""The installed vramspill, as a user gets it (cmake/VramspillInstall.cmake, Note [The installed
layout]): installed under /usr in a temporary root, every file where it belongs, and the demo run
from there, under the installed `vramspill run` and shim, on the installed simcuda.

Usage: install_test.py MODE --build DIR --cmake CMAKE --cpack CPACK
       --bindir D --libdir D --libexecdir D --datadir D --mandir D
       (the GNUInstallDirs values, relative to the prefix)
MODE destdir: `cmake --install --prefix /usr` with DESTDIR, one component at a time.
MODE deb:     `cpack` builds the Debian package and `dpkg-deb -x` unpacks it; exits 77 (skipped)
              without cpack or dpkg-deb.
Every run gets a small environment made here, so nothing of the caller's (a VRAMSPILL_* variable,
LD_PRELOAD, DESTDIR) leaks in."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SKIPPED = 77  # ctest's SKIP_RETURN_CODE for this test
SOURCE = Path(__file__).resolve().parents[2]
PREFIX = "usr"  # the prefix /usr, inside the temporary root
ARGS = None  # set from the command line
ROOT = None  # the temporary root the package is installed into

# The demo job of tools/demo.sh: 3x the simulated device, which the shim's budget spills.
DEMO_VERIFIED = "3 steps over 768.0 MiB (3.0x the 256.0 MiB reported by cuMemGetInfo) verified"


def clean_environment(**extra):
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("VRAMSPILL_", "SIMCUDA_"))
                   and name not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "DESTDIR")}
    environment.update(extra)
    return environment


def run(command, timeout=60, **extra):
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          env=clean_environment(**extra), cwd=ROOT, timeout=timeout, check=False)


def checked(command, **extra):
    result = run(command, **extra)
    if result.returncode != 0:
        sys.exit(f"install_test.py: {' '.join(map(str, command))} failed "
                 f"(exit status {result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def installed(*parts):
    return ROOT / PREFIX / Path(*parts)


class Layout:
    """Where each installed file belongs, under the prefix."""

    @staticmethod
    def cli():
        return installed(ARGS.bindir, "vramspill")

    @staticmethod
    def exporter():
        return installed(ARGS.bindir, "vramspill-exporter")

    @staticmethod
    def shim():
        return installed(ARGS.libdir, "libvramspill.so")

    @staticmethod
    def policy(name):
        return installed(ARGS.datadir, "vramspill", "conf", name)

    @staticmethod
    def demo_program(name):
        return installed(ARGS.libexecdir, "vramspill", name)

    @staticmethod
    def simcuda():
        return installed(ARGS.libdir, "vramspill", "simcuda", "libcuda.so.1")

    @staticmethod
    def runtime():
        return [Layout.cli(), Layout.exporter(), Layout.shim(),
                installed(ARGS.mandir, "man1", "vramspill.1"),
                installed(ARGS.datadir, "doc", "vramspill", "copyright")] + [
            Layout.policy(policy.name) for policy in sorted((SOURCE / "conf").glob("*.toml"))]

    @staticmethod
    def demo():
        return [Layout.demo_program(name) for name in ("train_demo", "oom_demo", "driver_tour")
                ] + [Layout.simcuda()]


def missing(paths):
    return [str(path.relative_to(ROOT)) for path in paths if not path.is_file()]


def install_with_destdir():
    """Each component alone first: the runtime must not need (or bring) the demo's files."""
    def install(component):
        checked([ARGS.cmake, "--install", ARGS.build, "--prefix", "/usr",
                 "--component", component], DESTDIR=str(ROOT))

    install("runtime")
    stray = [str(path.relative_to(ROOT)) for path in Layout.demo() if path.exists()]
    if missing(Layout.runtime()) or stray:
        sys.exit(f"install_test.py: the runtime component lacks {missing(Layout.runtime())} "
                 f"and brings the demo's {stray}")
    install("demo")


def install_from_package():
    if not shutil.which("dpkg-deb") or not Path(ARGS.cpack).is_file():
        print("install_test.py: no dpkg-deb or cpack on this machine: skipped")
        sys.exit(SKIPPED)
    out = ROOT.parent / "package"
    checked([ARGS.cpack, "--config", Path(ARGS.build) / "CPackConfig.cmake", "-B", out])
    packages = list(out.glob("vramspill_*.deb"))
    if len(packages) != 1:
        sys.exit(f"install_test.py: cpack made {[p.name for p in out.glob('*')]}, not one "
                 f"vramspill_*.deb")
    checked(["dpkg-deb", "-x", packages[0], ROOT])
    return packages[0]


class InstalledTest(unittest.TestCase):
    PACKAGE = None  # the .deb, in MODE deb

    def test_every_file_is_where_it_belongs(self):
        self.assertEqual(missing(Layout.runtime() + Layout.demo()), [])
        self.assertTrue(os.access(Layout.cli(), os.X_OK))
        self.assertTrue(installed(ARGS.mandir, "man1", "vramspill.1").read_text()
                        .startswith(".TH VRAMSPILL 1 "))

    def test_simcuda_stays_out_of_the_loaders_way(self):
        # Note [The installed layout]: only in its own directory, and nothing has a RUNPATH to it
        # (or to the build tree): on a GPU the demo programs must load the driver.
        drivers = [str(p.relative_to(ROOT)) for p in ROOT.rglob("libcuda.so*")]
        self.assertEqual(drivers, [str(Layout.simcuda().relative_to(ROOT))])
        for path in [Layout.cli(), Layout.exporter(), Layout.shim()] + Layout.demo():
            dynamic = checked(["readelf", "-d", path]).stdout
            self.assertNotIn("PATH", dynamic, f"{path} has an RPATH or RUNPATH")

    def test_installed_command_preloads_the_installed_shim(self):
        result = run([Layout.cli(), "run", "--", "/bin/sh", "-c", 'printf %s "$LD_PRELOAD"'])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(Path(result.stdout), Layout.shim())

    def test_installed_command_runs_the_installed_exporter(self):
        result = run([Layout.cli(), "exporter", "--once", "--directory", ROOT / "no-stats"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("\nvramspill_jobs 0\n", result.stdout)

    def test_installed_demo_runs_out_without_the_shim_and_verifies_under_it(self):
        simcuda = dict(LD_LIBRARY_PATH=str(Layout.simcuda().parent), SIMCUDA_VRAM="256MiB")
        demo = Layout.demo_program("train_demo")
        alone = run([demo], **simcuda)
        self.assertEqual(alone.returncode, 2, alone.stdout + alone.stderr)
        self.assertIn("CUDA_ERROR_OUT_OF_MEMORY", alone.stdout + alone.stderr)

        shimmed = run([Layout.cli(), "run", "-c", Layout.policy("demo.toml"), "--", demo],
                      **simcuda)
        output = shimmed.stdout + shimmed.stderr
        self.assertEqual(shimmed.returncode, 0, output)
        self.assertIn(DEMO_VERIFIED, output)
        self.assertIn("spilled: managed spill", output)

    def test_package_fields(self):
        if self.PACKAGE is None:
            self.skipTest("MODE destdir: no package")
        fields = checked(["dpkg-deb", "-f", self.PACKAGE, "Package", "Depends", "Maintainer",
                          "Description"]).stdout
        self.assertIn("Package: vramspill\n", fields)
        self.assertRegex(fields, r"Depends: .*libc6")
        self.assertNotRegex(fields, r"Depends: .*(libcuda|nvidia)")
        self.assertRegex(fields, r"Maintainer: .+<.+@.+>")
        # Debian Policy 5.6.13: the long description's lines are wrapped, under 80 columns.
        description = fields[fields.index("Description:"):].splitlines()
        self.assertGreater(len(description), 3, fields)
        for line in description:
            self.assertLess(len(line), 80, line)

    def test_the_shim_is_in_the_multiarch_directory_on_debian(self):
        if not Path("/etc/debian_version").exists():
            self.skipTest("not Debian or Ubuntu")
        multiarch = checked(["gcc", "-print-multiarch"]).stdout.strip()
        if not multiarch:
            self.skipTest("the compiler names no multiarch tuple")
        self.assertEqual(Layout.shim(), installed("lib", multiarch, "libvramspill.so"))


def main():
    global ARGS, ROOT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["destdir", "deb"])
    for option in ("build", "cmake", "cpack", "bindir", "libdir", "libexecdir", "datadir",
                   "mandir"):
        parser.add_argument(f"--{option}", required=True)
    ARGS, rest = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="vramspill-install-test-") as scratch:
        ROOT = Path(scratch) / "root"
        ROOT.mkdir()
        if ARGS.mode == "destdir":
            install_with_destdir()
        else:
            InstalledTest.PACKAGE = install_from_package()
        program = unittest.main(argv=[sys.argv[0], *rest], exit=False)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
