// The op table's GEMM cases (tests/devices/op_table_test.cpp runs them): f32, bf16 and FP8
// operands, the epilogues, FP8 outputs and the FP8 recipes' layouts.
#include <optional>
#include <string>
#include <vector>

#include "kernels/mxfp8.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8_meta.h"
#include "tests/support/op_table_cases.h"

namespace octet::op_table {
namespace {

Shape stored(int64_t rows, int64_t cols, Transpose t) {
  return t == Transpose::kYes ? Shape{cols, rows} : Shape{rows, cols};
}
const char* letter(Transpose t) { return t == Transpose::kYes ? "T" : "N"; }

struct Problem {
  int64_t m, n, k;
  std::string str() const {
    return "M=" + op_table::str(m) + " N=" + op_table::str(n) + " K=" + op_table::str(k);
  }
};

// f32 and bf16 operands: every transpose, a poisoned output (every element must be written),
// alpha and a bias, accumulation; bf16 also into a bf16 output and from a 3-D operand.
void gemm_case(OpRun& r) {
  const DType d = r.dtype();
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      for (const Problem& p : {Problem{37, 53, 71}, Problem{128, 96, 768}, Problem{1, 1000, 64}}) {
        auto s = r.scope(std::string(letter(ta)) + letter(tb) + " " + p.str());
        const Tensor a = random_tensor(stored(p.m, p.k, ta), d, 11);
        const Tensor b = random_tensor(stored(p.k, p.n, tb), d, 12);
        const Tensor bias = random_tensor({p.n}, d, 13);
        const Tensor ad = r.in(a), bd = r.in(b), bias_d = r.in(bias);
        const double bound = test::gemm_accumulation_bound(false, p.k);
        const bool mags = !r.on_cpu();
        Tensor out = r.poisoned({p.m, p.n}, kF32);
        ops::gemm(ad, ta, bd, tb, out);
        r.bounded("plain", out, mags ? gemm_magnitude(a, ta, b, tb) : std::vector<double>{}, bound);
        ops::GemmOptions o;
        o.alpha = 0.5f;
        o.bias = &bias_d;
        Tensor y = ops::gemm(ad, ta, bd, tb, kF32, o);
        std::vector<double> mag;
        if (mags) {
          mag = gemm_magnitude(a, ta, b, tb, 0.5);
          add_row_terms(mag, bias);
        }
        r.bounded("alpha + bias", y, mag, bound);
        o.accumulate = Accumulate::kYes;
        o.bias = nullptr;
        const uint64_t version = y.version();
        ops::gemm(ad, ta, bd, tb, y, o);
        r.expect("accumulating bumps the version", y.version() > version);
        for (size_t i = 0; i < mag.size(); ++i) mag[i] *= 2;  // the same terms again
        r.bounded("accumulated", y, mag, bound);
      }
    }
  }
  if (d != kBF16) return;
  for (const Problem& p : {Problem{24, 40, 64}, Problem{256, 384, 512}}) {
    for (DType out : {kF32, kBF16}) {
      auto s = r.scope(p.str() + " into " + name(out) + ", bf16 bias, accumulate");
      const Tensor a = random_tensor({p.m, p.k}, kBF16, 31),
                   b = random_tensor({p.n, p.k}, kBF16, 32);
      const Tensor bias = random_tensor({p.n}, kBF16, 33), old = random_tensor({p.m, p.n}, out, 34);
      const Tensor bias_d = r.in(bias);
      ops::GemmOptions o;
      o.bias = &bias_d;
      o.accumulate = Accumulate::kYes;
      Tensor y = r.in(old);
      ops::gemm(r.in(a), Transpose::kNo, r.in(b), Transpose::kYes, y, o);
      std::vector<double> mag;
      if (!r.on_cpu()) {
        mag = gemm_magnitude(a, Transpose::kNo, b, Transpose::kYes);
        add_row_terms(mag, bias);
        add_terms(mag, old);
      }
      r.bounded("y", y, std::move(mag), test::gemm_accumulation_bound(false, p.k));
    }
  }
  // A 3-D operand folds its leading dimensions into rows.
  const Tensor x = random_tensor({2, 8, 32}, kBF16, 35), w = random_tensor({24, 32}, kBF16, 36);
  r.bounded(
      "3-D operand", ops::gemm(r.in(x), Transpose::kNo, r.in(w), Transpose::kYes, kBF16),
      r.on_cpu() ? std::vector<double>{} : gemm_magnitude(x, Transpose::kNo, w, Transpose::kYes),
      test::gemm_accumulation_bound(false, 32));
}

