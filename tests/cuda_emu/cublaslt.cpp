// CUDA emulation build: a stand-in for cuBLASLt, so that kernels/cuda/gemm.cu (its plans, operand
// copies, epilogue kernels and fallbacks) runs on the CPU. The real library only runs on a GPU;
// this one implements cuBLASLt's documented column-major semantics as a reference loop with f32
// accumulation, checks every pointer against the emulated device memory (device buffers,
// alpha/beta by pointer mode, matrix extents from rows, cols and ld), and declines with
// CUBLAS_STATUS_NOT_SUPPORTED what Hopper's cuBLASLt declines as far as gemm.cu plans around it
// (FP8 only as TN with 16-byte leading dimensions and alignments, never e5m2 x e5m2, bias dtypes),
// and the 128-element 1D / 128x128 2D block scaling of FP8 A and B (scale modes VEC128_32F /
// BLK128x128_32F) with the rules of cuBLAS's documentation, section 3.1.4.5 "128-element 1D and
// 128x128 2D Block Scaling For FP8 Data Types": compute capability 9.0 only, never 2D x 2D, D
// f32/bf16/f16 only, M and N multiples of 4, scale pointers 16-byte aligned.
// An algorithm remembers the problem and the alignments it was found for; a matmul that does not
// match them fails, as a cached plan reused for another problem would on a GPU.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"

