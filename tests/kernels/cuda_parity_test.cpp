// CUDA kernels against the CPU backend (bit for bit for FP8 casts). Skips, with the reason,
// where there is no CUDA device.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/ops.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

TEST(CudaParity, QuantizeFp8MatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (DType input : {DType::kF32, DType::kBF16}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      const Tensor x = test::random_tensor({129, 300}, input, 3, 50.f);
      const Tensor scale = Tensor::from_floats({7.f}, {1});
      Tensor row = Tensor::empty(x.shape(), fp8), col = Tensor::empty({300, 129}, fp8);
      Tensor amax = Tensor::zeros({1}, DType::kF32);
      ops::quantize_fp8(x, scale, &row, &col, &amax);

      const Device gpu = Device::cuda(0);
      const Tensor xg = x.to(gpu), sg = scale.to(gpu);
      Tensor rg = Tensor::empty(x.shape(), fp8, gpu), cg = Tensor::empty({300, 129}, fp8, gpu);
      Tensor ag = Tensor::zeros({1}, DType::kF32, gpu);
      ops::quantize_fp8(xg, sg, &rg, &cg, &ag);
      const Tensor rh = rg.to(Device::cpu()), ch = cg.to(Device::cpu());
      EXPECT_EQ(std::memcmp(rh.data(), row.data(), row.nbytes()), 0) << input << "->" << fp8;
      EXPECT_EQ(std::memcmp(ch.data(), col.data(), col.nbytes()), 0) << input << "->" << fp8;
      EXPECT_EQ(ag.item(), amax.item());
    }
  }
}

}  // namespace
}  // namespace octet
