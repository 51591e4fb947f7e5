// The op table's optimizer and scaling-state cases (tests/devices/op_table_test.cpp runs them).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/optim.h"
#include "runtime/fp8_meta.h"
#include "runtime/memory.h"
#include "tests/support/op_table_cases.h"

namespace octet::op_table {
namespace {

// ===================================== optimizers =====================================

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

// Three steps from zero moments, gradients of the case's dtype.
void adamw_case(OpRun& r) {
  for (const Shape& shape : {Shape{37, 29}, Shape{(1 << 20) + 5}}) {
    auto s = r.scope(shape_str(shape));
    Tensor w = r.random(shape, 1), m = r.in(Tensor::zeros(shape, kF32)),
           v = r.in(Tensor::zeros(shape, kF32));
    uint64_t version = w.version();
    for (int64_t step = 1; step <= 3; ++step) {
      ops::adamw_step(w, r.random(shape, 10 + static_cast<uint64_t>(step), 1.f, r.dtype()), m, v,
                      hyper(step));
    }
    r.expect("the version moved", w.version() > version);
    r.close("master", w);
    r.close("m", m);
    r.close("v", v);
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor w0 = random_tensor(shape, kF32, 52), g = random_tensor(shape, r.dtype(), 53);
    const Tensor m0 = random_tensor(shape, kF32, 54, 0.1f), v0 = ops::mul(m0, m0);
    Tensor w = r.in(w0), m = r.in(m0), v = r.in(v0);
    Tensor wm = r.misaligned(w0), mm = r.misaligned(m0), vm = r.misaligned(v0);
    ops::adamw_step(w, r.in(g), m, v, hyper(3));
    ops::adamw_step(wm, r.misaligned(g), mm, vm, hyper(3));
    r.close("master", w);
    r.same("master, misaligned", wm, w);
    r.same("m, misaligned", mm, m);
    r.same("v, misaligned", vm, v);
  }
}

// The multi-tensor step (one launch on a GPU): sizes from one element to more than a launch's
// worth of blocks, f32 and bf16 gradients.
void adamw_multi_tensor_case(OpRun& r) {
  const std::vector<Shape> shapes = {{1}, {31}, {64, 48}, {70001}, {3, 1 << 19}, {257}};
  std::vector<Tensor> w, m, v, model;
  for (size_t i = 0; i < shapes.size(); ++i) {
    w.push_back(r.random(shapes[i], 100 + i));
    // Every other tensor writes its model weight in the pass too, bf16 or f32.
    if (i % 2 == 1) model.push_back(ops::cast(w.back(), i % 4 == 1 ? kBF16 : kF32));
    const Tensor m0 = random_tensor(shapes[i], kF32, 200 + i, 0.1f);
    m.push_back(r.in(m0));
    v.push_back(r.in(ops::mul(m0, m0)));  // second moments are non-negative
  }
  for (int64_t step = 4; step <= 5; ++step) {
    std::vector<Tensor> grads;
    std::vector<ops::AdamWTensors> list;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(r.random(shapes[i], 300 + 10 * step + i, 1.f, i % 2 == 0 ? kF32 : kBF16));
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      list.push_back({&w[i], &grads[i], &m[i], &v[i], i % 2 == 1 ? &model[i / 2] : nullptr});
    }
    ops::adamw_step(list, hyper(step));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto s = r.scope(shape_str(shapes[i]));
    r.close("master", w[i]);
    r.close("m", m[i]);
    r.close("v", v[i]);
    if (i % 2 == 1) r.close("model", model[i / 2]);
  }
}

void sgd_case(OpRun& r) {
  Tensor w = r.random({100003}, 2), buf = r.in(Tensor::zeros({100003}, kF32));
  for (int64_t step = 1; step <= 3; ++step) {
    ops::sgd_step(w, r.random({100003}, 20 + static_cast<uint64_t>(step), 1.f, r.dtype()), buf,
                  0.1f, 0.9f, 0.01f, step);
  }
  r.close("master", w);
  r.close("momentum", buf);
  Tensor none, w2 = r.in(Tensor::full({4}, 1.f, kF32));  // momentum 0: no buffer at all
  ops::sgd_step(w2, r.in(Tensor::full({4}, 2.f, r.dtype())), none, 0.5f, 0.f, 0.f, 1);
  r.same("momentum 0: 1 - 0.5 * 2", w2, Tensor::zeros({4}, kF32));
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor w0 = random_tensor(shape, kF32, 52), g = random_tensor(shape, r.dtype(), 53);
    const Tensor b0 = random_tensor(shape, kF32, 54, 0.1f);
    Tensor wa = r.in(w0), ba = r.in(b0), wm = r.misaligned(w0), bm = r.misaligned(b0);
    ops::sgd_step(wa, r.in(g), ba, 0.1f, 0.9f, 0.01f, 2);
    ops::sgd_step(wm, r.misaligned(g), bm, 0.1f, 0.9f, 0.01f, 2);
    r.close("master", wa);
    r.same("master, misaligned", wm, wa);
    r.same("momentum, misaligned", bm, ba);
  }
}

