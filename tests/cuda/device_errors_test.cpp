// Ids and targets checked on the device (runtime/cuda.h, check_device_errors): a training step
// copies none back, so a bad one is raised at the host's next read from the device, with the
// CPU's clear error, and the kernels never read outside their tables. GPU behaviour only: the
// op table (tests/devices/op_table_test.cpp) compares the results of good ids with the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/nn.h"
#include "runtime/cuda.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

// Ids are checked on the device, so a step copies none back: a bad id is the CPU's clear error
// (the first bad launch in stream order, its lowest position), raised at the host's next read
// from the device, and the kernels never read outside the table.
TEST(CudaEmbedding, OutOfRangeIdsAreRaisedAtTheNextRead) {
  OCTET_REQUIRE_CUDA();
  Tensor bad = Tensor::empty({5}, DType::kI64);
  for (int64_t i = 0; i < 5; ++i) bad.data_as<int64_t>()[i] = i;
  bad.data_as<int64_t>()[2] = 12;
  bad.data_as<int64_t>()[4] = -3;
  const Tensor table = on_gpu(test::random_tensor({10, 4}, DType::kF32, 433));
  const Tensor ids = on_gpu(bad);
  const Tensor dy = test::random_tensor({5, 4}, DType::kF32, 434);
  const cuda::HostSyncCounts before = cuda::host_sync_counts();
  const Tensor out = ops::embedding(table, ids);                              // no error yet,
  const Tensor dtable = ops::embedding_backward(on_gpu(dy), ids, 7);          // nor here,
  EXPECT_EQ(cuda::host_sync_counts().device_to_host, before.device_to_host);  // and no copy back
  const std::string what = test::error_of([&] { (void)out.to(Device::cpu()); });
  EXPECT_NE(what.find("embedding: id 12 at position 2 is out of range for a table of 10 rows"),
            std::string::npos)
      << what;
  // Raised once: the next read is clean, and so is the bad rows' output (zeros, no wild read).
  const std::vector<float> got = on_cpu(out).to_floats();
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(got[static_cast<size_t>(2 * 4 + c)], 0.f);
  // The backward's table of 7 rows: ids 12 and -3 add nothing; a second bad launch raises anew.
  (void)ops::embedding_backward(on_gpu(Tensor::zeros({5, 4}, DType::kF32)), ids, 7);
  const std::string again = test::error_of([&] { cuda::check_device_errors(test::gpu()); });
  EXPECT_NE(again.find("embedding_backward: id 12 at position 2"), std::string::npos) << again;
  EXPECT_NO_THROW(cuda::check_device_errors(test::gpu()));
  // The good ids' rows got their gradient (positions 0, 1, 3 into rows 0, 1, 3), nothing else.
  const std::vector<float> d = on_cpu(dtable).to_floats(), g = dy.to_floats();
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const float want = (r == 0 || r == 1 || r == 3) ? g[static_cast<size_t>(r * 4 + c)] : 0.f;
      EXPECT_EQ(d[static_cast<size_t>(r * 4 + c)], want) << r << ", " << c;
    }
  }
}

TEST(CudaCrossEntropy, OutOfRangeTargetsAreRaisedAtTheNextRead) {
  OCTET_REQUIRE_CUDA();
  Tensor targets = Tensor::empty({3}, DType::kI32);
  targets.data_as<int32_t>()[0] = 1;
  targets.data_as<int32_t>()[1] = 10;
  targets.data_as<int32_t>()[2] = -100;
  const ops::CrossEntropyForward f =
      ops::cross_entropy(on_gpu(Tensor::zeros({3, 10}, DType::kF32)), on_gpu(targets), -100);
  const std::string what = test::error_of([&] { (void)f.loss.item(); });
  EXPECT_NE(what.find("cross_entropy: target 10 at row 1 is out of range for 10 classes (and is "
                      "not ignore_index -100)"),
            std::string::npos)
      << what;
  EXPECT_TRUE(std::isnan(f.loss.item())) << "the bad row's loss is NaN";
}

}  // namespace
}  // namespace octet
