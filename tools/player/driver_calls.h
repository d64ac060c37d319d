// Driver calls of the workload player, each checked: a failure throws DriverError naming the call,
// what it was for and the driver's error.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace vramspill::player {

class DriverError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string error_name(CUresult result) {
  const char* name = nullptr;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name
                                                       : "CUresult " + std::to_string(result);
}

inline void check(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw DriverError(std::string(call) + " failed: " + error_name(result));
}

// `purpose()` says what the call was for ("block 3 (256.0 MiB)"); it runs only on a failure, so a
// launch that succeeds builds no string.
template <typename Purpose>
void check(CUresult result, const char* call, Purpose&& purpose) {
  if (result != CUDA_SUCCESS)
    throw DriverError(std::string(call) + " for " + purpose() + " failed: " + error_name(result));
}

}  // namespace vramspill::player
