# cmake -DSOURCE_DIR=<repository root> -DPROC_TABLE=<simcuda's generated proc_table.inc> -P ...
# Every submission route reaches the use tracker (shim/README.md, "Use tracking"):
# - every cuLaunch*, cuMemcpy*, cuMemset*, cuGraphLaunch*, cuStreamWriteValue*,
#   cuStreamWaitValue*, cuStreamBatchMemOp* and cuMemBatchDecompress* export the toolkit's headers
#   define
#   (simcuda's entry-point table, generated from cudaTypedefs.h and cuda.h, lists them all) is in
#   shim/driver/driver_functions.h's VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS, or exempt below with
#   its reason;
# - every function of that list is defined in shim/hooks/submission_hooks.cpp by a macro
#   invocation there (each of which goes through VRAMSPILL_SUBMISSION, which records the use).
# A new toolkit's new route, or a route hooked somewhere else, fails here until it is tracked.
cmake_minimum_required(VERSION 3.25)
foreach(input SOURCE_DIR PROC_TABLE)
  if(NOT EXISTS "${${input}}")
    message(FATAL_ERROR "${input}='${${input}}' does not exist")
  endif()
endforeach()

# Exports that are submissions but need no hook, each with why.
set(legacy_32_bit
  cuMemcpyHtoD cuMemcpyDtoH cuMemcpyDtoD cuMemcpyDtoA cuMemcpyAtoD cuMemcpyHtoA cuMemcpyAtoH
  cuMemcpyAtoA cuMemcpyHtoAAsync cuMemcpyAtoHAsync cuMemcpy2D cuMemcpy2DUnaligned cuMemcpy3D
  cuMemcpyHtoDAsync cuMemcpyDtoHAsync cuMemcpyDtoDAsync cuMemcpy2DAsync cuMemcpy3DAsync
  cuMemsetD8 cuMemsetD16 cuMemsetD32 cuMemsetD2D8 cuMemsetD2D16 cuMemsetD2D32)
set(reason_legacy_32_bit "the 32-bit ABI of CUDA 2.0 (CUdeviceptr_v1): it can name only addresses \
below 4 GiB, and a 64-bit driver reserves virtual ranges (where tracked blocks live) far above")
set(arrays_only
  cuMemcpyHtoA_v2 cuMemcpyHtoA_v2_ptds cuMemcpyAtoH_v2 cuMemcpyAtoH_v2_ptds cuMemcpyAtoA_v2
  cuMemcpyAtoA_v2_ptds cuMemcpyHtoAAsync_v2 cuMemcpyHtoAAsync_v2_ptsz cuMemcpyAtoHAsync_v2
  cuMemcpyAtoHAsync_v2_ptsz)
set(reason_arrays_only "copies between arrays and host memory: no linear device memory, so no \
tracked block")
set(parameter_api cuLaunch cuLaunchGrid cuLaunchGridAsync)
set(reason_parameter_api "deprecated since CUDA 4.0, parameters set beforehand with cuParamSet* \
(which the shim does not see either); their declarations are __CUDA_DEPRECATED, which the driver \
table's decltype would turn into errors. Not tracked: a program using them is invisible to tiered \
mode")
set(multi_device cuLaunchCooperativeKernelMultiDevice)
set(reason_multi_device "deprecated: its declaration is __CUDA_DEPRECATED, which the driver \
table's decltype would turn into errors, and cudart 13.0 does not look it up \
(tests/data/cudart-13.0.88-driver-lookups.txt). Not tracked: a program calling it directly is \
invisible to tiered mode")
set(exempt_groups legacy_32_bit arrays_only parameter_api multi_device)

file(STRINGS "${PROC_TABLE}" export_lines REGEX
     "^SIMCUDA_PROC_EXPORT\\(cu(Launch|Memcpy|Memset|GraphLaunch|StreamWriteValue|StreamWaitValue|StreamBatchMemOp|MemBatchDecompress)")
list(TRANSFORM export_lines REPLACE "^SIMCUDA_PROC_EXPORT\\((cu[A-Za-z0-9_]+)\\).*" "\\1")
list(LENGTH export_lines export_count)
if(export_count LESS 50)
  message(FATAL_ERROR "${PROC_TABLE} lists only ${export_count} submission exports: not the "
                      "table this check expects")
endif()

file(READ "${SOURCE_DIR}/shim/driver/driver_functions.h" table_text)
string(REGEX MATCH "#define VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS\\(X\\)[^\n]*\n([^\n]*\\\\\n)*[^\n]*\n"
       submission_block "${table_text}")
string(REGEX MATCHALL "X\\((cu[A-Za-z0-9_]+)\\)" tracked "${submission_block}")
list(TRANSFORM tracked REPLACE "X\\((cu[A-Za-z0-9_]+)\\)" "\\1")

file(STRINGS "${SOURCE_DIR}/shim/hooks/submission_hooks.cpp" defined REGEX "^VRAMSPILL_[A-Z0-9_]+\\(cu")
list(TRANSFORM defined REPLACE "^VRAMSPILL_[A-Z0-9_]+\\((cu[A-Za-z0-9_]+).*" "\\1")

set(problems "")
foreach(export IN LISTS export_lines)
  if(export IN_LIST tracked)
    continue()
  endif()
  set(exempt FALSE)
  foreach(group IN LISTS exempt_groups)
    if(export IN_LIST ${group})
      set(exempt TRUE)
    endif()
  endforeach()
  if(NOT exempt)
    string(APPEND problems "${export} is a submission the use tracker does not see: add it to "
                           "VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS and define its hook in "
                           "shim/hooks/submission_hooks.cpp (or exempt it here, with the reason)\n")
  endif()
endforeach()
foreach(function IN LISTS tracked)
  if(NOT function IN_LIST defined)
    string(APPEND problems "${function} is in VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS but "
                           "shim/hooks/submission_hooks.cpp does not define it\n")
  endif()
endforeach()

if(NOT problems STREQUAL "")
  message(FATAL_ERROR "submission routes without use tracking:\n${problems}")
endif()
list(LENGTH tracked tracked_count)
message(STATUS "${export_count} submission exports: ${tracked_count} tracked, the rest exempt:")
foreach(group IN LISTS exempt_groups)
  list(JOIN ${group} " " names)
  message(STATUS "  ${names}: ${reason_${group}}")
endforeach()
