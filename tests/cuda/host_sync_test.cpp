// Host synchronisation in a training step on CUDA, counted by the runtime wrapper
// (cuda::host_sync_counts): a small GPT's forward, backward, gradient clipping and AdamW step,
// under each recipe, make no copy back and no wait; the loss and gradient-norm read of a log
// interval are the only ones, and what they copy is pinned here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "runtime/comm.h"
#include "runtime/cuda.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/sort_task.h"
#include "tests/support/test_util.h"
#include "train/trainer.h"

namespace octet::modules {
namespace {

constexpr int64_t kBatch = 4, kSeq = 16;  // 64 token rows: a multiple of MXFP8's 32

Tensor random_ids(uint64_t seed, int64_t vocab) {
  Tensor t = Tensor::empty({kBatch, kSeq}, DType::kI32);
  Generator gen(seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data_as<int32_t>()[i] = static_cast<int32_t>(gen.next_u32() % vocab);
  }
  return t;
}

// The GPT of these tests: 2 layers of width 64, 4 heads, a vocabulary of 32.
GPTConfig two_layer_gpt(uint64_t seed) { return test::two_layer_gpt(32, kSeq, seed); }

cuda::HostSyncCounts minus(const cuda::HostSyncCounts& a, const cuda::HostSyncCounts& b) {
  return {a.device_to_host - b.device_to_host, a.stream_waits - b.stream_waits,
          a.blocking_uploads - b.blocking_uploads};
}

std::string text(const cuda::HostSyncCounts& c) {
  return "device_to_host " + std::to_string(c.device_to_host) + ", stream_waits " +
         std::to_string(c.stream_waits) + ", blocking_uploads " +
         std::to_string(c.blocking_uploads);
}

TEST(CudaHostSync, TrainingStepMakesNoStreamWaitOrBlockingUpload) {
  OCTET_REQUIRE_CUDA();
  const Recipe delayed = Recipe::delayed(), current = Recipe::current(), mx = Recipe::mxfp8(),
               block = Recipe::blockwise(), fp4 = Recipe::nvfp4();
  for (const Recipe* recipe :
       {static_cast<const Recipe*>(nullptr), &delayed, &current, &mx, &block, &fp4}) {
    SCOPED_TRACE(recipe != nullptr ? describe(*recipe) : std::string("f32"));
    const GPTConfig c = two_layer_gpt(3);
    GPT gpt(c);
    gpt.to(test::gpu());
    Optimizer opt(gpt.parameters(), OptimizerOptions{});
    // The step as a training loop runs it, its loss and gradient norm read at log intervals
    // only.
    Tensor loss;
    GradNorm norm;
    auto step = [&](int64_t i) {
      // Token ids come from the host (a data loader): their upload must not wait either.
      const Tensor ids = random_ids(10 + i, c.vocab_size), targets = random_ids(20 + i, 32);
      loss = test::with_fp8(recipe, [&] { return gpt.loss(ids, targets); });
      autograd::backward(loss);
      norm = clip_grad_norm_deferred(opt.parameters(), 0.5);  // clips: the factor is below 1
      opt.step(1e-3f);
      opt.zero_grad();
    };
    step(0);  // the first step plans GEMMs and fills caches
    (void)loss.item();
    const cuda::HostSyncCounts before = cuda::host_sync_counts();
    for (int64_t i = 1; i <= 3; ++i) step(i);
    const cuda::HostSyncCounts per3 = minus(cuda::host_sync_counts(), before);
    SCOPED_TRACE("over 3 steps: " + text(per3));
    // No table upload waits, zeros/full fill on the device, the kernels check ids and targets
    // (runtime/cuda.h's deferred checks), dloss and the target count stay on the device, and so
    // do the norm and the clip factor.
    EXPECT_EQ(per3.total(), 0);
    // The log interval's read: the loss (1 copy, which also raises a bad id: 1 more for the
    // check record, read once after the embeddings ran) and the gradient norm (1).
    const cuda::HostSyncCounts at_log = cuda::host_sync_counts();
    EXPECT_TRUE(std::isfinite(loss.item()));
    EXPECT_GT(norm.read(), 0.0);
    const cuda::HostSyncCounts read = minus(cuda::host_sync_counts(), at_log);
    EXPECT_EQ(read.device_to_host, 3) << text(read);
    EXPECT_EQ(read.stream_waits + read.blocking_uploads, 0) << text(read);
  }
}

TEST(CudaHostSync, DeviceClippingMatchesTheCpusNormAndScale) {
  OCTET_REQUIRE_CUDA();
  // Two gradients, one f32 and one bf16; clipped (max 1) and only measured (max 0).
  for (double max_norm : {1.0, 0.0, 1e9}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    Tensor a = test::random_tensor({300, 7}, DType::kF32, 61, 2.f);
    Tensor b = ops::cast(test::random_tensor({5000}, DType::kF32, 62), DType::kBF16);
    Tensor ga = a.to(test::gpu()), gb = b.to(test::gpu());
    const Tensor cpu_norm = ops::clip_grad_norm_({&a, &b}, max_norm);
    const Tensor gpu_norm = ops::clip_grad_norm_({&ga, &gb}, max_norm);
    const double want = ops::read_f64(cpu_norm), got = ops::read_f64(gpu_norm);
    EXPECT_NEAR(got, want, 1e-12 * want);
    // The factor is f32(max / (norm + 1e-6)) from (nearly) the same f64 norm: the same f32 in
    // all but the rarest rounding cases, so the clipped gradients match bit for bit.
    EXPECT_TRUE(test::same_bits(ga, a)) << "f32 gradient";
    EXPECT_TRUE(test::same_bits(gb, b)) << "bf16 gradient";
    // The two halves, a norm in two parts as data parallelism holds it: the CPU's f64 parts and
    // norm up to summation order (1e-12), the CPU's clipped gradients, and no copy back.
    Tensor pa = a.clone(), pb = b.clone(), qa = pa.to(test::gpu()), qb = pb.to(test::gpu());
    auto parts_of = [](const Tensor& x, const Tensor& y, Device device) {
      Tensor parts = Tensor::empty({2}, DType::kI64, device);
      parts.slice(0, 1).copy_bytes_from(ops::sum_of_squares_part({&x}, device));
      parts.slice(1, 2).copy_bytes_from(ops::sum_of_squares_part({&y}, device));
      return parts;
    };
    const Tensor cpu_parts = parts_of(pa, pb, Device::cpu());
    const cuda::HostSyncCounts before = cuda::host_sync_counts();
    const Tensor gpu_parts = parts_of(qa, qb, test::gpu());
    const Tensor gpu_two = ops::clip_grad_norm_from_parts_({&qa, &qb}, gpu_parts, max_norm);
    const cuda::HostSyncCounts made = minus(cuda::host_sync_counts(), before);
    EXPECT_EQ(made.total(), 0) << text(made);
    const Tensor cpu_two = ops::clip_grad_norm_from_parts_({&pa, &pb}, cpu_parts, max_norm);
    for (int64_t i = 0; i < 2; ++i) {
      const double want_part = ops::read_f64(cpu_parts.slice(i, i + 1));
      EXPECT_NEAR(ops::read_f64(gpu_parts.slice(i, i + 1)), want_part, 1e-12 * want_part);
    }
    const double want_two = ops::read_f64(cpu_two);
    EXPECT_NEAR(ops::read_f64(gpu_two), want_two, 1e-12 * want_two);
    EXPECT_TRUE(test::same_bits(qa, pa)) << "f32 gradient, from parts";
    EXPECT_TRUE(test::same_bits(qb, pb)) << "bf16 gradient, from parts";
  }
}

TEST(CudaHostSync, FullAndZerosFillOnTheStreamLikeTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 2, 3, 1000, 4097, 65536 + 5}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      const cuda::HostSyncCounts before = cuda::host_sync_counts();
      const Tensor full = Tensor::full({n}, -3.25f, dtype, test::gpu());
      const Tensor zeros = Tensor::zeros({n}, dtype, test::gpu());
      const cuda::HostSyncCounts made = minus(cuda::host_sync_counts(), before);
      EXPECT_EQ(made.total(), 0) << text(made);
      EXPECT_TRUE(test::same_bits(full, Tensor::full({n}, -3.25f, dtype)));
      EXPECT_TRUE(test::same_bits(zeros, Tensor::zeros({n}, dtype)));
    }
  }
}

