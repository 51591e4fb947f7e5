// Optimizer and scaling-state kernels on CUDA against the CPU backend: AdamW and SGD steps, the
// sum of squares for gradient clipping, the multi-tensor AdamW launch against per-tensor CPU
// steps, the delayed-scaling slot update (bit for bit with runtime's update_fp8_slot) and the
// current-scaling scale (bit for bit with CurrentScalingQuantizer::scale_for).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"  // the multi-tensor and scaling-state launches, called directly
#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "runtime/fp8_meta.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The AdamW update is a handful of f32 operations per element (a sqrt and a division among
// them) repeated over a few steps: the f32 row of the table.
const test::Tolerance kF32 = test::parity_tolerance(DType::kF32);

ops::AdamWHyper hyper(int64_t step) {
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  h.step = step;
  return h;
}

TEST(CudaOptim, AdamWStepsMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{37, 29}, Shape{(1 << 20) + 5}}) {
    Tensor w = test::random_tensor(shape, DType::kF32, 1);
    Tensor m = Tensor::zeros(shape, DType::kF32), v = Tensor::zeros(shape, DType::kF32);
    Tensor wg = on_gpu(w), mg = on_gpu(m), vg = on_gpu(v);
    for (int64_t step = 1; step <= 3; ++step) {
      const DType gd = step == 2 ? DType::kBF16 : DType::kF32;
      const Tensor g = test::random_tensor(shape, gd, 10 + static_cast<uint64_t>(step));
      const uint64_t version = wg.version();
      ops::adamw_step(w, g, m, v, hyper(step));
      ops::adamw_step(wg, on_gpu(g), mg, vg, hyper(step));
      EXPECT_GT(wg.version(), version);
    }
    EXPECT_TRUE(test::close_to(wg, w, kF32)) << "master " << shape_str(shape);
    EXPECT_TRUE(test::close_to(mg, m, kF32)) << "m " << shape_str(shape);
    EXPECT_TRUE(test::close_to(vg, v, kF32)) << "v " << shape_str(shape);
  }
}

TEST(CudaOptim, SgdWithAndWithoutMomentumMatchesTheCpu) {
  OCTET_REQUIRE_CUDA();
  Tensor w = test::random_tensor({100003}, DType::kF32, 2);
  Tensor buf = Tensor::zeros({100003}, DType::kF32);
  Tensor wg = on_gpu(w), bufg = on_gpu(buf);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = test::random_tensor({100003}, DType::kF32, 20 + static_cast<uint64_t>(step));
    ops::sgd_step(w, g, buf, 0.1f, 0.9f, 0.01f, step);
    ops::sgd_step(wg, on_gpu(g), bufg, 0.1f, 0.9f, 0.01f, step);
  }
  EXPECT_TRUE(test::close_to(wg, w, kF32));
  EXPECT_TRUE(test::close_to(bufg, buf, kF32));
  // momentum 0: no buffer at all.
  Tensor none;
  Tensor w2 = on_gpu(Tensor::full({4}, 1.f, DType::kF32));
  ops::sgd_step(w2, on_gpu(Tensor::full({4}, 2.f, DType::kF32)), none, 0.5f, 0.f, 0.f, 1);
  EXPECT_EQ(on_cpu(w2).to_floats(), std::vector<float>(4, 0.f));  // 1 - 0.5 * 2
}

TEST(CudaOptim, SumOfSquaresInF64) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{1}, Shape{1000}, Shape{(1 << 22) + 7}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Tensor x = test::random_tensor(shape, dtype, 3, 2.f);
      const double want = ops::sum_of_squares(x);
      // Both accumulate in f64: they differ by the f64 rounding of the summation order.
      EXPECT_NEAR(ops::sum_of_squares(on_gpu(x)), want, 1e-12 * want)
          << shape_str(shape) << " " << dtype;
    }
  }
}

