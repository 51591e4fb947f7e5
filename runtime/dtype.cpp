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

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
};

constexpr DTypeInfo kInfo[] = {
    {DType::kF32, 4, "f32"},   {DType::kBF16, 2, "bf16"}, {DType::kF16, 2, "f16"},
    {DType::kE4M3, 1, "e4m3"}, {DType::kE5M2, 1, "e5m2"}, {DType::kE8M0, 1, "e8m0"},
    {DType::kI32, 4, "i32"},   {DType::kI64, 8, "i64"},   {DType::kU8, 1, "u8"},
};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  OCTET_CHECK(index < std::size(kInfo), "unknown dtype code ", index);
  return kInfo[index];
}

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
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[index];
    case DType::kBF16:
      return from_bf16(static_cast<const uint16_t*>(data)[index]);
    case DType::kF16:
      return from_f16(static_cast<const uint16_t*>(data)[index]);
    case DType::kE4M3:
      return from_e4m3(static_cast<const uint8_t*>(data)[index]);
    case DType::kE5M2:
      return from_e5m2(static_cast<const uint8_t*>(data)[index]);
    case DType::kE8M0:
      return from_e8m0(static_cast<const uint8_t*>(data)[index]);
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[index]);
    case DType::kI64:
      return static_cast<float>(static_cast<const int64_t*>(data)[index]);
    case DType::kU8:
      return static_cast<float>(static_cast<const uint8_t*>(data)[index]);
  }
  OCTET_FAIL("load_as_f32: unhandled dtype ", dtype);
}

void store_from_f32(DType dtype, void* data, size_t index, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[index] = value;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[index] = to_bf16(value);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[index] = to_f16(value);
      return;
    case DType::kE4M3:
      static_cast<uint8_t*>(data)[index] = to_e4m3(value);
      return;
    case DType::kE5M2:
      static_cast<uint8_t*>(data)[index] = to_e5m2(value);
      return;
    case DType::kE8M0:
      static_cast<uint8_t*>(data)[index] = to_e8m0(value);
      return;
    case DType::kI32:
      static_cast<int32_t*>(data)[index] = saturate_round<int32_t>(value);
      return;
    case DType::kI64:
      static_cast<int64_t*>(data)[index] = saturate_round<int64_t>(value);
      return;
    case DType::kU8:
      static_cast<uint8_t*>(data)[index] = saturate_round<uint8_t>(value);
      return;
  }
  OCTET_FAIL("store_from_f32: unhandled dtype ", dtype);
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace octet
