// CUresult names and descriptions, generated from cuda.h's enum (generated/error_names.inc).
#pragma once

#include <cuda.h>

#include <optional>
#include <string_view>

namespace simcuda {

struct ErrorName {
  CUresult result;
  const char* name;         // "CUDA_ERROR_OUT_OF_MEMORY"
  const char* description;  // "out of memory", derived from the name
};

const ErrorName* find_error(CUresult result);

// A CUresult given by name ("CUDA_ERROR_OUT_OF_MEMORY") or by number ("2").
std::optional<CUresult> parse_result(std::string_view text);

}  // namespace simcuda