// The batched update behind FP8Meta updates: every CUDA slot of several metas in one launch, the
// same numbers as the CPU metas updated slot by slot.
TEST(CudaFp8Meta, UpdateFp8MetasOnTheDeviceEqualsTheCpuMetas) {
  OCTET_REQUIRE_CUDA();
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid, 1, 8, AmaxComputeAlgo::kMax);
  FP8Meta a(recipe, 2), b(recipe, 1), a_gpu(recipe, 2), b_gpu(recipe, 1);
  uint64_t seed = 50;
  for (auto [cpu, gpu] : {std::pair{&a, &a_gpu}, std::pair{&b, &b_gpu}}) {
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      std::vector<FP8Slot>& cs = cpu->slots(d);
      std::vector<FP8Slot>& gs = gpu->slots(d);
      for (size_t i = 0; i < cs.size(); ++i) {
        std::vector<float> h = test::random_tensor({8}, DType::kF32, seed++, 10.f).to_floats();
        for (float& v : h) v = std::fabs(v);
        if (i == 1) h[0] = 0.f;  // a slot nothing was cast through: it must not move
        if (i == 2) h[3] = kNaN;
        for (FP8Slot* s : {&cs[i], &gs[i]}) {
          std::copy(h.begin(), h.end(), s->amax_history.data_as<float>());
        }
        for (Tensor* t : {&gs[i].scale, &gs[i].scale_inv, &gs[i].amax_history}) {
          t->move_storage_to(test::gpu());
        }
      }
    }
  }
  for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
    ops::update_fp8_metas({&a, &b}, d);
    ops::update_fp8_metas({&a_gpu, &b_gpu}, d);
    for (auto [cpu, gpu] : {std::pair{&a, &a_gpu}, std::pair{&b, &b_gpu}}) {
      EXPECT_EQ(gpu->update_count(d), cpu->update_count(d));
      for (size_t i = 0; i < cpu->slots(d).size(); ++i) {
        const FP8Slot& c = cpu->slots(d)[i];
        const FP8Slot& g = gpu->slots(d)[i];
        SCOPED_TRACE("slot " + std::to_string(i));
        EXPECT_TRUE(g.scale.device().is_cuda());
        EXPECT_TRUE(test::same_bits(g.scale, c.scale));
        EXPECT_TRUE(test::same_bits(g.scale_inv, c.scale_inv));
        EXPECT_TRUE(test::same_bits(g.amax_history, c.amax_history));
      }
    }
  }
}

#if OCTET_WITH_CUDA

TEST(CudaOptim, MultiTensorAdamWEqualsPerTensorCpuSteps) {
  OCTET_REQUIRE_CUDA();
  // Sizes from one element to more than a launch's worth of blocks, f32 and bf16 gradients.
  const std::vector<Shape> shapes = {{1}, {31}, {64, 48}, {70001}, {3, 1 << 19}, {257}};
  std::vector<Tensor> w, m, v, wg, mg, vg;
  for (size_t i = 0; i < shapes.size(); ++i) {
    w.push_back(test::random_tensor(shapes[i], DType::kF32, 100 + i));
    m.push_back(test::random_tensor(shapes[i], DType::kF32, 200 + i, 0.1f));
    v.push_back(ops::mul(m.back(), m.back()));  // second moments are non-negative
    wg.push_back(on_gpu(w[i]));
    mg.push_back(on_gpu(m[i]));
    vg.push_back(on_gpu(v[i]));
  }
  for (int64_t step = 4; step <= 5; ++step) {
    std::vector<Tensor> grads, grads_g;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const DType gd = i % 2 == 0 ? DType::kF32 : DType::kBF16;
      grads.push_back(test::random_tensor(shapes[i], gd, 300 + 10 * step + i));
      grads_g.push_back(on_gpu(grads.back()));
    }
    std::vector<ops::AdamWTensors> list;
    for (size_t i = 0; i < shapes.size(); ++i) {
      ops::adamw_step(w[i], grads[i], m[i], v[i], hyper(step));
      list.push_back({&wg[i], &grads_g[i], &mg[i], &vg[i]});
    }
    // The CUDA launch itself, and the ops entry point that dispatches to it.
    if (step == 4) {
      ops::detail::backend_for(test::gpu()).adamw_step(list, hyper(step));
    } else {
      ops::adamw_step(list, hyper(step));
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(test::close_to(wg[i], w[i], kF32)) << "master " << i;
    EXPECT_TRUE(test::close_to(mg[i], m[i], kF32)) << "m " << i;
    EXPECT_TRUE(test::close_to(vg[i], v[i], kF32)) << "v " << i;
  }
}

// One delayed-scaling slot: scale, scale_inv and history (history[0] the newest amax).
struct SlotCase {
  const char* what;
  float scale;
  std::vector<float> history;
  float fp8_max;
  int margin;
  AmaxComputeAlgo algo;
};

FP8Slot make_slot(const SlotCase& c, Device device) {
  FP8Slot s;
  s.scale = test::scalar(c.scale, device);
  s.scale_inv = test::scalar(1.f / c.scale, device);
  const Tensor h = Tensor::from_floats(c.history, {static_cast<int64_t>(c.history.size())});
  s.amax_history = device.is_cpu() ? h : h.to(device);
  return s;
}

