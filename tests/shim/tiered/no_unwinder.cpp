// Built as libunwind.so.8 in a directory of its own and put first on LD_LIBRARY_PATH by
// rules_job.py: a libunwind without unw_backtrace, so the shim cannot capture call stacks
// (Note [Call sites through libunwind] in shim/util/call_stack.h) and its library and symbol
// rules must stand aside while its size rules still apply.
extern "C" int no_unwinder_here() { return 0; }
