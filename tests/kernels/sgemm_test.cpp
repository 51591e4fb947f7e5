// octet's own CPU sgemm (kernels/cpu/sgemm.h) through ops::gemm: the packing's edges (every
// transpose, sides that are not whole register tiles or K / M blocks, K = 1, one element), each
// micro-kernel path forced in turn, against f64; FP8 and bf16 operands packed on the fly give the
// bits of their exact f32 expansion; 1, 2 and 3 threads give the same bits.
#include "kernels/cpu/sgemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/ops.h"
#include "runtime/parallel.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using cpu::CpuGemmLibrary;
using cpu::SimdPath;
using ops::Accumulate;
using ops::GemmOptions;
using ops::Transpose;

// While alive, ops::gemm runs on octet's own sgemm along `path`.
class OwnGemmScope {
 public:
  explicit OwnGemmScope(SimdPath path)
      : library_(cpu::set_cpu_gemm_library(CpuGemmLibrary::kOctet)),
        path_(cpu::set_gemm_simd_path(path)) {}
  ~OwnGemmScope() {
    cpu::set_gemm_simd_path(path_);
    cpu::set_cpu_gemm_library(library_);
  }

 private:
  CpuGemmLibrary library_;
  SimdPath path_;
};

std::vector<SimdPath> available_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (cpu::simd_path_available(p)) paths.push_back(p);
  }
  return paths;
}

Shape stored(int64_t rows, int64_t cols, Transpose t) {
  return t == Transpose::kYes ? Shape{cols, rows} : Shape{rows, cols};
}

std::string name(SimdPath path, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k) {
  std::ostringstream s;
  s << cpu::simd_path_name(path) << " " << (ta == Transpose::kYes ? "T" : "N")
    << (tb == Transpose::kYes ? "T" : "N") << " M=" << m << " N=" << n << " K=" << k;
  return s.str();
}

// Rigorous bound for a length-k f32 dot product summed in any order: gamma_k * sum|a b|.
double gamma(int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

// Counts the elements of out = alpha op(a) op(b) (+ c0 when c0 is given) that miss the f64 value
// by more than the f32 accumulation bound.
size_t misses_f64(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha,
                  const std::vector<float>* c0, const std::vector<float>& got, int64_t m, int64_t n,
                  int64_t k) {
  const std::vector<double> da = test::to_doubles(a), db = test::to_doubles(b);
  size_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double x = ta == Transpose::kYes ? da[l * m + i] : da[i * k + l];
        const double y = tb == Transpose::kYes ? db[j * k + l] : db[l * n + j];
        s += x * y;
        mag += std::fabs(x * y);
      }
      s *= alpha;
      mag *= std::fabs(alpha);
      if (c0 != nullptr) {
        s += (*c0)[i * n + j];
        mag += std::fabs((*c0)[i * n + j]);
      }
      // One more rounding per K block and for the final add: k + 2 terms bound them all.
      const double bound = gamma(k + 2) * mag + 1e-30;
      if (!(std::fabs(got[i * n + j] - s) <= bound)) ++bad;
    }
  }
  return bad;
}

// Shapes at the packing's edges: one element; K = 1; sides just under and over the register
// tiles (AVX-512 8 x 48, AVX2 4 x 24, portable 4 x 16); K across the K blocks (256, 384, 768)
// and M across the row blocks (64, AVX2's from the L2 size, 384) with ragged ends; M x K past the
// 4 Mi floats of one packed chunk of A (two chunks, the second ragged).
const std::vector<std::tuple<int64_t, int64_t, int64_t>>& edge_shapes() {
  static const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1},      {1, 1, 7},     {3, 5, 1},      {7, 17, 2},     {9, 47, 33},
      {5, 49, 257},   {13, 97, 385}, {193, 50, 9},   {290, 33, 260}, {391, 20, 400},
      {67, 145, 790}, {5, 25, 769},  {4500, 1, 1000}};
  return shapes;
}