// A step decided on the device: the gate of finite values and norms, the step count it
// advances, and updates that a closed gate leaves as they were.
void device_step_case(OpRun& r) {
  for (float value : {0.f, kNaN, kInf}) {
    const Tensor values = r.in(Tensor::from_floats({1.f, value, -2.f}, {3}));
    r.bits("gate of " + std::to_string(value), ops::finite_gate(values, nullptr));
    for (double norm : {2.5, static_cast<double>(kInf), static_cast<double>(kNaN)}) {
      Tensor bits = Tensor::empty({1}, DType::kI64);
      std::memcpy(bits.data(), &norm, sizeof norm);
      const Tensor norm_bits = r.in(bits);
      r.bits("gate of " + std::to_string(value) + " and norm " + std::to_string(norm),
             ops::finite_gate(values, &norm_bits));
    }
  }
  for (float open : {0.f, 1.f}) {
    auto s = r.scope(open == 1.f ? "open gate" : "closed gate");
    const Tensor gate = r.scalar(open);
    Tensor steps = r.in(integers({4}, {1}, DType::kI64));
    ops::advance_steps(gate, steps);
    r.bits("steps", steps);
    ops::AdamWHyper h = hyper(1);
    h.device_step = {&gate, &steps};
    Tensor w = r.random({1000}, 1), m = r.in(Tensor::zeros({1000}, kF32)),
           v = r.in(Tensor::zeros({1000}, kF32));
    ops::adamw_step(w, r.random({1000}, 2), m, v, h);
    r.close("adamw master", w);
    r.close("adamw v", v);
    Tensor ws = r.random({1000}, 3), buf = r.in(Tensor::zeros({1000}, kF32));
    ops::sgd_step(ws, r.random({1000}, 4), buf, 0.1f, 0.9f, 0.f, 1, {&gate, &steps});
    r.close("sgd master", ws);
  }
}

// Gradient clipping: the f64 norm and its parts (as data parallelism holds them) within the
// rounding of the summation order, and the gradients clipped by the same f32 factor (the same
// f32 but in the rarest rounding cases): the CPU's bits.
void clip_grad_norm_case(OpRun& r) {
  for (double max_norm : {1.0, 0.0, 1e9}) {
    auto s = r.scope("max_norm " + std::to_string(max_norm));
    Tensor a = r.random({300, 7}, 61, 2.f), b = r.random({5000}, 62, 1.f, kBF16);
    r.value("norm", ops::read_f64(ops::clip_grad_norm_({&a, &b}, max_norm)), OpClass::kF64Sum);
    r.bits("f32 gradient", a);
    r.bits("bf16 gradient", b);
    Tensor pa = r.random({300, 7}, 61, 2.f), pb = r.random({5000}, 62, 1.f, kBF16);
    Tensor parts = r.empty({2}, DType::kI64);
    parts.slice(0, 1).copy_bytes_from(ops::sum_of_squares_part({&pa}, r.device()));
    parts.slice(1, 2).copy_bytes_from(ops::sum_of_squares_part({&pb}, r.device()));
    r.value("part 0", ops::read_f64(parts.slice(0, 1)), OpClass::kF64Sum);
    r.value("part 1", ops::read_f64(parts.slice(1, 2)), OpClass::kF64Sum);
    r.value("norm from parts",
            ops::read_f64(ops::clip_grad_norm_from_parts_({&pa, &pb}, parts, max_norm)),
            OpClass::kF64Sum);
    r.bits("f32 gradient, from parts", pa);
    r.bits("bf16 gradient, from parts", pb);
  }
}