TEST(CudaHostSync, UploadsAroundTheStagingRingKeepTheirBytes) {
  OCTET_REQUIRE_CUDA();
  // 40 uploads of 1 MiB and odd sizes go around the 16 MiB ring more than twice; every one must
  // arrive intact although its host tensor is gone before the device reads it.
  std::vector<Tensor> on_device;
  std::vector<Tensor> want;
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t n = (i % 3 == 0) ? 262144 : 262144 - 37 * i;  // f32 elements
    Tensor host = test::random_tensor({n}, DType::kF32, 100 + static_cast<uint64_t>(i));
    want.push_back(host);
    {
      const Tensor scratch = Tensor::from_floats(host.to_floats(), {n});  // freed below
      on_device.push_back(scratch.to(test::gpu()));
    }
  }
  const cuda::HostSyncCounts before = cuda::host_sync_counts();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(test::same_bits(on_device[i], want[i])) << "upload " << i;
  }
  EXPECT_EQ(minus(cuda::host_sync_counts(), before).device_to_host,
            static_cast<int64_t>(want.size()));
}

// The trainer tests' options: 2 micro-batches, clipping, warm-up and decay.
train::TrainerOptions trainer_options(const Recipe* recipe) {
  train::TrainerOptions o;
  if (recipe != nullptr) o.recipe = *recipe;
  o.grad_accum = 2;
  o.grad_clip = 0.5;
  o.schedule = {1e-3f, 2, 20, 0.1f};
  return o;
}

