// GEMM throughput on the CPU: f32 and FP8 (e4m3 x e4m3) operands at transformer shapes, every
// transpose combination, median of repeated runs.
// Usage: octet_gemm_bench [--threads N] [--reps N] [--simd scalar|avx2|avx512] [--transposes]
// --simd holds octet's own CPU code paths (kernels/cpu/sgemm.h: the operand transposes and, with
// OCTET_CPU_GEMM=octet, the micro-kernels) to one instruction set; oneDNN's own kernels follow
// ONEDNN_MAX_CPU_ISA only. With the default (oneDNN) GEMM, --simd scalar against avx2 is the cost
// of transposing a transposed operand element by element, as an AVX2 machine did before the AVX2
// transposes. --transposes times only cpu::transpose_f32 (one thread) at the layer's transposed
// operand shapes on every path this processor has, the paths interleaved.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/ops.h"
#include "runtime/parallel.h"
#include "runtime/rng.h"

namespace {

using octet::DType;
using octet::Tensor;
using octet::ops::Transpose;

struct Shape3 {
  int64_t m, n, k;
};

double median_ms(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor random(int64_t rows, int64_t cols, octet::Generator& gen) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  gen.fill_normal(t, 0.f, 1.f);
  return t;
}

Tensor to_fp8(const Tensor& x) {
  Tensor q = Tensor::empty(x.shape(), DType::kE4M3);
  Tensor scale = Tensor::from_floats({64.f}, {1});
  octet::ops::quantize_fp8(x, scale, &q, nullptr, nullptr);
  return q;
}

// The transposes alone: each path in turn, `reps` rounds, the median per path and shape.
int transposes(int reps) {
  using octet::cpu::SimdPath;
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (octet::cpu::simd_path_available(p)) paths.push_back(p);
  }
  const SimdPath before = octet::cpu::gemm_simd_path();
  std::printf("transpose_f32, one thread, median of %d interleaved rounds, ms\n", reps);
  std::printf("%-12s", "rows x cols");
  for (SimdPath p : paths) std::printf(" %10s", octet::cpu::simd_path_name(p));
  std::printf("\n");
  const std::pair<int64_t, int64_t> shapes[] = {{768, 768}, {2304, 768}, {3072, 768}, {768, 3072}};
  for (const auto& [rows, cols] : shapes) {
    std::vector<float> src(static_cast<size_t>(rows * cols)), dst(src.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
    std::vector<std::vector<double>> times(paths.size());
    for (int r = 0; r < reps + 1; ++r) {
      for (size_t p = 0; p < paths.size(); ++p) {
        octet::cpu::set_gemm_simd_path(paths[p]);
        const auto t0 = std::chrono::steady_clock::now();
        octet::cpu::transpose_f32(src.data(), cols, rows, cols, dst.data(), rows);
        const auto t1 = std::chrono::steady_clock::now();
        if (r > 0) times[p].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    std::printf("%5ld x %-4ld", static_cast<long>(rows), static_cast<long>(cols));
    for (const auto& t : times) std::printf(" %10.3f", median_ms(t));
    std::printf("\n");
  }
  octet::cpu::set_gemm_simd_path(before);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool only_transposes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--transposes") {
      only_transposes = true;
      continue;
    }
    if ((arg != "--threads" && arg != "--reps" && arg != "--simd") || i + 1 == argc) {
      std::fprintf(stderr,
                   "bad argument %s (expected --threads N, --reps N, --simd PATH, --transposes)\n",
                   arg.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (arg == "--threads") {
      octet::set_num_threads(std::atoi(v.c_str()));
    } else if (arg == "--reps") {
      reps = std::max(3, std::atoi(v.c_str()));
    } else {
      using octet::cpu::SimdPath;
      if (v != "scalar" && v != "avx2" && v != "avx512") {
        std::fprintf(stderr, "--simd %s: expected scalar, avx2 or avx512\n", v.c_str());
        return 2;
      }
      const SimdPath path = v == "scalar" ? SimdPath::kScalar
                            : v == "avx2" ? SimdPath::kAvx2
                                          : SimdPath::kAvx512;
      try {
        octet::cpu::set_gemm_simd_path(path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "--simd %s: %s\n", v.c_str(), e.what());
        return 2;
      }
    }
  }
  if (only_transposes) return transposes(reps);
  const Shape3 shapes[] = {{768, 768, 768}, {1024, 3072, 768}, {1024, 768, 3072}};
  std::printf("threads %d, median of %d runs, octet's CPU path %s\n", octet::num_threads(), reps,
              octet::cpu::simd_path_name(octet::cpu::gemm_simd_path()));
  std::printf("%-6s %5s %5s %5s  %-5s %10s %10s\n", "dtype", "M", "N", "K", "op", "ms", "GFLOP/s");
  octet::Generator gen(1);
  const Tensor inv = Tensor::from_floats({1.f / 64.f}, {1});
  for (const Shape3& s : shapes) {
    for (int trans = 0; trans < 4; ++trans) {
      const Transpose ta = (trans & 2) ? Transpose::kYes : Transpose::kNo;
      const Transpose tb = (trans & 1) ? Transpose::kYes : Transpose::kNo;
      const Tensor a = ta == Transpose::kYes ? random(s.k, s.m, gen) : random(s.m, s.k, gen);
      const Tensor b = tb == Transpose::kYes ? random(s.n, s.k, gen) : random(s.k, s.n, gen);
      const Tensor a8 = to_fp8(a), b8 = to_fp8(b);
      Tensor out = Tensor::empty({s.m, s.n}, DType::kF32);
      const std::string op =
          std::string(ta == Transpose::kYes ? "T" : "N") + (tb == Transpose::kYes ? "T" : "N");
      for (int fp8 = 0; fp8 < 2; ++fp8) {
        octet::ops::GemmOptions options;
        if (fp8) {
          options.a_scale_inv = &inv;
          options.b_scale_inv = &inv;
        }
        const Tensor& x = fp8 ? a8 : a;
        const Tensor& y = fp8 ? b8 : b;
        std::vector<double> times;
        for (int r = 0; r < reps + 2; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          octet::ops::gemm(x, ta, y, tb, out, options);
          const auto t1 = std::chrono::steady_clock::now();
          if (r >= 2) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        const double ms = median_ms(times);
        const double gflops = 2.0 * s.m * s.n * s.k / (ms * 1e6);
        std::printf("%-6s %5ld %5ld %5ld  %-5s %10.3f %10.1f\n", fp8 ? "e4m3" : "f32",
                    static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
                    op.c_str(), ms, gflops);
      }
    }
  }
  return 0;
}