struct cublasLtContext {
  uint32_t magic;
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;                                       // default: D's type
  const void* scale[4] = {nullptr, nullptr, nullptr, nullptr};  // A, B, C, D
  void* amax_d = nullptr;
  int8_t fast_accum = 0;
  int32_t scale_mode[2] = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                           CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F};  // A, B
};
struct cublasLtMatmulPreferenceOpaque {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace octet::emu::detail {
namespace {

constexpr uint64_t kAlgoMagic = 0x6f637465744c7431ull;

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t element_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_64F:
      return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
  }
  return 0;
}

const char* type_name(int t) {
  switch (t) {
    case CUDA_R_32F:
      return "f32";
    case CUDA_R_64F:
      return "f64";
    case CUDA_R_16F:
      return "f16";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_8F_E4M3:
      return "e4m3";
    case CUDA_R_8F_E5M2:
      return "e5m2";
  }
  return "?";
}

float load(const void* p, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_16BF:
      return from_bf16(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16F:
      return from_f16(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_8F_E4M3:
      return from_e4m3(static_cast<const uint8_t*>(p)[i]);
    case CUDA_R_8F_E5M2:
      return from_e5m2(static_cast<const uint8_t*>(p)[i]);
    default:
      return 0.f;
  }
}

void store(void* p, cudaDataType t, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(p)[i] = v;
      break;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(p)[i] = to_bf16(v);
      break;
    case CUDA_R_16F:
      static_cast<uint16_t*>(p)[i] = to_f16(v);
      break;
    case CUDA_R_8F_E4M3:  // saturating, as cuBLASLt's FP8 outputs
      static_cast<uint8_t*>(p)[i] = to_e4m3(v);
      break;
    case CUDA_R_8F_E5M2:
      static_cast<uint8_t*>(p)[i] = to_e5m2(v);
      break;
    default:
      break;
  }
}

bool has_bias(const cublasLtMatmulDescOpaque& d) {
  return d.epilogue == CUBLASLT_EPILOGUE_BIAS || d.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
}

struct Problem {
  uint64_t m = 0, n = 0, k = 0;
};

bool block_scaled(const cublasLtMatmulDescOpaque& d) {
  return d.scale_mode[0] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
         d.scale_mode[1] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

constexpr uint64_t kScaleBlock = 128;
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Section 3.1.4.5.1 "Scaling factors layouts": VEC128_32F scales of A (outer dim M) are M-major,
// M x L (L = ceil(K / 128)): the scale of row i, K-block b at b * M + i; BLK128x128_32F scales
// are K-major, L4 x ceil(M / 128) with L4 = L rounded up to 4: tile (i / 128, b) at
// (i / 128) * L4 + b. B the same with N.
uint64_t scale_index(int32_t mode, uint64_t outer_dim, uint64_t k, uint64_t i, uint64_t b) {
  const uint64_t blocks = ceil_div(k, kScaleBlock);
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return b * outer_dim + i;
  const uint64_t l4 = (blocks + 3) / 4 * 4;
  return (i / kScaleBlock) * l4 + b;
}
uint64_t scale_count(int32_t mode, uint64_t outer_dim, uint64_t k) {
  const uint64_t blocks = ceil_div(k, kScaleBlock);
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return blocks * outer_dim;
  return ceil_div(outer_dim, kScaleBlock) * ((blocks + 3) / 4 * 4);
}

// The support rules; NOT_SUPPORTED for what the library declines, INVALID_VALUE (with a warning)
// for what is a caller's mistake.
cublasStatus_t check(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
                     const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
                     const cublasLtMatrixLayoutOpaque& dl, const uint32_t align[4], Problem* p,
                     std::string* why) {
  auto invalid = [&](const std::string& s) {
    *why = s;
    warn("cuBLASLt: " + s);
    return CUBLAS_STATUS_INVALID_VALUE;
  };
  auto unsupported = [&](const std::string& s) {
    *why = s;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  };
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale_type != CUDA_R_32F) {
    return unsupported("compute type other than CUBLAS_COMPUTE_32F with f32 scale");
  }
  if ((d.transa != CUBLAS_OP_N && d.transa != CUBLAS_OP_T) ||
      (d.transb != CUBLAS_OP_N && d.transb != CUBLAS_OP_T)) {
    return invalid("bad transpose");
  }
  const bool ta = d.transa == CUBLAS_OP_T, tb = d.transb == CUBLAS_OP_T;
  p->m = dl.rows;
  p->n = dl.cols;
  p->k = ta ? a.rows : a.cols;
  const uint64_t am = ta ? a.cols : a.rows;
  const uint64_t bk = tb ? b.cols : b.rows, bn = tb ? b.rows : b.cols;
  if (am != p->m || bk != p->k || bn != p->n || c.rows != dl.rows || c.cols != dl.cols) {
    return invalid("shapes do not chain: op(A) " + std::to_string(am) + "x" + std::to_string(p->k) +
                   ", op(B) " + std::to_string(bk) + "x" + std::to_string(bn) + ", C " +
                   std::to_string(c.rows) + "x" + std::to_string(c.cols) + ", D " +
                   std::to_string(dl.rows) + "x" + std::to_string(dl.cols) +
                   " (column-major rows x cols)");
  }
  for (const auto* l : {&a, &b, &c, &dl}) {
    if (l->ld < static_cast<int64_t>(l->rows) || l->ld < 1) {
      return invalid("leading dimension " + std::to_string(l->ld) + " below the rows (" +
                     std::to_string(l->rows) + ") of a column-major layout");
    }
  }
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS) {
    return unsupported("epilogue other than DEFAULT and BIAS (not emulated)");
  }
  const int bias_type = d.bias_type >= 0 ? d.bias_type : dl.type;
  const bool fp8 = is_fp8(a.type) || is_fp8(b.type);
  if (fp8) {
    if (!is_fp8(a.type) || !is_fp8(b.type)) return unsupported("FP8 times non-FP8");
    if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2) {
      return unsupported("e5m2 x e5m2 has no kernel");
    }
    if (!ta || tb) return unsupported("FP8 needs the TN layout (transa T, transb N)");
    if (a.ld % 16 != 0 || b.ld % 16 != 0) {
      return unsupported("FP8 leading dimensions of A and B must be multiples of 16");
    }
    if (align[0] < 16 || align[1] < 16) return unsupported("FP8 operands need 16-byte alignment");
    switch (dl.type) {
      case CUDA_R_32F:
        if (c.type != CUDA_R_32F) return unsupported("FP8 with f32 D needs an f32 C");
        break;
      case CUDA_R_16BF:
      case CUDA_R_16F:
        if (c.type != dl.type) return unsupported("FP8 with 16-bit D needs C of D's type");
        break;
      case CUDA_R_8F_E4M3:
      case CUDA_R_8F_E5M2:
        if (c.type != CUDA_R_16BF && c.type != CUDA_R_16F) {
          return unsupported("FP8 D needs a bf16 or f16 C");
        }
        if (dl.ld % 16 != 0) return unsupported("FP8 D needs a leading dimension multiple of 16");
        break;
      default:
        return unsupported(std::string("FP8 operands with a ") + type_name(dl.type) + " D");
    }
    if (block_scaled(d)) {
      for (const int32_t mode : d.scale_mode) {
        if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F &&
            mode != CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
          return unsupported(
              "block scaling of A and B: each VEC128_32F or BLK128x128_32F (the "
              "other modes are not emulated)");
        }
      }
      if (compute_capability() != 90) {
        return unsupported("128-element block scaling needs compute capability 9.0 (this one " +
                           std::to_string(compute_capability()) + ")");
      }
      if (d.scale_mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
          d.scale_mode[1] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
        return unsupported("BLK128x128_32F for both A and B");
      }
      if (is_fp8(dl.type)) return unsupported("an FP8 D with 128-element block scaling");
      if (p->m % 4 != 0 || p->n % 4 != 0) {
        return unsupported("128-element block scaling needs M and N multiples of 4");
      }
      if (d.scale[2] || d.scale[3] || d.amax_d) {
        return unsupported("C or D scales or a D amax beside 128-element block scaling");
      }
    }
    if (has_bias(d)) {
      const int want = dl.type == CUDA_R_16F || (is_fp8(dl.type) && c.type == CUDA_R_16F)
                           ? CUDA_R_16F
                           : CUDA_R_16BF;
      if (bias_type != want) {
        return unsupported(std::string("FP8 GEMM with a ") + type_name(bias_type) +
                           " bias (this D takes " + type_name(want) + ")");
      }
    }
  } else {
    if (a.type != b.type) return unsupported("A and B of different types");
    if (block_scaled(d)) return invalid("scale modes set for a non-FP8 GEMM");
    if (d.scale[0] || d.scale[1] || d.scale[2] || d.scale[3] || d.amax_d) {
      return invalid("scale or amax pointers set for a non-FP8 GEMM");
    }
    switch (a.type) {
      case CUDA_R_32F:
        if (dl.type != CUDA_R_32F) return unsupported("f32 operands give only an f32 D");
        break;
      case CUDA_R_16BF:
      case CUDA_R_16F:
        if (dl.type != a.type && dl.type != CUDA_R_32F) {
          return unsupported("16-bit operands give D of their type or f32");
        }
        break;
      default:
        return unsupported(std::string("operand type ") + type_name(a.type));
    }
    if (c.type != dl.type) return unsupported("C and D of different types");
    if (has_bias(d) && bias_type != dl.type) {
      return unsupported(std::string("a ") + type_name(bias_type) + " bias with a " +
                         type_name(dl.type) + " D (the bias has D's type)");
    }
  }
  for (int i = 0; i < 4; ++i) {
    const size_t es = element_size(i == 0 ? a.type : i == 1 ? b.type : i == 2 ? c.type : dl.type);
    if (align[i] < es || (align[i] & (align[i] - 1)) != 0) {
      return invalid("minimum alignment " + std::to_string(align[i]) + " below the element size");
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What an algorithm is tied to.
void signature(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
               const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
               const cublasLtMatrixLayoutOpaque& dl, uint64_t out[4]) {
  out[0] = (uint64_t{static_cast<uint32_t>(a.type)} << 48) |
           (uint64_t{static_cast<uint32_t>(b.type)} << 32) |
           (uint64_t{static_cast<uint32_t>(c.type)} << 16) | static_cast<uint32_t>(dl.type);
  out[1] = (uint64_t{static_cast<uint32_t>(d.transa)} << 48) |
           (uint64_t{static_cast<uint32_t>(d.transb)} << 40) | (uint64_t{d.epilogue} << 24) |
           (uint64_t{static_cast<uint8_t>(d.scale_mode[0])} << 20) |
           (uint64_t{static_cast<uint8_t>(d.scale_mode[1])} << 16) |
           (uint64_t{static_cast<uint8_t>(d.bias_type)} << 8) |
           static_cast<uint64_t>(d.pointer_mode);
  out[2] = a.rows * 1000003ull ^ a.cols * 998244353ull ^ b.rows * 1000000007ull ^ b.cols;
  out[3] = dl.rows * 1000003ull ^ dl.cols;
}

// [p, p + bytes) inside one live device block; `what` names the operand.
bool device_extent(const void* p, size_t bytes, const std::string& what) {
  DeviceBlock blk;
  if (classify(p, &blk) != PointerKind::kDevice) {
    warn("cublasLtMatmul: " + what + " is not device memory (" + describe(p) + ")");
    return false;
  }
  if (reinterpret_cast<uintptr_t>(p) + bytes > blk.base + blk.size) {
    warn("cublasLtMatmul: " + what + " (" + std::to_string(bytes) +
         " bytes from its start) runs past the end of its device block (" + describe(p) + ")");
    return false;
  }
  return true;
}

size_t extent(const cublasLtMatrixLayoutOpaque& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * element_size(l.type);
}

}  // namespace
}  // namespace octet::emu::detail

