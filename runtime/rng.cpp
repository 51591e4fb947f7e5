// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") and the fills.
#include "runtime/rng.h"

#include <cmath>

#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace octet {
namespace detail {

std::array<uint32_t, 4> philox(uint64_t counter, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                               0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

uint32_t philox_draw(uint64_t seed, uint64_t index) { return philox(index / 4, seed)[index % 4]; }

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
