#!/usr/bin/env python3
"""Run a program and check what it printed: every --expect pattern must be found, no --reject.

ctest's PASS_REGULAR_EXPRESSION passes when *any* of its patterns matches; the shim's tests need
all of them (this line and that one), some on standard error and some in a log file, hence this.

  check_output.py [--env NAME=VALUE]... [--unset NAME]... [--exit-code N]
                  [--expect REGEX]... [--reject REGEX]...
                  [--file PATH [--file-expect REGEX]... [--file-reject REGEX]...]
                  -- program [arguments]

--expect/--reject look at standard output and standard error together; --file-expect and
--file-reject at PATH after the program exited (PATH is removed before it starts). Patterns are
Python regular expressions searched with re.MULTILINE.
"""

import argparse
import os
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--unset", action="append", default=[], metavar="NAME")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--expect", action="append", default=[], metavar="REGEX")
    parser.add_argument("--reject", action="append", default=[], metavar="REGEX")
    parser.add_argument("--file", metavar="PATH")
    parser.add_argument("--file-expect", action="append", default=[], metavar="REGEX")
    parser.add_argument("--file-reject", action="append", default=[], metavar="REGEX")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no program to run")

    env = dict(os.environ)
    for name in args.unset:
        env.pop(name, None)
    for assignment in args.env:
        name, separator, value = assignment.partition("=")
        if not separator:
            parser.error(f"--env {assignment!r}: expected NAME=VALUE")
        env[name] = value
    if args.file and os.path.exists(args.file):
        os.remove(args.file)

    try:
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: {command[0]} did not finish within {args.timeout} s")
    output = result.stdout
    sys.stdout.write(output)

    failures = []
    if result.returncode != args.exit_code:
        failures.append(f"exit status {result.returncode}, expected {args.exit_code}")
    for pattern in args.expect:
        if not re.search(pattern, output, re.MULTILINE):
            failures.append(f"output lacks /{pattern}/")
    for pattern in args.reject:
        found = re.search(pattern, output, re.MULTILINE)
        if found:
            failures.append(f"output has /{pattern}/: {found.group(0)!r}")
    if args.file:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as f:
                contents = f.read()
        except OSError as error:
            contents = None
            failures.append(f"cannot read {args.file}: {error}")
        if contents is not None:
            sys.stdout.write(f"--- {args.file} ---\n{contents}")
            for pattern in args.file_expect:
                if not re.search(pattern, contents, re.MULTILINE):
                    failures.append(f"{args.file} lacks /{pattern}/")
            for pattern in args.file_reject:
                found = re.search(pattern, contents, re.MULTILINE)
                if found:
                    failures.append(f"{args.file} has /{pattern}/: {found.group(0)!r}")

    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