// FP8 operands: codes with a scale (e4m3 x e4m3 and e4m3 x e5m2 reach cuBLASLt's FP8 kernels;
// e5m2 x e5m2 goes through bf16), on the CPU.
struct Fp8Operand {
  Tensor codes, scale_inv;
  double scale_inv_value;
};
Fp8Operand fp8_operand(const Shape& shape, DType fp8, float scale, uint64_t seed, float std) {
  Fp8Operand op{Tensor::empty(shape, fp8), Tensor::from_floats({1.f / scale}, {1}), 1.0 / scale};
  ops::quantize_fp8(random_tensor(shape, kF32, seed, std), Tensor::from_floats({scale}, {1}),
                    &op.codes, nullptr, nullptr);
  return op;
}

// Raw FP8 operands in every format mix and transpose, both accumulation modes, f32 and bf16 out.
void gemm_fp8_operands_case(OpRun& r) {
  const Problem p{64, 48, 96};
  const double bound = test::gemm_accumulation_bound(test::fp8_tensor_cores(), p.k);
  for (DType db : {kE4M3, kE5M2}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        // Non-trivial scales: scale_inv must be applied.
        const Fp8Operand a = fp8_operand(stored(p.m, p.k, ta), r.dtype(), 16.f, 21, 3.f);
        const Fp8Operand b = fp8_operand(stored(p.k, p.n, tb), db, 2048.f, 22, 0.05f);
        const Tensor bias = random_tensor({p.n}, kF32, 23);
        const Tensor ia = r.in(a.scale_inv), ib = r.in(b.scale_inv), bias_d = r.in(bias);
        std::vector<double> mag;
        if (!r.on_cpu()) {
          mag = gemm_magnitude(a.codes, ta, b.codes, tb, a.scale_inv_value * b.scale_inv_value);
          add_row_terms(mag, bias);
        }
        for (ops::FP8Accumulation acc :
             {ops::FP8Accumulation::kSplit, ops::FP8Accumulation::kFast}) {
          for (DType out : {kF32, kBF16}) {
            ops::GemmOptions o;
            o.a_scale_inv = &ia;
            o.b_scale_inv = &ib;
            o.bias = &bias_d;
            o.fp8_accumulation = acc;
            r.bounded("x " + name(db) + " " + letter(ta) + letter(tb) +
                          (acc == ops::FP8Accumulation::kFast ? " fast" : " split") + " into " +
                          name(out),
                      ops::gemm(r.in(a.codes), ta, r.in(b.codes), tb, out, o), mag, bound);
          }
        }
      }
    }
  }
}

