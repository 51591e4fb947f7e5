// Seeded, counter-based random numbers (Philox4x32-10): the same stream on every run, machine
// and thread count, and a state of two integers that a checkpoint can store.
#pragma once

#include <array>
#include <cstdint>

namespace octet {

class Tensor;

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // 32-bit draws consumed so far
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}

  uint32_t next_u32();
  float uniform();  // [0, 1), 24 random bits
  float normal();   // mean 0, std 1 (Box-Muller on two uniforms)

  // Fill a CPU floating tensor (stored with its dtype's rounding). Element i uses draws
  // offset + 2i and offset + 2i + 1, so fills are parallel yet identical for any thread count.
  void fill_uniform(Tensor& t, float low, float high);
  void fill_normal(Tensor& t, float mean, float std);

  RngState state() const { return state_; }
  void set_state(RngState state) { state_ = state; }

 private:
  RngState state_;
};

namespace detail {
// The Philox4x32-10 block for counter `counter` and key `seed` (runtime/philox.h).
std::array<uint32_t, 4> philox(uint64_t counter, uint64_t seed);
// Draw number `index` of the stream of `seed`.
uint32_t philox_draw(uint64_t seed, uint64_t index);
float u32_to_uniform(uint32_t bits);
float uniforms_to_normal(uint32_t a, uint32_t b);
}  // namespace detail

}  // namespace octet