GPT& on_gpu(GPT& gpt) {
  gpt.to(test::gpu());
  return gpt;
}

// Two GPTs of one config on the GPU, one trained with `o` (deferred reads, the default there)
// and one reading every step.
struct TwoTrainers {
  TwoTrainers(const GPTConfig& c, const train::TrainerOptions& o)
      : deferred_gpt(c),
        every_gpt(c),
        deferred(on_gpu(deferred_gpt), o),
        every(on_gpu(every_gpt), every_step(o)) {}
  static train::TrainerOptions every_step(train::TrainerOptions o) {
    o.reads = train::StepReads::kEveryStep;
    return o;
  }
  GPT deferred_gpt, every_gpt;
  train::Trainer deferred, every;
};

// The training loop as `octet train` runs it (train::Trainer, deferred reads: the GPU's default):
// steps with gradient accumulation make no copy back and no wait; reading their results is one
// copy of the losses and one of the norms; the numbers are those of reading every step, and a
// NaN step is skipped on the device.
TEST(CudaHostSync, TrainerStepsWaitOnlyWhenTheirResultsAreRead) {
  OCTET_REQUIRE_CUDA();
  const Recipe delayed = Recipe::delayed();  // every recipe's step: the test above
  for (const Recipe* recipe : {static_cast<const Recipe*>(nullptr), &delayed}) {
    SCOPED_TRACE(recipe != nullptr ? describe(*recipe) : std::string("f32"));
    const GPTConfig c = two_layer_gpt(5);
    TwoTrainers two(c, trainer_options(recipe));
    GPT &deferred_gpt = two.deferred_gpt, &every_gpt = two.every_gpt;
    train::Trainer &deferred = two.deferred, &every = two.every;
    ASSERT_TRUE(deferred.deferred_reads());  // the default for a model on a GPU
    auto loss_of = [&](GPT& gpt, int64_t s, bool poison) {
      return [&gpt, s, poison, &c](int64_t micro, FirstMicrobatch first) {
        const Tensor ids = random_ids(100 + 2 * s + micro, c.vocab_size);
        const Tensor targets = random_ids(200 + 2 * s + micro, c.vocab_size);
        const Tensor loss = gpt.loss(ids, targets, first);
        return poison ? autograd::scale(loss, NAN) : loss;
      };
    };
    std::vector<train::StepResult> want;
    for (int64_t s = 0; s < 5; ++s) want.push_back(every.step(loss_of(every_gpt, s, s == 3)));
    deferred.run_step(loss_of(deferred_gpt, 0, false));  // plans GEMMs, fills caches
    std::vector<train::StepResult> got = deferred.results();
    const cuda::HostSyncCounts before = cuda::host_sync_counts();
    for (int64_t s = 1; s < 5; ++s) deferred.run_step(loss_of(deferred_gpt, s, s == 3));
    const cuda::HostSyncCounts steps = minus(cuda::host_sync_counts(), before);
    EXPECT_EQ(steps.total(), 0) << "over 4 steps: " << text(steps);
    const cuda::HostSyncCounts at_read = cuda::host_sync_counts();
    for (const train::StepResult& r : deferred.results()) got.push_back(r);
    const cuda::HostSyncCounts read = minus(cuda::host_sync_counts(), at_read);
    // The losses and the norms, and the id-check record the first copy back reads.
    EXPECT_EQ(read.device_to_host, 3) << text(read);
    EXPECT_EQ(read.stream_waits + read.blocking_uploads, 0) << text(read);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i + 1));
      EXPECT_EQ(got[i].skipped, i == 3);
      EXPECT_EQ(got[i].skipped, want[i].skipped);
      // After the skip only f32 agrees bit for bit: the NaN step's backward ran under deferred
      // reads and its amaxes reached delayed scaling's history (docs/cuda.md).
      if (!want[i].skipped && (i < 3 || recipe == nullptr)) {
        EXPECT_EQ(got[i].loss, want[i].loss);
        EXPECT_EQ(got[i].grad_norm, want[i].grad_norm);
      }
    }
    EXPECT_EQ(deferred.optimizer().steps(), 4);
    EXPECT_EQ(deferred.skipped_steps(), 1);
    if (recipe == nullptr) {
      // f32: a skipped step leaves no trace either way, so the weights agree bit for bit.
      const auto a = every_gpt.state_dict(), b = deferred_gpt.state_dict();
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(test::same_bits(b[i].second, a[i].second)) << a[i].first;
      }
    }
  }
}

