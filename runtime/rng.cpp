// The generator and the random fills over the Philox4x32-10 stream of runtime/philox.h.
#include "runtime/rng.h"

#include <cmath>

#include "runtime/parallel.h"
#include "runtime/philox.h"
#include "runtime/tensor.h"

namespace octet {
namespace detail {

std::array<uint32_t, 4> philox(uint64_t counter, uint64_t seed) {
  const PhiloxBlock b = philox_block(counter, seed);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint32_t philox_draw(uint64_t seed, uint64_t index) { return philox_word(seed, index); }

float u32_to_uniform(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }

float uniforms_to_normal(uint32_t a, uint32_t b) {
  // u1 in (0, 1] keeps log finite. Double math, then one rounding, so libm differences in the
  // last double bit cannot change the float.
  const double u1 = (static_cast<double>(a >> 8) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>(b >> 8) * 0x1.0p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace detail

uint32_t Generator::next_u32() { return detail::philox_draw(state_.seed, state_.offset++); }
float Generator::uniform() { return detail::u32_to_uniform(next_u32()); }

float Generator::normal() {
  const uint32_t a = next_u32();
  const uint32_t b = next_u32();
  return detail::uniforms_to_normal(a, b);
}

namespace {

template <typename Draw>
void fill(Tensor& t, RngState& state, Draw draw) {
  OCTET_CHECK(t.device().is_cpu(), "random fill of a ", t.device(), " tensor: CPU only");
  OCTET_CHECK(is_floating(t.dtype()), "random fill needs a floating dtype, got ", t.dtype());
  const uint64_t seed = state.seed, base = state.offset;
  void* data = t.data();
  const DType dtype = t.dtype();
  parallel_for(0, t.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t k = base + 2 * static_cast<uint64_t>(i);
      const uint32_t a = detail::philox_draw(seed, k);
      const uint32_t b = detail::philox_draw(seed, k + 1);
      store_from_f32(dtype, data, static_cast<size_t>(i), draw(a, b));
    }
  });
  state.offset += 2 * static_cast<uint64_t>(t.numel());
  t.bump_version();
}

}  // namespace

void Generator::fill_uniform(Tensor& t, float low, float high) {
  fill(t, state_,
       [=](uint32_t a, uint32_t) { return low + (high - low) * detail::u32_to_uniform(a); });
}

void Generator::fill_normal(Tensor& t, float mean, float std) {
  fill(t, state_,
       [=](uint32_t a, uint32_t b) { return mean + std * detail::uniforms_to_normal(a, b); });
}

}  // namespace octet
