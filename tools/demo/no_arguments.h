/*
 * The command line of a probe that takes no arguments but --help (capture_probe, reset_probe).
 */
#ifndef VRAMSPILL_DEMO_NO_ARGUMENTS_H
#define VRAMSPILL_DEMO_NO_ARGUMENTS_H

#include <stdio.h>
#include <string.h>

/* -1 when there are no arguments (the probe runs); otherwise the exit status, after `usage` on
 * standard output for --help (0) or on standard error for anything else (2). */
static inline int no_arguments(int argc, char** argv, const char* usage) {
  if (argc == 1) return -1;
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(usage, stdout);
    return 0;
  }
  fputs(usage, stderr);
  return 2;
}

#endif