// ===================================== scaling state =====================================

// The delayed-scaling update of every slot of several metas (one launch on a GPU).
void update_fp8_metas_case(OpRun& r) {
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid, 1, 8, AmaxComputeAlgo::kMax);
  FP8Meta a(recipe, 2), b(recipe, 1);
  uint64_t seed = 50;
  for (FP8Meta* meta : {&a, &b}) {
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      std::vector<FP8Slot>& slots = meta->slots(d);
      for (size_t i = 0; i < slots.size(); ++i) {
        std::vector<float> h = random_tensor({8}, kF32, seed++, 10.f).to_floats();
        for (float& e : h) e = std::fabs(e);
        if (i == 1) h[0] = 0.f;  // a slot nothing was cast through: it must not move
        if (i == 2) h[3] = kNaN;
        std::copy(h.begin(), h.end(), slots[i].amax_history.data_as<float>());
        for (Tensor* t : {&slots[i].scale, &slots[i].scale_inv, &slots[i].amax_history}) {
          t->move_storage_to(r.device());
        }
      }
    }
  }
  for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
    ops::update_fp8_metas({&a, &b}, d);
    for (FP8Meta* meta : {&a, &b}) {
      auto s = r.scope(std::string(meta == &a ? "meta a" : "meta b") +
                       (d == FP8Direction::kForward ? " forward" : " backward"));
      r.fact("updates", meta->update_count(d));
      for (size_t i = 0; i < meta->slots(d).size(); ++i) {
        const FP8Slot& slot = meta->slots(d)[i];
        r.bits("slot " + std::to_string(i) + " scale", slot.scale);
        r.bits("slot " + std::to_string(i) + " scale_inv", slot.scale_inv);
        r.bits("slot " + std::to_string(i) + " history", slot.amax_history);
      }
    }
  }
}

// Single slots through the backend: runtime's update_fp8_slot rule on every device.
void update_fp8_slots_case(OpRun& r) {
  struct SlotCase {
    const char* what;
    float scale;
    std::vector<float> history;
    float fp8_max;
    int margin;
    AmaxComputeAlgo algo;
  };
  std::vector<float> long_history(1024, 0.f);
  for (size_t i = 0; i < long_history.size(); ++i) {
    long_history[i] = static_cast<float>((i * 37) % 1000) / 7.f;
  }
  long_history[0] = 3.25f;
  long_history[700] = kNaN;
  std::vector<float> zero_newest = long_history;
  zero_newest[0] = 0.f;
  const AmaxComputeAlgo kMax = AmaxComputeAlgo::kMax, kRecent = AmaxComputeAlgo::kMostRecent;
  const SlotCase cases[] = {
      {"newest 0: nothing moves", 3.f, {0.f, 5.f, 7.f}, kE4M3Max, 0, kMax},
      {"newest 0, long history", 2.f, zero_newest, kE4M3Max, 0, kMax},
      {"max over the history", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE4M3Max, 0, kMax},
      {"most recent", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE5M2Max, 0, kRecent},
      {"NaN in the history is ignored", 1.f, long_history, kE4M3Max, 0, kMax},
      {"NaN newest, most recent: the scale stays", 5.f, {kNaN, 1.f}, kE4M3Max, 0, kRecent},
      {"inf amax: the scale stays", 5.f, {kInf, 1.f}, kE4M3Max, 0, kMax},
      {"tiny amax: the scale overflows to FLT_MAX", 1.f, {1e-39f}, kE5M2Max, 0, kMax},
      {"margin 2", 1.f, {3.f, 0.f}, kE4M3Max, 2, kMax},
      {"history of one", 0.5f, {17.f}, kE5M2Max, 1, kRecent},
  };
  std::vector<FP8Slot> slots(std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    slots[i].scale = r.scalar(cases[i].scale);
    slots[i].scale_inv = r.scalar(1.f / cases[i].scale);
    slots[i].amax_history = r.in(
        Tensor::from_floats(cases[i].history, {static_cast<int64_t>(cases[i].history.size())}));
  }
  // Twice: the second update sees the rolled histories (and newest 0 after a roll).
  for (int round = 1; round <= 2; ++round) {
    std::vector<ops::detail::SlotUpdate> updates;
    for (size_t i = 0; i < std::size(cases); ++i) {
      updates.push_back({&slots[i], cases[i].fp8_max, cases[i].margin, cases[i].algo});
    }
    ops::detail::backend_for(r.device()).update_fp8_slots(updates);
    for (size_t i = 0; i < std::size(cases); ++i) {
      auto s = r.scope(std::string(cases[i].what) + ", update " + std::to_string(round));
      r.bits("scale", slots[i].scale);
      r.bits("scale_inv", slots[i].scale_inv);
      r.bits("history", slots[i].amax_history);
    }
    // New amaxes for the second round on a few slots (as a step's casts would write them).
    for (size_t i : {size_t{2}, size_t{3}, size_t{8}}) {
      Tensor newest = slots[i].amax_history.slice(0, 1);
      ops::fill_(newest, 11.5f);
    }
  }
}