TEST(OwnGemm, EveryPathAndTransposeMatchesF64AtThePackingEdges) {
  for (SimdPath path : available_paths()) {
    const OwnGemmScope own(path);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (const auto& [m, n, k] : edge_shapes()) {
          const Tensor a = test::random_tensor(stored(m, k, ta), DType::kF32, 41);
          const Tensor b = test::random_tensor(stored(k, n, tb), DType::kF32, 42);
          Tensor out = Tensor::empty({m, n}, DType::kF32);
          test::poison(out);
          ops::gemm(a, ta, b, tb, out);
          EXPECT_EQ(misses_f64(a, ta, b, tb, 1.f, nullptr, out.to_floats(), m, n, k), 0u)
              << name(path, ta, tb, m, n, k);
        }
      }
    }
  }
}

// transpose_f32 (the oneDNN path's copy of a transposed operand, and the own sgemm's f32 packing
// through the same register blocks) on every path: full 16x16 and 8x8 blocks, ragged edges on
// both sides, strides wider than the rows, a single row and column; each element moved exactly.
TEST(OwnGemm, TransposeOnEveryPathMovesEveryElementOnce) {
  for (SimdPath path : available_paths()) {
    const SimdPath before = cpu::set_gemm_simd_path(path);
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{16, 16},
                                     {8, 8},
                                     {37, 53},
                                     {64, 24},
                                     {1, 100},
                                     {100, 1},
                                     {9, 17},
                                     {7, 7}}) {
      const int64_t src_stride = cols + 3, dst_stride = rows + 5;
      std::vector<float> src(static_cast<size_t>(rows * src_stride));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
      std::vector<float> dst(static_cast<size_t>(cols * dst_stride), -1.f);
      cpu::transpose_f32(src.data(), src_stride, rows, cols, dst.data(), dst_stride);
      size_t bad = 0;
      for (int64_t j = 0; j < cols; ++j) {
        for (int64_t i = 0; i < dst_stride; ++i) {
          const float want = i < rows ? src[static_cast<size_t>(i * src_stride + j)] : -1.f;
          bad += dst[static_cast<size_t>(j * dst_stride + i)] != want;
        }
      }
      EXPECT_EQ(bad, 0u) << cpu::simd_path_name(path) << " " << rows << "x" << cols;
    }
    cpu::set_gemm_simd_path(before);
  }
}

// alpha and accumulation (C += alpha A·B) on every path: the first K block adds to C's old
// contents, the later ones to the partial sums.
TEST(OwnGemm, AlphaAndAccumulateMatchF64OnEveryPath) {
  for (SimdPath path : available_paths()) {
    const OwnGemmScope own(path);
    for (const auto& [m, n, k] :
         {std::tuple<int64_t, int64_t, int64_t>{11, 53, 300}, {70, 20, 5}, {200, 100, 800}}) {
      const Tensor a = test::random_tensor({m, k}, DType::kF32, 51);
      const Tensor b = test::random_tensor({n, k}, DType::kF32, 52);
      Tensor out = test::random_tensor({m, n}, DType::kF32, 53);
      const std::vector<float> before = out.to_floats();
      GemmOptions options;
      options.alpha = -0.375f;
      options.accumulate = Accumulate::kYes;
      ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out, options);
      EXPECT_EQ(misses_f64(a, Transpose::kNo, b, Transpose::kYes, options.alpha, &before,
                           out.to_floats(), m, n, k),
                0u)
          << name(path, Transpose::kNo, Transpose::kYes, m, n, k);
    }
  }
}

// FP8 and bf16 operands are converted in the packing; their values are exact in f32, so the
// product must be the f32 GEMM's of the expanded operands, bit for bit, in every layout.
TEST(OwnGemm, Fp8AndBf16OperandsGiveTheBitsOfTheirF32Expansion) {
  const int64_t m = 37, n = 101, k = 413;
  for (SimdPath path : available_paths()) {
    const OwnGemmScope own(path);
    for (DType dtype : {DType::kE4M3, DType::kE5M2, DType::kBF16}) {
      for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
        for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
          const Tensor a = test::random_tensor(stored(m, k, ta), dtype, 61);
          const Tensor b = test::random_tensor(stored(k, n, tb), dtype, 62);
          const Tensor a32 = Tensor::from_floats(a.to_floats(), a.shape());
          const Tensor b32 = Tensor::from_floats(b.to_floats(), b.shape());
          const Tensor a_inv = Tensor::from_floats({0.5f}, {1});
          const Tensor b_inv = Tensor::from_floats({3.f}, {1});
          GemmOptions options;
          if (is_fp8(dtype)) {
            options.a_scale_inv = &a_inv;
            options.b_scale_inv = &b_inv;
          }
          Tensor got = Tensor::empty({m, n}, DType::kF32),
                 want = Tensor::empty({m, n}, DType::kF32);
          test::poison(got);
          ops::gemm(a, ta, b, tb, got, options);
          GemmOptions f32_options;
          f32_options.alpha = is_fp8(dtype) ? 0.5f * 3.f : 1.f;
          ops::gemm(a32, ta, b32, tb, want, f32_options);
          const std::vector<float> g = got.to_floats(), w = want.to_floats();
          EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0)
              << dtype << " " << name(path, ta, tb, m, n, k);
        }
      }
    }
  }
}

