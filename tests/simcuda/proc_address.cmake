# simcuda's cuGetProcAddress / cuGetErrorName / cuDriverGetVersion, tested as a CUDA program
# uses them. Included from tests/simcuda/CMakeLists.txt, after simcuda_test() is defined there:
# the test links the toolkit's stub libcuda.so (CUDA::cuda_driver), exactly like a real CUDA
# application, and runs with simcuda's directory on LD_LIBRARY_PATH, so the loader picks the
# simulated libcuda.so.1. (The stub directory holds only libcuda.so, never libcuda.so.1, so a
# build RPATH pointing there cannot shadow simcuda.)
simcuda_test(simcuda_proc_address_test ${CMAKE_CURRENT_LIST_DIR}/test_proc_address.cpp)
target_link_libraries(simcuda_proc_address_test PRIVATE ${CMAKE_DL_LIBS})
# The expected lookups of CUDA 13.0.88's cudart, measured on the real driver.
target_compile_definitions(simcuda_proc_address_test PRIVATE
  VRAMSPILL_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
# The NotInterposable test needs the executable's own cuProfilerStart in the dynamic symbol table.
set_target_properties(simcuda_proc_address_test PROPERTIES ENABLE_EXPORTS ON)