// Current scaling's scale from an amax on the device: CurrentScalingQuantizer::scale_for's rule.
void current_scale_case(OpRun& r) {
  const DType fp8 = r.dtype();
  const float amaxes[] = {0.f, kInf, -kInf, kNaN, 1e-39f, 1e-7f, 2.f, 448.f, 3.7f, 1e30f, 57344.f};
  for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
    for (float eps : {0.f, 1e-6f}) {
      const CurrentScalingQuantizer q(fp8, p2, eps);
      for (float amax : amaxes) {
        auto s = r.scope(std::string(p2 == Power2Scale::kOn ? "pow2 " : "") + "eps " +
                         std::to_string(eps) + " amax " + std::to_string(amax));
        Tensor scale = r.scalar(-1.f), scale_inv = r.scalar(-1.f);
        ops::detail::backend_for(r.device())
            .current_scale(r.scalar(amax), fp8_max(fp8), eps, p2, scale, scale_inv);
        r.bits("scale", scale);
        r.bits("scale_inv", scale_inv);
        const float want = q.scale_for(amax);
        r.same("scale is scale_for's", scale, Tensor::from_floats({want}, {1}));
        r.same("scale_inv is 1 / scale_for's", scale_inv, Tensor::from_floats({1.f / want}, {1}));
      }
    }
  }
}

void reciprocal_case(OpRun& r) {
  for (float x : {1.f, 3.f, 0.625f, 448.f / 3.7f, FLT_MAX, 1e-38f}) {
    Tensor out = r.scalar(0.f);
    ops::detail::backend_for(r.device()).reciprocal(r.scalar(x), out);
    r.bits(std::to_string(x), out);
    r.same(std::to_string(x) + ": rounded to nearest", out, Tensor::from_floats({1.f / x}, {1}));
  }
}

}  // namespace

std::vector<test::OpCase> optimizer_cases() {
  return {
      {"adamw", {"adamw_step"}, kCastInputs, adamw_case},
      {"adamw_multi_tensor", {"adamw_step"}, {kF32}, adamw_multi_tensor_case},
      {"sgd", {"sgd_step"}, kCastInputs, sgd_case},
      {"device_step", {"finite_gate", "advance_steps"}, {kF32}, device_step_case},
      {"clip_grad_norm",
       {"sum_of_squares_part", "clip_grad_norm_from_parts"},
       {kF32},
       clip_grad_norm_case},
      {"update_fp8_metas", {"update_fp8_slots"}, {kF32}, update_fp8_metas_case},
      {"update_fp8_slots", {"update_fp8_slots"}, {kF32}, update_fp8_slots_case},
      {"current_scale", {"current_scale"}, kFp8, current_scale_case},
      {"reciprocal", {"reciprocal"}, {kF32}, reciprocal_case},
  };
}

}  // namespace octet::op_table
