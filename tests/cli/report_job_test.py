#!/usr/bin/env python3
"""`vramspill report` on real traces, in a real browser: the demo runs under the shim on simcuda
with a [trace] file, in tiered mode and spilling to the host pool; each trace becomes a page that
headless Chromium must open, draw every chart of without a script error, and take a screenshot of.
Then a trace cut short is drawn with a warning, a damaged one fails with its line, and a failed
write leaves no file behind.

    report_job_test.py CLI TRAIN_DEMO PRELOAD SIMCUDA_DIR TIERED_CONF CHROMIUM

CHROMIUM is empty when CMake found none: the test fails on Debian, where
tools/install-deps.sh --tests installs it, and skips (exit 77) elsewhere (Ubuntu ships Chromium
only as a snap, which containers cannot run) or when REPORT_TEST_ALLOW_MISSING_BROWSER=1 (not
VRAMSPILL_*, which the shim refuses). Set REPORT_TEST_KEEP=DIR to keep the pages and
screenshots."""

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

from traced_demo import (HOST_ARGS, HOST_MODE, TIERED_ARGS, check_bad_traces, fail,
                         run_traced_demo, tiered_mode)

CLI, TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, TIERED_CONF, CHROMIUM = sys.argv[1:7]
SKIP = 77

TIERED_MODE = tiered_mode(TIERED_CONF)

BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 "--virtual-time-budget=5000"]
SCREEN = (1280, 1600)


def run_job(directory, name, mode, args):
    return run_traced_demo(TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, directory, name, mode, args)


def report(trace, output):
    return subprocess.run([CLI, "report", trace, "-o", output], capture_output=True, text=True)


def browse(directory, page, *action):
    """Runs Chromium on the page with a fresh profile; its standard output."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=directory)
    result = subprocess.run([CHROMIUM, *BROWSER_FLAGS, f"--user-data-dir={profile}", *action,
                             "file://" + os.path.abspath(page)],
                            capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    if result.returncode != 0:
        fail(f"chromium {' '.join(action)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result.stdout


def check_page_draws(directory, page, name):
    dom = browse(directory, page, "--dump-dom")
    html = re.search(r"<html[^>]*>", dom)
    body = re.search(r"<body[^>]*>", dom)
    if not html or not body:
        fail(f"the {name} page's DOM has no <html> or <body>:\n{dom[:2000]}")
    error = re.search(r'data-js-error="([^"]*)"', html.group(0))
    if error:
        fail(f"a script of the {name} page failed: {error.group(1)}")
    expected = re.search(r'data-charts-expected="(\d+)"', body.group(0))
    drawn = re.search(r'data-charts-drawn="(\d+)"', body.group(0))
    # Charts with nothing to show are left out; each page here has memory and moves or spills.
    if not expected or int(expected.group(1)) < 2:
        fail(f"the {name} page expects too few charts: {body.group(0)}")
    if not drawn or drawn.group(1) != expected.group(1):
        fail(f"the {name} page drew {drawn.group(1) if drawn else 'no'} of its "
             f"{expected.group(1)} charts: {body.group(0)}")

    screenshot = os.path.join(directory, f"{name}.png")
    browse(directory, page, f"--screenshot={screenshot}", f"--window-size={SCREEN[0]},{SCREEN[1]}")
    with open(screenshot, "rb") as f:
        png = f.read()
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        fail(f"the {name} screenshot is not a PNG")
    if struct.unpack(">II", png[16:24]) != SCREEN or len(png) < 30_000:
        fail(f"the {name} screenshot is {struct.unpack('>II', png[16:24])}, {len(png)} bytes: "
             "a blank page?")


def reported(directory, name, mode, args, expected_in_page):
    trace = run_job(directory, name, mode, args)
    page = os.path.join(directory, f"{name}.html")
    result = report(trace, page)
    if result.returncode != 0 or result.stderr:
        fail(f"report of the {name} trace: status {result.returncode}\n{result.stderr}")
    with open(page) as f:
        text = f.read()
    for expected in ["call sites</th><td>not recorded", *expected_in_page]:
        if expected not in text:
            fail(f"the {name} page lacks {expected!r}")
    if re.search(r"<(script|link|img)[^>]+(src|href)=", text):
        fail(f"the {name} page loads something from outside: it must be self-contained")
    check_page_draws(directory, page, name)
    return trace


def check_bad_traces_and_cut_page(directory, trace):
    cut_page = check_bad_traces(report, "vramspill report", "drawing", directory, trace, "html")
    with open(cut_page) as f:
        if "cut short" not in f.read():
            fail("the page of a cut-short trace does not say so")


def distribution():
    """The ID of /etc/os-release, or "" where there is none."""
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("ID="):
                    return line[3:].strip().strip('"')
    except OSError:
        pass
    return ""


def main():
    if not CHROMIUM:
        if os.environ.get("REPORT_TEST_ALLOW_MISSING_BROWSER") == "1":
            print("SKIP: no chromium (REPORT_TEST_ALLOW_MISSING_BROWSER=1)")
            sys.exit(SKIP)
        if distribution() != "debian":
            print("SKIP: no chromium, and no package of it here (tools/install-deps.sh installs "
                  "it on Debian only)")
            sys.exit(SKIP)
        fail("chromium not found when CMake configured the build: install it with "
             "tools/install-deps.sh --tests and reconfigure (or set "
             "REPORT_TEST_ALLOW_MISSING_BROWSER=1 to skip this test)")
    with tempfile.TemporaryDirectory(prefix="vramspill-report-") as directory:
        tiered = reported(directory, "tiered", TIERED_MODE, TIERED_ARGS,
                          ["tiered blocks on the host", "evictions to the host"])
        reported(directory, "host", HOST_MODE, HOST_ARGS, ["spilled to the host pool"])
        check_bad_traces_and_cut_page(directory, tiered)
        keep = os.environ.get("REPORT_TEST_KEEP")
        if keep:
            for name in ("tiered.html", "tiered.png", "host.html", "host.png"):
                shutil.copy(os.path.join(directory, name), keep)
    print("report checks passed")


if __name__ == "__main__":
    main()