// One GEMM out = epilogue(a (M, K) . b (N, K)^T [+ bias]) of the operand kind r.dtype() (FP8:
// e4m3 meets e4m3 and e5m2, e5m2 meets e5m2), run on r's device.
struct EpilogueGemm {
  std::string name;
  Tensor a, b, a_scale_inv, b_scale_inv;  // on the CPU
  double scale_product = 1;
  Tensor bias;
  std::vector<double> mag() const {
    std::vector<double> m = gemm_magnitude(a, Transpose::kNo, b, Transpose::kYes, scale_product);
    if (bias.defined()) add_row_terms(m, bias);
    return m;
  }
};
std::vector<EpilogueGemm> epilogue_gemms(DType kind, const Problem& p, uint64_t seed) {
  std::vector<EpilogueGemm> out;
  if (!is_fp8(kind)) {
    EpilogueGemm g;
    g.name = name(kind);
    g.a = random_tensor({p.m, p.k}, kind, seed, 2.f);
    g.b = random_tensor({p.n, p.k}, kind, seed + 1, 0.5f);
    out.push_back(g);
    return out;
  }
  for (DType b_kind : {kE4M3, kE5M2}) {
    if (kind == kE5M2 && b_kind == kE4M3) continue;
    const Fp8Operand a = fp8_operand({p.m, p.k}, kind, 64.f, seed, 2.f);
    const Fp8Operand b = fp8_operand({p.n, p.k}, b_kind, 256.f, seed + 1, 0.5f);
    EpilogueGemm g;
    g.name = name(kind) + " x " + name(b_kind);
    g.a = a.codes;
    g.b = b.codes;
    g.a_scale_inv = a.scale_inv;
    g.b_scale_inv = b.scale_inv;
    g.scale_product = a.scale_inv_value * b.scale_inv_value;
    out.push_back(g);
  }
  return out;
}
Tensor run_epilogue_gemm(OpRun& r, const EpilogueGemm& g, DType out, ops::Epilogue epilogue,
                         const Tensor& out_scale, Tensor* amax) {
  const Tensor ia = r.in(g.a_scale_inv), ib = r.in(g.b_scale_inv), bias = r.in(g.bias);
  ops::GemmOptions o;
  if (ia.defined()) {
    o.a_scale_inv = &ia;
    o.b_scale_inv = &ib;
  }
  if (bias.defined()) o.bias = &bias;
  o.epilogue = epilogue;
  if (is_fp8(out)) {
    o.out_scale = &out_scale;
    o.out_amax = amax;
  }
  return ops::gemm(r.in(g.a), Transpose::kNo, r.in(g.b), Transpose::kYes, out, o);
}

// 64 x 96 x 128 meets cuBLASLt's FP8 alignment rules; 37 x 53 x 71 does not (FP8 falls back).
const Problem kEpilogueProblems[] = {{64, 96, 128}, {37, 53, 71}};
// No bias, a bf16 bias (cuBLASLt's epilogue takes it with FP8 operands), an f32 one.
const std::optional<DType> kBiasKinds[] = {std::nullopt, kBF16, kF32};

void gemm_gelu_case(OpRun& r) {
  for (const Problem& p : kEpilogueProblems) {
    for (EpilogueGemm& g : epilogue_gemms(r.dtype(), p, 101)) {
      for (std::optional<DType> bias : kBiasKinds) {
        g.bias = bias ? random_tensor({p.n}, *bias, 103) : Tensor();
        const std::vector<double> mag = r.on_cpu() ? std::vector<double>{} : g.mag();
        const double bound =
            test::kGeluLipschitz *
            test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), p.k);
        for (DType out : {kF32, kBF16}) {
          r.bounded(g.name + " " + p.str() + " bias " + (bias ? name(*bias) : "none") + " into " +
                        name(out),
                    run_epilogue_gemm(r, g, out, ops::Epilogue::kGelu, Tensor(), nullptr), mag,
                    bound);
        }
      }
    }
  }
}

