// DType table and the scalar conversions (the vectorised ones live in kernels/).
#include "runtime/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>

#include "runtime/error.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"

namespace octet {
namespace {

template <typename Int>
Int saturate_round(float value) {
  if (std::isnan(value)) return 0;
  const double rounded = std::nearbyint(static_cast<double>(value));  // FE_TONEAREST: ties to even
  if (rounded <= static_cast<double>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  if (rounded >= static_cast<double>(std::numeric_limits<Int>::max())) {
    return std::numeric_limits<Int>::max();
  }
  return static_cast<Int>(rounded);
}

float same(float v) { return v; }
template <typename Int>
float widen(Int v) {
  return static_cast<float>(v);
}

// Element i of a buffer of T as f32, and a store from f32.
template <typename T, float (*kLoad)(T)>
float load(const void* data, size_t i) {
  return kLoad(static_cast<const T*>(data)[i]);
}
template <typename T, T (*kStore)(float)>
void store(void* data, size_t i, float v) {
  static_cast<T*>(data)[i] = kStore(v);
}

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
  float (*load)(const void* data, size_t i);
  void (*store)(void* data, size_t i, float v);  // integers: nearest even, saturated
};

constexpr DTypeInfo kInfo[] = {
    {DType::kF32, 4, "f32", load<float, same>, store<float, same>},
    {DType::kBF16, 2, "bf16", load<uint16_t, from_bf16>, store<uint16_t, to_bf16>},
    {DType::kF16, 2, "f16", load<uint16_t, from_f16>, store<uint16_t, to_f16>},
    {DType::kE4M3, 1, "e4m3", load<uint8_t, from_e4m3>, store<uint8_t, to_e4m3>},
    {DType::kE5M2, 1, "e5m2", load<uint8_t, from_e5m2>, store<uint8_t, to_e5m2>},
    {DType::kE8M0, 1, "e8m0", load<uint8_t, from_e8m0>, store<uint8_t, to_e8m0>},
    {DType::kI32, 4, "i32", load<int32_t, widen>, store<int32_t, saturate_round>},
    {DType::kI64, 8, "i64", load<int64_t, widen>, store<int64_t, saturate_round>},
    {DType::kU8, 1, "u8", load<uint8_t, widen>, store<uint8_t, saturate_round>},
};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  OCTET_CHECK(index < std::size(kInfo), "unknown dtype code ", index);
  return kInfo[index];
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  OCTET_FAIL("unknown dtype \"", name, "\": expected one of f32, bf16, f16, e4m3, e5m2, e8m0, ",
             "i32, i64, u8");
}

bool is_fp8(DType dtype) { return dtype == DType::kE4M3 || dtype == DType::kE5M2; }

bool is_floating(DType dtype) {
  return dtype != DType::kI32 && dtype != DType::kI64 && dtype != DType::kU8;
}

float fp8_max(DType dtype) {
  OCTET_CHECK(is_fp8(dtype), "fp8_max: dtype ", dtype, " is not an FP8 format (e4m3 or e5m2)");
  return dtype == DType::kE4M3 ? kE4M3Max : kE5M2Max;
}

float load_as_f32(DType dtype, const void* data, size_t index) {
  return info(dtype).load(data, index);
}

void store_from_f32(DType dtype, void* data, size_t index, float value) {
  info(dtype).store(data, index, value);
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace octet
