// A shared library with nothing in it: what cli_test preloads into sh in place of the shim, so
// that `vramspill run` is tested with a library it accepts (an ELF shared object for this
// machine) without loading the real shim into the shell.
