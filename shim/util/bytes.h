// Byte counts for people: binary units, one decimal ("512 B", "1.5 KiB", "3.2 GiB").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace vramspill {

// Writes the formatted count into `out` (always NUL-terminated when `out` is not empty, truncated
// if too small; 16 chars always suffice) and returns the length written. Allocates nothing, so
// paths that must not allocate (a refusal under memory pressure, a signal handler) can use it.
std::size_t format_bytes(uint64_t bytes, std::span<char> out) noexcept;

std::string format_bytes(uint64_t bytes);

}  // namespace vramspill
