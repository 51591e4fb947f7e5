// Element types: size, name, and scalar conversions to and from f32 (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace octet {

enum class DType : uint8_t { kF32, kBF16, kF16, kE4M3, kE5M2, kE8M0, kI32, kI64, kU8 };

inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kBF16, DType::kF16,
                                       DType::kE4M3, DType::kE5M2, DType::kE8M0,
                                       DType::kI32,  DType::kI64,  DType::kU8};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);      // "f32", "bf16", "e4m3", ...
DType dtype_from_name(std::string_view name);  // throws, naming the bad name and the known ones
bool is_fp8(DType dtype);                      // e4m3 or e5m2
bool is_floating(DType dtype);                 // f32, bf16, f16, e4m3, e5m2, e8m0
float fp8_max(DType dtype);                    // 448 for e4m3, 57344 for e5m2

// Element `index` of a buffer of `dtype`, as f32 (integers convert exactly up to 2^24).
float load_as_f32(DType dtype, const void* data, size_t index);
// Store `value` as element `index`, rounding to nearest even (FP8: the saturating CUDA rule;
// integers: round to nearest, ties to even, saturating at the type's range).
void store_from_f32(DType dtype, void* data, size_t index, float value);

std::ostream& operator<<(std::ostream& out, DType dtype);

}  // namespace octet
