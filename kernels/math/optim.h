// The optimizer constants both backends compute from the step count, on the host or (for a step
// decided on the device, whose count lives there) in a kernel, with the same bits.
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace octet::math {

// beta^step in f64 by repeated squaring: exact IEEE multiplies in a fixed order, so the host and
// a GPU get the same bits (libm's pow and CUDA's may differ in the last place).
OCTET_HD double pow_by_squaring(double beta, int64_t step) {
  double result = 1.0, power = beta;
  for (int64_t e = step; e > 0; e >>= 1) {
    if ((e & 1) != 0) result *= power;
    power *= power;
  }
  return result;
}

// AdamW's bias correction 1 - beta^step, rounded to f32 from f64. Checked against
// f32(1 - std::pow(beta, step)), the form octet used before: the same f32 for betas 0.5, 0.8,
// 0.85, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999 and 0.9999 at every step up to 2 * 10^6
// (tests/kernels/optim_test.cpp checks a sample).
OCTET_HD float bias_correction(float beta, int64_t step) {
  return static_cast<float>(1.0 - pow_by_squaring(static_cast<double>(beta), step));
}

}  // namespace octet::math