// Two ranks in one process, for a data-parallel step on one (emulated) GPU: the other rank
// holds exactly this rank's tensors, so a sum doubles (x + x = 2x, exact in f32), an average or
// max keeps the value, and a gather repeats it. Collectives on device tensors run on the stream,
// as NCCL's do; the host-number reductions (a loss mean, a norm's parts) are counted, since a
// deferred step must make none.
class MirrorCommunicator final : public Communicator {
 public:
  MirrorCommunicator() : host_reductions_(std::make_shared<int64_t>(0)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string_view backend() const override { return "mirror"; }
  std::shared_ptr<Communicator> duplicate() override {
    auto d = std::make_shared<MirrorCommunicator>();
    d->host_reductions_ = host_reductions_;
    return d;
  }
  void all_reduce(Tensor& t, ReduceOp op) override { reduce(t, op); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    out.copy_bytes_from(in.slice(0, out.numel()));
    reduce(out, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    out.slice(0, in.numel()).copy_bytes_from(in);
    out.slice(in.numel(), 2 * in.numel()).copy_bytes_from(in);
  }
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  void all_reduce(std::span<double> values, ReduceOp op) override {
    ++*host_reductions_;
    if (op == ReduceOp::kSum) {
      for (double& v : values) v += v;
    }
  }
  [[noreturn]] void abort(int) override { std::abort(); }
  int64_t host_reductions() const { return *host_reductions_; }

 private:
  static void reduce(Tensor& t, ReduceOp op) {
    if (op != ReduceOp::kSum) return;
    OCTET_CHECK(t.dtype() == DType::kF32, "MirrorCommunicator: f32 sums only, got ", t);
    ops::scale_(t, 2.f);
  }
  std::shared_ptr<int64_t> host_reductions_;
};

// Data-parallel training under deferred reads (the GPU's default, NCCL's case): gradient
// buckets, the norm's parts and the ranks' losses are collectives on device tensors, so a step
// makes no copy back and no wait, and reading the steps costs what one process's read costs.
// The numbers are those of reading every step, bit for bit. (The mirror makes both ranks' parts
// this rank's, so ZeRO-1's own behaviour is tested over MPI, tests/dist; here its step's
// collectives and reads are counted.)
TEST(CudaHostSync, DataParallelStepsWaitOnlyWhenTheirResultsAreRead) {
  OCTET_REQUIRE_CUDA();
  // f32 plain, and delayed scaling (its amax reductions) under ZeRO-1 (its gathers): the
  // emulation runs a step in seconds, so not every pair.
  const Recipe delayed = Recipe::delayed();
  for (const auto& [recipe, zero] :
       {std::pair<const Recipe*, train::ZeroStage>{nullptr, train::ZeroStage::kNone},
        std::pair<const Recipe*, train::ZeroStage>{&delayed, train::ZeroStage::kOptimizerState}}) {
    {
      SCOPED_TRACE((recipe != nullptr ? describe(*recipe) : std::string("f32")) +
                   (zero == train::ZeroStage::kNone ? ", plain" : ", ZeRO-1"));
      const GPTConfig c = two_layer_gpt(7);
      auto comm = std::make_shared<MirrorCommunicator>();
      train::TrainerOptions o = trainer_options(recipe);
      o.comm = comm;
      o.zero_stage = zero;
      o.grad_bucket_bytes = 16 * 1024;  // several buckets
      TwoTrainers two(c, o);
      GPT &deferred_gpt = two.deferred_gpt, &every_gpt = two.every_gpt;
      train::Trainer &deferred = two.deferred, &every = two.every;
      ASSERT_TRUE(deferred.deferred_reads());  // the default on a GPU, data parallel too
      ASSERT_NE(deferred.data_parallel(), nullptr);
      auto loss_of = [&c](GPT& gpt, int64_t s) {
        return [&gpt, s, &c](int64_t micro, FirstMicrobatch first) {
          const Tensor ids = random_ids(300 + 2 * s + micro, c.vocab_size);
          const Tensor targets = random_ids(400 + 2 * s + micro, c.vocab_size);
          return gpt.loss(ids, targets, first);
        };
      };
      std::vector<train::StepResult> want;
      for (int64_t s = 0; s < 3; ++s) want.push_back(every.step(loss_of(every_gpt, s)));
      deferred.run_step(loss_of(deferred_gpt, 0));  // plans GEMMs, fills caches
      std::vector<train::StepResult> got = deferred.results();
      const cuda::HostSyncCounts before = cuda::host_sync_counts();
      const int64_t host_reductions = comm->host_reductions();
      for (int64_t s = 1; s < 3; ++s) deferred.run_step(loss_of(deferred_gpt, s));
      const cuda::HostSyncCounts steps = minus(cuda::host_sync_counts(), before);
      EXPECT_EQ(steps.total(), 0) << "over 2 steps: " << text(steps);
      EXPECT_EQ(comm->host_reductions(), host_reductions) << "host-number collectives";
      const cuda::HostSyncCounts at_read = cuda::host_sync_counts();
      for (const train::StepResult& r : deferred.results()) got.push_back(r);
      const cuda::HostSyncCounts read = minus(cuda::host_sync_counts(), at_read);
      EXPECT_EQ(read.device_to_host, 3) << text(read);  // losses, norms, the id-check record
      EXPECT_EQ(read.stream_waits + read.blocking_uploads, 0) << text(read);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i + 1));
        EXPECT_FALSE(got[i].skipped || want[i].skipped);
        EXPECT_EQ(got[i].loss, want[i].loss);
        EXPECT_EQ(got[i].grad_norm, want[i].grad_norm);
        EXPECT_GT(got[i].comm.grads, 0);
      }
      const auto a = every_gpt.state_dict(), b = deferred_gpt.state_dict();
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(test::same_bits(b[i].second, a[i].second)) << a[i].first;
      }
    }
  }
}

TEST(CudaHostSync, SumAndMeanBackwardStayOnTheDeviceAndMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool mean : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (mean ? " mean" : " sum"));
      const Tensor host = ops::cast(test::random_tensor({37, 5}, DType::kF32, 71), dtype);
      Tensor cpu = host.clone(), gpu = host.to(test::gpu());
      autograd::set_requires_grad(cpu);
      autograd::set_requires_grad(gpu);
      auto reduce = [mean](const Tensor& x) {
        return autograd::scale(mean ? autograd::mean(x) : autograd::sum(x), 3.f);
      };
      autograd::backward(reduce(cpu));
      const cuda::HostSyncCounts before = cuda::host_sync_counts();
      autograd::backward(reduce(gpu));
      const cuda::HostSyncCounts made = minus(cuda::host_sync_counts(), before);
      EXPECT_EQ(made.total(), 0) << text(made);
      EXPECT_TRUE(test::same_bits(autograd::grad(gpu), autograd::grad(cpu)));
    }
  }
}

}  // namespace
}  // namespace octet::modules