TEST(CudaFp8Meta, UpdateFp8SlotsEqualsTheRuntimeRuleBitForBit) {
  OCTET_REQUIRE_CUDA();
  std::vector<float> long_history(1024, 0.f);
  for (size_t i = 0; i < long_history.size(); ++i) {
    long_history[i] = static_cast<float>((i * 37) % 1000) / 7.f;
  }
  long_history[0] = 3.25f;
  long_history[700] = kNaN;
  std::vector<float> zero_newest = long_history;
  zero_newest[0] = 0.f;
  const SlotCase cases[] = {
      {"newest 0: nothing moves", 3.f, {0.f, 5.f, 7.f}, kE4M3Max, 0, AmaxComputeAlgo::kMax},
      {"newest 0, long history", 2.f, zero_newest, kE4M3Max, 0, AmaxComputeAlgo::kMax},
      {"max over the history", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE4M3Max, 0, AmaxComputeAlgo::kMax},
      {"most recent", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE5M2Max, 0, AmaxComputeAlgo::kMostRecent},
      {"NaN in the history is ignored", 1.f, long_history, kE4M3Max, 0, AmaxComputeAlgo::kMax},
      {"NaN newest, most recent: the scale stays",
       5.f,
       {kNaN, 1.f},
       kE4M3Max,
       0,
       AmaxComputeAlgo::kMostRecent},
      {"inf amax: the scale stays", 5.f, {kInf, 1.f}, kE4M3Max, 0, AmaxComputeAlgo::kMax},
      {"tiny amax: the scale overflows to FLT_MAX",
       1.f,
       {1e-39f},
       kE5M2Max,
       0,
       AmaxComputeAlgo::kMax},
      {"margin 2", 1.f, {3.f, 0.f}, kE4M3Max, 2, AmaxComputeAlgo::kMax},
      {"history of one", 0.5f, {17.f}, kE5M2Max, 1, AmaxComputeAlgo::kMostRecent},
  };
  std::vector<FP8Slot> cpu, gpu;
  for (const SlotCase& c : cases) {
    cpu.push_back(make_slot(c, Device::cpu()));
    gpu.push_back(make_slot(c, test::gpu()));
  }
  // Twice: the second update sees the rolled histories (and newest 0 after a roll).
  for (int round = 0; round < 2; ++round) {
    std::vector<ops::detail::SlotUpdate> updates;
    for (size_t i = 0; i < std::size(cases); ++i) {
      update_fp8_slot(cpu[i], cases[i].fp8_max, cases[i].margin, cases[i].algo);
      updates.push_back({&gpu[i], cases[i].fp8_max, cases[i].margin, cases[i].algo});
    }
    ops::detail::backend_for(test::gpu()).update_fp8_slots(updates);
    for (size_t i = 0; i < std::size(cases); ++i) {
      SCOPED_TRACE(std::string(cases[i].what) + ", update " + std::to_string(round + 1));
      EXPECT_TRUE(gpu[i].scale.device().is_cuda());
      EXPECT_TRUE(test::same_bits(gpu[i].scale, cpu[i].scale)) << "scale";
      EXPECT_TRUE(test::same_bits(gpu[i].scale_inv, cpu[i].scale_inv)) << "scale_inv";
      EXPECT_TRUE(test::same_bits(gpu[i].amax_history, cpu[i].amax_history)) << "history";
    }
    // New amaxes for the second round on a few slots (as a step's casts would write them).
    for (size_t i : {size_t{2}, size_t{3}, size_t{8}}) {
      for (auto* s : {&cpu[i], &gpu[i]}) {
        Tensor newest = s->amax_history.slice(0, 1);
        ops::fill_(newest, 11.5f);
      }
    }
  }
}

TEST(CudaFp8Meta, CurrentScaleEqualsTheQuantizersScaleForBitForBit) {
  OCTET_REQUIRE_CUDA();
  const float amaxes[] = {0.f, kInf, -kInf, kNaN, 1e-39f, 1e-7f, 2.f, 448.f, 3.7f, 1e30f, 57344.f};
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
      for (float eps : {0.f, 1e-6f}) {
        const CurrentScalingQuantizer q(fp8, p2, eps);
        for (float amax : amaxes) {
          SCOPED_TRACE(std::string(dtype_name(fp8)) + (p2 == Power2Scale::kOn ? " pow2" : "") +
                       " eps " + std::to_string(eps) + " amax " + std::to_string(amax));
          Tensor scale = test::scalar(-1.f, test::gpu());
          Tensor scale_inv = test::scalar(-1.f, test::gpu());
          ops::detail::backend_for(test::gpu())
              .current_scale(test::scalar(amax, test::gpu()), fp8_max(fp8), eps, p2, scale,
                             scale_inv);
          const float want = q.scale_for(amax);
          EXPECT_EQ(test::bits_of(scale.item()), test::bits_of(want))
              << scale.item() << " vs " << want;
          EXPECT_EQ(test::bits_of(scale_inv.item()), test::bits_of(1.f / want));
        }
      }
    }
  }
}

TEST(CudaFp8Meta, ReciprocalIsRoundedToNearest) {
  OCTET_REQUIRE_CUDA();
  for (float x : {1.f, 3.f, 0.625f, 448.f / 3.7f, FLT_MAX, 1e-38f}) {
    Tensor out = test::scalar(0.f, test::gpu());
    ops::detail::backend_for(test::gpu()).reciprocal(test::scalar(x, test::gpu()), out);
    EXPECT_EQ(test::bits_of(out.item()), test::bits_of(1.f / x)) << x;
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
