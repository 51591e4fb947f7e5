// Helpers shared by the nn kernel tests: poisoned memory for the next allocation and a
// finiteness check (kernels allocate their outputs, so poison cannot be put into them directly),
// a thread-count guard, bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace octet::test {

// Frees a `bytes`-sized block filled with 0xFF (a NaN in f32), which the allocator (malloc) hands
// out again to the next allocation of that size: an output element a kernel never writes then
// reads NaN instead of whatever fresh pages hold (usually zeros, which could pass unnoticed).
inline void recycle_poisoned(size_t bytes) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8);
  std::memset(t.data(), 0xFF, bytes);
}

inline ::testing::AssertionResult all_finite(const Tensor& t) {
  const std::vector<float> v = t.to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return ::testing::AssertionFailure() << "element " << i << " of " << t << " is " << v[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Sets the OpenMP thread count for a scope and restores it after.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace octet::test
