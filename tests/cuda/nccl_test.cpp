// The NCCL communicator on one GPU: a communicator of one rank over the single-process one, so
// it runs on any machine with a GPU (tools/gpu-check; several GPUs run tests/dist's
// DataParallelCuda under mpirun). Every collective on device tensors against its one-rank
// result, the padded all-reduce path's buffers, host tensors handed to the host communicator, a
// duplicate. Built where NCCL is (not in the emulation build, which has no NCCL).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#if OCTET_WITH_NCCL
#include "runtime/comm_nccl.h"
#include "tests/cuda/cuda_test_util.h"

namespace octet {
namespace {

std::shared_ptr<Communicator> one_gpu() {
  return make_nccl_communicator(std::make_shared<SingleProcessCommunicator>(), Device::cuda(0));
}

Tensor on_gpu(const std::vector<float>& values) {
  return Tensor::from_floats(values, {static_cast<int64_t>(values.size())}).to(Device::cuda(0));
}

TEST(Nccl, OneRankCollectivesGiveTheirInputBack) {
  OCTET_REQUIRE_CUDA();
  const std::shared_ptr<Communicator> comm = one_gpu();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  const std::vector<float> values = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f, 448.f};
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    Tensor t = on_gpu(values);
    comm->all_reduce(t, op);
    EXPECT_EQ(t.to(Device::cpu()).to_floats(), values) << reduce_op_name(op);
  }
  Tensor out = on_gpu(std::vector<float>(values.size(), -1.f));
  comm->reduce_scatter(on_gpu(values), out, ReduceOp::kSum);
  EXPECT_EQ(out.to(Device::cpu()).to_floats(), values);
  Tensor gathered = on_gpu(std::vector<float>(values.size(), -1.f));
  comm->all_gather(on_gpu(values), gathered);
  EXPECT_EQ(gathered.to(Device::cpu()).to_floats(), values);
  Tensor b = on_gpu(values);
  comm->broadcast(b, 0);
  EXPECT_EQ(b.to(Device::cpu()).to_floats(), values);
  Tensor i64 = Tensor::zeros({3}, DType::kI64);
  i64.data_as<int64_t>()[2] = int64_t{1} << 40;
  Tensor i64_gpu = i64.to(Device::cuda(0));
  comm->all_reduce(i64_gpu, ReduceOp::kMax);
  EXPECT_EQ(i64_gpu.to(Device::cpu()).data_as<int64_t>()[2], int64_t{1} << 40);
  comm->barrier();
}

TEST(Nccl, HostTensorsGoToTheHostCommunicatorAndDuplicatesShareTheCounter) {
  OCTET_REQUIRE_CUDA();
  const std::shared_ptr<Communicator> comm = one_gpu();
  Tensor host = Tensor::from_floats({1.f, 2.f}, {2});
  comm->all_reduce(host, ReduceOp::kSum);
  EXPECT_EQ(host.to_floats(), (std::vector<float>{1.f, 2.f}));
  double v[1] = {3.0};
  comm->all_reduce(std::span<double>(v, 1), ReduceOp::kAvg);
  EXPECT_EQ(v[0], 3.0);
  const std::shared_ptr<Communicator> lane = comm->duplicate();
  Tensor t = on_gpu({1.f, 2.f, 3.f});
  lane->start_all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.to(Device::cpu()).to_floats(), (std::vector<float>{1.f, 2.f, 3.f}));
  EXPECT_EQ(comm->bytes_sent(), lane->bytes_sent());  // one rank sends nothing, counted alike
}

}  // namespace
}  // namespace octet
#endif