// FP8 outputs (cuBLASLt's own D, or the cast of a staged result) and their amax: the f32 values
// they are cast from differ by the accumulation (through the GELU's slope), so a code may lie a
// step from the CPU's.
void gemm_fp8_output_case(OpRun& r) {
  for (const Problem& p : kEpilogueProblems) {
    for (EpilogueGemm& g : epilogue_gemms(r.dtype(), p, 111)) {
      for (std::optional<DType> bias : kBiasKinds) {
        g.bias = bias ? random_tensor({p.n}, *bias, 113) : Tensor();
        const std::vector<double> mag = r.on_cpu() ? std::vector<double>{} : g.mag();
        const double max_mag = mag.empty() ? 0 : *std::max_element(mag.begin(), mag.end());
        for (ops::Epilogue epilogue : {ops::Epilogue::kNone, ops::Epilogue::kGelu}) {
          const double bound =
              (epilogue == ops::Epilogue::kGelu ? test::kGeluLipschitz : 1.0) *
              test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), p.k);
          for (DType out : {kE4M3, kE5M2}) {
            auto s =
                r.scope(g.name + " " + p.str() + " bias " + (bias ? name(*bias) : "none") +
                        (epilogue == ops::Epilogue::kGelu ? " gelu" : "") + " into " + name(out));
            // Products reach ~4 sqrt(K): these scales saturate the largest ones (a cast that
            // overflowed to NaN fails).
            const float scale = out == kE4M3 ? 16.f : 2048.f;
            Tensor amax = r.scalar(0.25f);  // max-accumulated: below the result
            const Tensor y = run_epilogue_gemm(r, g, out, epilogue, r.scalar(scale), &amax);
            r.bounded("out", y, mag, bound, scale);
            r.bounded("amax", amax, {max_mag}, bound);
            r.expect("amax rose", test::on_cpu(amax).item() > 0.25f);
          }
        }
      }
    }
  }
  // cuBLASLt sets its amax; octet max-accumulates: the FP8 kernels' own D (e4m3 x e4m3 with a
  // bf16 bias) and the cast of a staged result (e5m2 x e5m2) keep a larger start.
  EpilogueGemm g = epilogue_gemms(r.dtype(), {64, 96, 128}, 121).front();
  g.bias = random_tensor({96}, kBF16, 123);
  Tensor amax = r.scalar(1e6f);
  const Tensor y = run_epilogue_gemm(r, g, kE4M3, ops::Epilogue::kNone, r.scalar(16.f), &amax);
  r.bounded("kept amax: out", y, r.on_cpu() ? std::vector<double>{} : g.mag(),
            test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), 128), 16);
  r.bits("kept amax", amax);
  r.expect("amax kept 1e6", test::on_cpu(amax).item() == 1e6f);
}

// The FP8 GEMM layouts (fprop, dgrad, wgrad) on quantized operands of each recipe, into
// r.dtype(); the quantizers' state on the run's device.
struct Mode {
  const char* name;
  std::shared_ptr<Quantizer> (*make)(OpRun& r, FP8Direction d);
};
const Mode kModes[] = {
    {"delayed e4m3",
     [](OpRun& r, FP8Direction d) -> std::shared_ptr<Quantizer> {
       return delayed(r, d == FP8Direction::kForward ? 48.f : 96.f, kE4M3, {0.f});
     }},
    {"delayed hybrid",
     [](OpRun& r, FP8Direction d) -> std::shared_ptr<Quantizer> {
       return d == FP8Direction::kForward ? delayed(r, 40.f, kE4M3, {0.f})
                                          : delayed(r, 4096.f, kE5M2, {0.f});
     }},
    {"current hybrid",
     [](OpRun&, FP8Direction d) {
       return make_quantizer(Recipe::current(FP8Format::kHybrid), nullptr, {d, 0});
     }},
    {"mxfp8",
     [](OpRun&, FP8Direction) -> std::shared_ptr<Quantizer> {
       return std::make_shared<MXFP8Quantizer>(kE4M3);
     }},
};

