# gdb script: lists every driver call faults_program makes, in order, and who made it, which is
# how fault_matrix_cells.h's calls were chosen (README.md). simcuda counts calls for SIMCUDA_FAIL
# in simcuda::Driver::injected_fault, which runs only when some rule is set: give it one that
# never fires. From the build directory:
#
#   SIMCUDA_FAIL=cuNothing@1=1 <the cell's environment, as fault_matrix_test.cpp sets it> \
#     gdb -q -batch -ex "set environment LD_PRELOAD=$PWD/lib/libvramspill.so" \
#       -ex "source ../tests/shim/faults/trace_calls.py" \
#       -ex run tests/shim/faults/vramspill_faults_program > /dev/null
#
# Each line of faults-calls.txt: FUNCTION #N (its Nth call) and the innermost shim function on
# the stack ("-" for a call the shim does not hook; the hook itself for the program's own call).
import collections

import gdb

counts = collections.Counter()
out = open("faults-calls.txt", "w")


class InjectedFault(gdb.Breakpoint):
    def stop(self):
        frame = gdb.selected_frame()
        name = frame.read_var("export_name").string()
        counts[name] += 1
        caller = "-"
        older = frame.older()
        while older is not None:
            symtab = older.find_sal().symtab
            if symtab is not None and "libvramspill" in symtab.objfile.filename:
                caller = older.name() or "?"
                break
            older = older.older()
        out.write("%s #%d %s\n" % (name, counts[name], caller))
        return False


gdb.execute("set breakpoint pending on")
InjectedFault("simcuda::Driver::injected_fault")
gdb.events.exited.connect(lambda event: out.close())