using namespace octet::emu::detail;  // NOLINT: this file implements their C API

namespace octet::emu::detail {
namespace {

// The arithmetic of a checked cublasLtMatmul (run at the call, or at each replay of a graph that
// captured it).
cublasStatus_t run_matmul(const cublasLtMatmulDescOpaque& desc, const Problem& p,
                          const cublasLtMatrixLayoutOpaque& ad,
                          const cublasLtMatrixLayoutOpaque& bd,
                          const cublasLtMatrixLayoutOpaque& cd,
                          const cublasLtMatrixLayoutOpaque& dd, const void* alpha, const void* beta,
                          const void* a, const void* b, const void* c, void* d) {
  const int bias_type = desc.bias_type >= 0 ? desc.bias_type : dd.type;
  const bool blocks = block_scaled(desc);
  DeviceAccess access;
  auto scalar = [&](const void* s) { return *static_cast<const float*>(s); };
  const float alpha_v = scalar(alpha), beta_v = scalar(beta);
  if (beta_v != 0.f && (c == nullptr || !device_extent(c, extent(cd), "C"))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  auto scale_of = [&](int i) { return desc.scale[i] != nullptr ? scalar(desc.scale[i]) : 1.f; };
  const float s = blocks ? alpha_v : alpha_v * scale_of(0) * scale_of(1);
  const float c_scale = scale_of(2), d_scale = scale_of(3);
  const bool ta = desc.transa == CUBLAS_OP_T, tb = desc.transb == CUBLAS_OP_T;
  const uint64_t m = p.m, n = p.n, k = p.k;
  // op(A) rows and op(B) columns as contiguous f32 runs along K.
  std::vector<float> ak(m * k), bk(n * k);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t l = 0; l < k; ++l) {
      ak[i * k + l] = load(a, ad.type, ta ? l + i * ad.ld : i + l * ad.ld);
    }
  }
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t l = 0; l < k; ++l) {
      bk[j * k + l] = load(b, bd.type, tb ? j + l * bd.ld : l + j * bd.ld);
    }
  }
  float amax = 0.f;
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      const float* x = &ak[i * k];
      const float* y = &bk[j * k];
      if (blocks) {
        // Each 128-wide K-block's f32 partial product times its two block scales, summed in f32
        // (DotGeneral of section 3.1.4.4 with the blocks of 3.1.4.5).
        const auto* sa = static_cast<const float*>(desc.scale[0]);
        const auto* sb = static_cast<const float*>(desc.scale[1]);
        for (uint64_t blk = 0; blk * kScaleBlock < k; ++blk) {
          float part = 0.f;
          const uint64_t end = std::min(k, (blk + 1) * kScaleBlock);
          for (uint64_t l = blk * kScaleBlock; l < end; ++l) part += x[l] * y[l];
          const float scale_a = sa[scale_index(desc.scale_mode[0], m, k, i, blk)];
          const float scale_b = sb[scale_index(desc.scale_mode[1], n, k, j, blk)];
          acc += part * scale_a * scale_b;
        }
      } else {
        for (uint64_t l = 0; l < k; ++l) acc += x[l] * y[l];
      }
      float v = s * acc;
      if (beta_v != 0.f) v += beta_v * (c_scale * load(c, cd.type, i + j * cd.ld));
      if (has_bias(desc)) v += load(desc.bias, static_cast<cudaDataType>(bias_type), i);
      const float av = std::fabs(v);
      if (av > amax) amax = av;  // NaN ignored
      store(d, dd.type, i + j * dd.ld, v * d_scale);
    }
  }
  if (desc.amax_d != nullptr) *static_cast<float*>(desc.amax_d) = amax;
  if (traffic_on()) {
    const auto bytes = [](uint64_t count, int type) {
      return static_cast<int64_t>(count * element_size(static_cast<cudaDataType>(type)));
    };
    int64_t read = bytes(m * k, ad.type) + bytes(n * k, bd.type);
    if (beta_v != 0.f) read += bytes(m * n, cd.type);
    if (has_bias(desc)) read += bytes(m, bias_type);
    for (int i = 0; i < 4; ++i) {
      const uint64_t count =
          blocks && i < 2 ? scale_count(desc.scale_mode[i], i == 0 ? m : n, k) : 1;
      if (desc.scale[i] != nullptr) read += static_cast<int64_t>(4 * count);
    }
    const int64_t written = bytes(m * n, dd.type) + (desc.amax_d != nullptr ? 4 : 0);
    const bool fp8 = ad.type == CUDA_R_8F_E4M3 || ad.type == CUDA_R_8F_E5M2;
    record_gemm_traffic(static_cast<int64_t>(2 * m * n * k), fp8, read, written);
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace octet::emu::detail

extern "C" {

size_t cublasLtGetVersion(void) { return cublaslt_version(); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{0x4c74};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "license error";
  }
  return "unknown status";
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasLtGetStatusString(status); }

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr || element_size(type) == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                        cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque{};
  (*desc)->compute = compute_type;
  (*desc)->scale_type = scale_type;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // The size must be the attribute's own, as the real library checks.
  auto take = [&](void* field, size_t want) {
    if (size != want) {
      warn("cublasLtMatmulDescSetAttribute(" + std::to_string(attr) + "): " + std::to_string(size) +
           " bytes given, the attribute has " + std::to_string(want));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    std::memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return take(&desc->compute, 4);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return take(&desc->scale_type, 4);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return take(&desc->pointer_mode, 4);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(&desc->transa, 4);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(&desc->transb, 4);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(&desc->epilogue, 4);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(&desc->bias, sizeof(void*));
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take(&desc->bias_type, 4);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return take(&desc->scale[0], sizeof(void*));
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return take(&desc->scale[1], sizeof(void*));
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
      return take(&desc->scale[2], sizeof(void*));
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      return take(&desc->scale[3], sizeof(void*));
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
      return take(&desc->amax_d, sizeof(void*));
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return take(&desc->fast_accum, 1);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
      return take(&desc->scale_mode[0], 4);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
      return take(&desc->scale_mode[1], 4);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto take = [&](void* field, size_t want) {
    if (size != want) {
      warn("cublasLtMatmulPreferenceSetAttribute(" + std::to_string(attr) + "): " +
           std::to_string(size) + " bytes given, the attribute has " + std::to_string(want));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    std::memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return take(&pref->max_workspace, 8);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return take(&pref->align[0], 4);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return take(&pref->align[1], 4);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return take(&pref->align[2], 4);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return take(&pref->align[3], 4);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (handle == nullptr || desc == nullptr || a_desc == nullptr || b_desc == nullptr ||
      c_desc == nullptr || d_desc == nullptr || pref == nullptr || requested < 1 ||
      returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  Problem p;
  std::string why;
  const cublasStatus_t s = check(*desc, *a_desc, *b_desc, *c_desc, *d_desc, pref->align, &p, &why);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (options().verbose) warn("cublasLtMatmulAlgoGetHeuristic declines: " + why);
    return s;
  }
  // The bias pointer's own alignment is read here (the real heuristic does too).
  if (has_bias(*desc) && desc->bias != nullptr) {
    const auto addr = reinterpret_cast<uintptr_t>(desc->bias);
    const size_t bias_es = element_size(
        static_cast<cudaDataType>(desc->bias_type >= 0 ? desc->bias_type : d_desc->type));
    if (addr % bias_es != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  cublasLtMatmulHeuristicResult_t& r = results[0];
  r = cublasLtMatmulHeuristicResult_t{};
  r.algo.data[0] = kAlgoMagic;
  signature(*desc, *a_desc, *b_desc, *c_desc, *d_desc, &r.algo.data[1]);
  r.algo.data[5] = (uint64_t{pref->align[0]} << 32) | pref->align[1];
  r.algo.data[6] = (uint64_t{pref->align[2]} << 32) | pref->align[3];
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr || desc == nullptr || a_desc == nullptr || b_desc == nullptr ||
      c_desc == nullptr || d_desc == nullptr || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const auto& ad = *a_desc;
  const auto& bd = *b_desc;
  const auto& cd = *c_desc;
  const auto& dd = *d_desc;
  uint32_t align[4] = {256, 256, 256, 256};
  if (algo != nullptr) {
    if (algo->data[0] != kAlgoMagic) {
      warn("cublasLtMatmul: the algorithm does not come from cublasLtMatmulAlgoGetHeuristic");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    uint64_t sig[4];
    signature(*desc, ad, bd, cd, dd, sig);
    if (std::memcmp(sig, &algo->data[1], sizeof(sig)) != 0) {
      warn(
          "cublasLtMatmul: the algorithm was found for another problem (shape, types, "
          "transposes, epilogue or pointer mode differ): a stale cached plan");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    align[0] = static_cast<uint32_t>(algo->data[5] >> 32);
    align[1] = static_cast<uint32_t>(algo->data[5]);
    align[2] = static_cast<uint32_t>(algo->data[6] >> 32);
    align[3] = static_cast<uint32_t>(algo->data[6]);
  }
  Problem p;
  std::string why;
  if (const cublasStatus_t s = check(*desc, ad, bd, cd, dd, align, &p, &why)) return s;
  if (const cudaError_t e = check_stream(stream, "cublasLtMatmul")) {
    (void)e;
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The alignments the algorithm was chosen for must hold for these pointers.
  const void* ptrs[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    if (ptrs[i] != nullptr && reinterpret_cast<uintptr_t>(ptrs[i]) % align[i] != 0) {
      warn("cublasLtMatmul: operand " + std::string("ABCD").substr(i, 1) + " at " +
           describe(ptrs[i]) + " is not aligned to the " + std::to_string(align[i]) +
           " bytes its algorithm was chosen for (a misaligned access on a GPU)");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  const bool device_mode = desc->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  for (const void* s : {alpha, beta}) {
    const bool on_device = classify(s) != PointerKind::kHost;
    if (on_device != device_mode) {
      warn(std::string("cublasLtMatmul: alpha/beta at ") + describe(s) +
           " but the pointer mode is " + (device_mode ? "DEVICE" : "HOST"));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (device_mode && !device_extent(s, 4, "alpha/beta")) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!device_extent(a, extent(ad), "A") || !device_extent(b, extent(bd), "B") ||
      !device_extent(d, extent(dd), "D")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (workspace != nullptr && workspace_bytes > 0 &&
      !device_extent(workspace, workspace_bytes, "the workspace")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const char* scale_names[4] = {"A scale", "B scale", "C scale", "D scale"};
  const bool blocks = block_scaled(*desc);
  for (int i = 0; i < 4; ++i) {
    // Block scales: the whole tensor of section 3.1.4.5.1, from a 16-byte aligned start.
    const uint64_t count =
        blocks && i < 2 ? scale_count(desc->scale_mode[i], i == 0 ? p.m : p.n, p.k) : 1;
    if (blocks && i < 2) {
      if (desc->scale[i] == nullptr) {
        warn(std::string("cublasLtMatmul: block scaling without the ") + scale_names[i] +
             " pointer");
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      if (reinterpret_cast<uintptr_t>(desc->scale[i]) % 16 != 0) {
        warn(std::string("cublasLtMatmul: the ") + scale_names[i] + " tensor at " +
             describe(desc->scale[i]) + " is not 16-byte aligned");
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    }
    if (desc->scale[i] != nullptr && !device_extent(desc->scale[i], 4 * count, scale_names[i])) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (desc->amax_d != nullptr && !device_extent(desc->amax_d, 4, "the D amax")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int bias_type = desc->bias_type >= 0 ? desc->bias_type : dd.type;
  if (has_bias(*desc)) {
    if (desc->bias == nullptr) {
      warn("cublasLtMatmul: BIAS epilogue without a bias pointer");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!device_extent(desc->bias, p.m * element_size(static_cast<cudaDataType>(bias_type)),
                       "the bias")) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }

  if (capturing(stream)) {
    // Host-mode alpha and beta are read now, as CUDA records them; device-mode ones at replay.
    float scalars[2] = {0.f, 0.f};
    if (!device_mode) {
      scalars[0] = *static_cast<const float*>(alpha);
      scalars[1] = *static_cast<const float*>(beta);
    }
    auto node = [desc = *desc, p, ad, bd, cd, dd, device_mode, scalars, alpha, beta, a, b, c,
                 d]() mutable {
      if (run_matmul(desc, p, ad, bd, cd, dd, device_mode ? alpha : &scalars[0],
                     device_mode ? beta : &scalars[1], a, b, c, d) != CUBLAS_STATUS_SUCCESS) {
        fatal("a cublasLtMatmul captured into a graph failed at its replay");
      }
    };
    capture(stream, "cublasLtMatmul", std::move(node));
    return CUBLAS_STATUS_SUCCESS;
  }
  return run_matmul(*desc, p, ad, bd, cd, dd, alpha, beta, a, b, c, d);
}

}  // extern "C"