// A row-major f32 A is read in place by the micro-kernels, any other A packed into panels: the
// same products in the same order, so the same bits. Here the in-place A has a row stride past K
// whose extra columns hold NaN (a read past a row's K would show), and ragged row panels (the
// kernels read the last row again for the rows past M); the packed one is its transpose.
TEST(OwnGemm, ARowMajorReadInPlaceGivesTheBitsOfItsPackedTranspose) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 5, 3}, {7, 17, 2}, {9, 47, 33}, {13, 97, 385}, {391, 20, 400}, {67, 145, 790}};
  for (SimdPath path : available_paths()) {
    const OwnGemmScope own(path);
    for (const auto& [m, n, k] : shapes) {
      const int64_t lda = k + 5;
      const std::vector<float> values = test::random_tensor({m, k}, DType::kF32, 81).to_floats();
      std::vector<float> rows(m * lda, std::nanf("")), cols(k * m);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < k; ++p) {
          rows[i * lda + p] = values[i * k + p];
          cols[p * m + i] = values[i * k + p];
        }
      }
      const std::vector<float> b = test::random_tensor({n, k}, DType::kF32, 82).to_floats();
      const cpu::GemmOperand b_op{b.data(), DType::kF32, true, k};
      std::vector<float> in_place(m * n), packed(m * n);
      cpu::sgemm(m, n, k, 0.75f, {rows.data(), DType::kF32, false, lda}, b_op,
                 cpu::GemmUpdate::kOverwrite, in_place.data(), n);
      cpu::sgemm(m, n, k, 0.75f, {cols.data(), DType::kF32, true, m}, b_op,
                 cpu::GemmUpdate::kOverwrite, packed.data(), n);
      EXPECT_EQ(std::memcmp(in_place.data(), packed.data(), packed.size() * sizeof(float)), 0)
          << cpu::simd_path_name(path) << " M=" << m << " N=" << n << " K=" << k;
    }
  }
}

// Bits independent of the thread count on every path: each output element is summed by one
// task over the K blocks in order, whichever thread claims it.
TEST(OwnGemm, OneTwoAndThreeThreadsGiveTheSameBitsOnEveryPath) {
  const int threads = num_threads();
  const int64_t m = 403, n = 611, k = 797;
  for (SimdPath path : available_paths()) {
    const OwnGemmScope own(path);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      const Transpose tb = ta == Transpose::kYes ? Transpose::kNo : Transpose::kYes;
      const Tensor a = test::random_tensor(stored(m, k, ta), DType::kF32, 71);
      const Tensor b = test::random_tensor(stored(k, n, tb), DType::kF32, 72);
      std::vector<std::vector<float>> runs;
      for (int t : {1, 2, 3}) {
        set_num_threads(t);
        Tensor out = Tensor::empty({m, n}, DType::kF32);
        test::poison(out);
        ops::gemm(a, ta, b, tb, out);
        runs.push_back(out.to_floats());
      }
      set_num_threads(threads);
      for (size_t r = 1; r < runs.size(); ++r) {
        EXPECT_EQ(std::memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0)
            << name(path, ta, tb, m, n, k) << ": thread count #" << r << " differs";
      }
      EXPECT_EQ(misses_f64(a, ta, b, tb, 1.f, nullptr, runs[0], m, n, k), 0u)
          << name(path, ta, tb, m, n, k);
    }
  }
}

TEST(OwnGemm, SetterRefusesAPathTheProcessorLacks) {
  if (cpu::simd_path_available(SimdPath::kAvx512)) GTEST_SKIP() << "every path is available";
  EXPECT_THROW(cpu::set_gemm_simd_path(SimdPath::kAvx512), Error);
}

}  // namespace
}  // namespace octet
