#!/usr/bin/env python3
"""Write the vramspill(1) man page from the command's own --help texts.

The page is made at build time from `vramspill --help` and `vramspill COMMAND --help` for every
command the top-level help lists, so it says exactly what the program says and cannot fall
behind it. (help2man would do the same, but the project does not install it: tools/install-deps.sh.)
Each help text goes in verbatim, under a section named after its command.

Usage: help_to_man.py --program BUILD/bin/vramspill --version 0.1.0
                      --policies share/vramspill/conf --out vramspill.1
"""

import argparse
import re
import subprocess
import sys
import textwrap


def help_text(program, *command):
    result = subprocess.run([program, *command, "--help"], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0 or not result.stdout.strip():
        sys.exit(f"help_to_man.py: `{' '.join([program, *command, '--help'])}` failed "
                 f"(exit status {result.returncode}): {result.stderr.strip()}")
    return result.stdout.rstrip()


def commands_of(top_help):
    """The command names CLI11 lists under Subcommands: (indented, name first)."""
    match = re.search(r"^Subcommands:\n((?:[ \t]+\S.*\n?)+)", top_help,
                      re.MULTILINE | re.IGNORECASE)
    if not match:
        sys.exit("help_to_man.py: `vramspill --help` lists no Subcommands: section")
    return [line.split()[0] for line in match.group(1).splitlines()]


# Where CLI11 starts the description of an option or command (CLI::App's column width).
DESCRIPTION_COLUMN = 30


def wrapped(text, width=78):
    """CLI11 does not wrap descriptions, and .nf would not either: lines longer than `width` are
    wrapped under their own text (an option's description under the description)."""
    lines = []
    for line in text.splitlines():
        if len(line) <= width:
            lines.append(line)
            continue
        column = len(line) - len(line.lstrip())
        if column > 0 and line[DESCRIPTION_COLUMN - 1:DESCRIPTION_COLUMN + 1].startswith(" ") \
                and not line[DESCRIPTION_COLUMN].isspace():
            column = DESCRIPTION_COLUMN
        lines += textwrap.wrap(line[column:], width=width, initial_indent=line[:column],
                               subsequent_indent=" " * column, break_on_hyphens=False)
    return "\n".join(lines)


def roff_text(text):
    """Plain text to roff: backslashes and minus signs literal, no line taken for a request."""
    lines = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def verbatim(text):
    return ".PP\n.nf\n" + roff_text(wrapped(text)) + "\n.fi\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="the built vramspill")
    parser.add_argument("--version", required=True)
    parser.add_argument("--policies", required=True,
                        help="where the example policies install, relative to the prefix")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    top = help_text(args.program)
    summary = top.splitlines()[0].removeprefix("vramspill: ").rstrip(".")
    page = [
        f'.TH VRAMSPILL 1 "" "vramspill {args.version}" "User Commands"',
        ".SH NAME",
        f"vramspill \\- {roff_text(summary)}",
        ".SH SYNOPSIS",
        ".B vramspill",
        ".I COMMAND",
        "[\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
        verbatim(top).rstrip("\n"),
    ]
    for command in commands_of(top):
        page += [f'.SH "vramspill {command}"', verbatim(help_text(args.program, command))]
    page += [
        ".SH FILES",
        ".TP",
        f".IR PREFIX /{roff_text(args.policies)}",
        "Example policy files, to start from or to pass to \\fBvramspill run \\-c\\fR.",
        "\\fIPREFIX\\fR is where vramspill is installed, the directory above \\fIbin/vramspill\\fR",
        "(\\fI/usr\\fR for the Debian package).",
    ]
    with open(args.out, "w", encoding="utf-8") as out:
        out.write("\n".join(line.rstrip("\n") for line in page) + "\n")


if __name__ == "__main__":
    main()