void fp8_gemm_case(OpRun& r) {
  const DType out = r.dtype();
  // X (2, 64, 128): M = 128 tokens, K = 128; W (96, 128); dY (2, 64, 96): multiples of 32, so
  // MXFP8 operands qualify too.
  const int64_t m = 128, k = 128, n = 96;
  const double bound_k = test::gemm_accumulation_bound(test::fp8_tensor_cores(), k);
  for (const Mode& mode : kModes) {
    auto s = r.scope(mode.name);
    auto quantize = [&](const Tensor& t, FP8Direction d) {
      return mode.make(r, d)->quantize(r.in(t), Usage::kBoth, Ownership::kInternal,
                                       AmaxRecording::kRecord);
    };
    auto qx = quantize(random_tensor({2, 64, k}, kF32, 71, 2.f), FP8Direction::kForward);
    auto qw = quantize(random_tensor({n, k}, kBF16, 72, 0.5f), FP8Direction::kForward);
    auto qdy = quantize(random_tensor({2, 64, n}, kF32, 73, 0.01f), FP8Direction::kBackward);
    record(r, "x", *qx);
    record(r, "w", *qw);
    record(r, "dy", *qdy);
    const bool mags = !r.on_cpu();
    const Tensor xv = mags ? ops::dequantize(*qx, kF32).reshape({m, k}) : Tensor();
    const Tensor wv = mags ? ops::dequantize(*qw, kF32) : Tensor();
    const Tensor dyv = mags ? ops::dequantize(*qdy, kF32).reshape({m, n}) : Tensor();
    // fprop: Y = X W^T + bias.
    const Tensor bias = random_tensor({n}, kF32, 74), bias_d = r.in(bias);
    ops::FP8GemmOptions o;
    o.bias = &bias_d;
    std::vector<double> mag;
    if (mags) {
      mag = gemm_magnitude(xv, Transpose::kNo, wv, Transpose::kYes);
      add_row_terms(mag, bias);
    }
    r.bounded("fprop", ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out, o), mag, bound_k);
    // dgrad: dX = dY W.
    r.bounded(
        "dgrad", ops::fp8_gemm(*qdy, *qw, ops::GemmLayout::kDgrad, out),
        mags ? gemm_magnitude(dyv, Transpose::kNo, wv, Transpose::kNo) : std::vector<double>{},
        test::gemm_accumulation_bound(test::fp8_tensor_cores(), n));
    // wgrad: dW = dY^T X, accumulated onto what the output holds.
    const Tensor old = random_tensor({n, k}, out, 75);
    Tensor dw = r.in(old);
    ops::FP8GemmOptions acc;
    acc.accumulate = Accumulate::kYes;
    ops::fp8_gemm(*qdy, *qx, ops::GemmLayout::kWgrad, dw, acc);
    mag.clear();
    if (mags) {
      mag = gemm_magnitude(dyv, Transpose::kYes, xv, Transpose::kNo);
      add_terms(mag, old);
    }
    r.bounded("wgrad", dw, mag, test::gemm_accumulation_bound(test::fp8_tensor_cores(), m));
  }
  // A layer-sized forward into bf16: 512 tokens, K = 1024, N = 768, per-tensor hybrid and MXFP8.
  if (out != kBF16) return;
  const Tensor x = random_tensor({512, 1024}, kBF16, 81),
               w = random_tensor({768, 1024}, kBF16, 82, 0.02f);
  for (const Mode& mode : {kModes[1], kModes[3]}) {
    auto q = mode.make(r, FP8Direction::kForward);
    auto qx = q->quantize(r.in(x), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto qw = q->quantize(r.in(w), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    r.bounded(std::string(mode.name) + " 512x768x1024 fprop",
              ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out),
              r.on_cpu() ? std::vector<double>{}
                         : gemm_magnitude(ops::dequantize(*qx, kF32), Transpose::kNo,
                                          ops::dequantize(*qw, kF32), Transpose::kYes),
              test::gemm_accumulation_bound(test::fp8_tensor_cores(), 1024));
  }
}

}  // namespace

std::vector<test::OpCase> gemm_cases() {
  return {
      {"gemm", {"gemm"}, kCastInputs, gemm_case},
      {"gemm_fp8_operands", {"gemm"}, kFp8, gemm_fp8_operands_case},
      {"gemm_gelu", {"gemm"}, {kF32, kBF16, kE4M3, kE5M2}, gemm_gelu_case},
      {"gemm_fp8_output", {"gemm"}, {kF32, kBF16, kE4M3, kE5M2}, gemm_fp8_output_case},
      {"fp8_gemm", {"gemm", "quantize_fp8", "quantize_mxfp8_rowwise"}, kCastInputs, fp8_gemm_case},
  };
}

}  // namespace octet::op_table
