// GEMM on the GPU through cuBLASLt. Octet's row-major out (M, N) = op(a) · op(b) is cuBLASLt's
// column-major outᵀ (N, M) = op(b)ᵀ · op(a)ᵀ, so cuBLASLt's A is octet's b and its B is octet's
// a. A plan (descriptors plus the heuristic's algorithm) is built once per shape and cached.
// The bias and an FP8 out (scaled cast, amax) run in cuBLASLt where it computes them as the CPU
// does, else in own kernels on an f32 result; the GELU epilogue always runs in an own kernel.
// The own kernels and their launchers are in gemm_kernels.cu. Blockwise FP8 operands (1x128 /
// 128x128 f32 block scales) use the same plans with cuBLASLt's block scale modes on Hopper
// (gemm_block_scaled).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm_kernels.h"
#include "runtime/log_plain.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

// NVIDIA's recommendation for Hopper; smaller buffers rule out some split-K algorithms.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// ---- plans ----

// The accumulation an FP8 GEMM asks of cuBLASLt, part of its plan: fast FP8 accumulation for the
// forward GEMM (GemmOptions::fp8_accumulation kFast), split accumulation for dgrad, wgrad and
// everything else (TE's defaults).
enum class GemmRole : uint8_t { kGeneric, kFprop };

// How an octet operand reaches cuBLASLt.
enum class OperandPath : uint8_t {
  kAsIs,
  kTransposed,  // FP8 bytes transposed into a workspace so that the GEMM is TN
  kToBf16,      // FP8 converted exactly to bf16 (e5m2 x e5m2, or no FP8 algorithm)
};

enum class BiasPath : uint8_t {
  kNone,
  kEpilogue,         // cuBLASLt's bias epilogue reads the bias as given
  kEpilogueF32Copy,  // the epilogue reads an exact f32 copy of a bf16 bias
  kKernel,           // an own kernel adds it (f32 out) or finish_kernel does (staged out)
};

struct Config {
  OperandPath a = OperandPath::kAsIs;
  OperandPath b = OperandPath::kAsIs;
  bool fp8 = false;             // cuBLASLt reads FP8: scale pointers and fast-accumulation flag
  bool device_scalars = false;  // alpha/beta in device memory (FP8 scales folded into alpha)
  // D is an f32 workspace; finish_kernel writes out, or, for an FP8 out, epilogue_kernel
  // finishes the f32 values in place and quantize_fp8 casts them.
  bool staged = false;
  bool fp8_out = false;       // cuBLASLt writes the FP8 out itself: D scale and amax pointers
  bool block_scaled = false;  // the scale pointers are block-scale tensors (gemm_block_scaled)
  BiasPath bias = BiasPath::kNone;
  bool operator==(const Config&) const = default;
};

// Largest power of two up to 256 dividing the address (cuBLASLt's alignment classes).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  DType a_dtype, b_dtype, out_dtype, bias_dtype;
  bool has_bias;
  ops::Epilogue epilogue;
  ops::Transpose ta, tb;
  ops::Accumulate accumulate;
  GemmRole role;
  uint32_t align_a, align_b, align_out, align_bias;
  BlockScaling a_blocks, b_blocks;  // block-scaled calls only (else both k1D, unused)
  bool block_scaled;
  bool device_alpha;  // alpha_scale given: alpha in device memory
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  Config config;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt's A: octet's b
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt's B: octet's a
  cublasLtMatrixLayout_t layout_d = nullptr;  // D (and C): out, or the staging buffer
  cublasLtMatrixLayout_t layout_c = nullptr;  // only beside an FP8 D: a bf16 C, never read
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // statuses ignored: nothing useful to do with a failed destroy
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (layout_c != nullptr) cublasLtMatrixLayoutDestroy(layout_c);
    if (layout_d != nullptr) cublasLtMatrixLayoutDestroy(layout_d);
    if (layout_b != nullptr) cublasLtMatrixLayoutDestroy(layout_b);
    if (layout_a != nullptr) cublasLtMatrixLayoutDestroy(layout_a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;  // (32 MiB,) u8 under MemTag::kWorkspace; undefined after release_workspace()
};

// Guards the states, the plans, and each plan's descriptor while a call sets its pointers.
std::mutex& gemm_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed: handles and descriptors must not be torn down after the driver at exit.
std::map<int, DeviceState>& device_states() {
  static auto* states = new std::map<int, DeviceState>();
  return *states;
}
std::map<PlanKey, std::unique_ptr<Plan>>& plan_cache() {
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();
  return *plans;
}

// Caller holds gemm_mutex().
DeviceState& device_state(Device device) {
  DeviceState& state = device_states()[device.index];
  if (state.handle == nullptr) OCTET_CUBLAS_CHECK(cublasLtCreate(&state.handle));
  if (!state.workspace.defined()) {
    MemTagScope tag(MemTag::kWorkspace);
    state.workspace = Tensor::empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::kU8, device);
  }
  return state;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kE4M3:
      return CUDA_R_8F_E4M3;
    case DType::kE5M2:
      return CUDA_R_8F_E5M2;
    default:
      OCTET_FAIL("gemm: no cuBLASLt type for dtype ", dtype);
  }
}

// One call's operands, as given.
struct Call {
  const Tensor& a;
  ops::Transpose ta;
  const Tensor& b;
  ops::Transpose tb;
  Tensor& out;
  int64_t m, n, k;
  float alpha;
  bool keep;
  const Tensor* bias;
  const Tensor* a_scale_inv;
  const Tensor* b_scale_inv;
  const Tensor* alpha_scale;  // high-precision operands only; may be null
  GemmRole role;
  bool gelu;
  const Tensor* out_scale;  // FP8 out only
  Tensor* out_amax;         // FP8 out only; may be null
  cudaStream_t stream;
  DeviceState* state;
  // gemm_block_scaled: the scale_inv tensors are octet's block-scale layouts.
  bool block_scaled = false;
  BlockScaling a_blocks = BlockScaling::k1D, b_blocks = BlockScaling::k1D;
};

// The configurations to try, best first: FP8 on its tensor cores (TN, operands transposed when
// they come in another layout), then FP8 through exact bf16 copies; the bias through the
// epilogue where cuBLASLt takes its dtype without rounding it, else through an own kernel; an FP8
// out written by cuBLASLt where it can (FP8 operands on the tensor cores), else cast from an f32
// staging buffer.
//
// GELU always runs in own kernels on the f32 result, not in cuBLASLt's GELU epilogue: cuBLASLt
// documents only "GELU" (the tanh form, by what PyTorch matches it against), not how it evaluates
// tanh. With the hardware tanh.approx.f32 that CUTLASS's GELU epilogue uses (~2^-11 error), it
// would differ from kernels/math/activation.h by far more than f32 rounding, and by many bf16
// steps in the negative tail where GELU is near zero.
std::vector<Config> candidates(const Call& call) {
  const bool fp8 = is_fp8(call.a.dtype());
  const DType out_dtype = call.out.dtype();
  const bool out_f32 = out_dtype == DType::kF32, out_fp8 = is_fp8(out_dtype);
  std::vector<Config> list;
  auto push = [&](const Config& config) {  // once each: a configuration that failed fails again
    for (const Config& seen : list) {
      if (seen == config) return;
    }
    list.push_back(config);
  };
  auto add = [&](Config base, DType operand_dtype) {
    // A non-f32 out is staged when cuBLASLt cannot produce it with the one rounding the CPU
    // applies: f32 operands only produce f32 (cuBLASLt's f32 x f32 row); GELU comes before the
    // rounding to bf16 or FP8; an FP8 out cuBLASLt does not write is cast from f32.
    if (!out_f32 && (operand_dtype == DType::kF32 || call.gelu || (out_fp8 && !base.fp8_out))) {
      base.staged = true;
      base.fp8_out = false;
    }
    if (call.bias == nullptr) {
      push(base);
      return;
    }
    if (!base.staged) {
      // Bias dtype rule: FP8 inputs take a bf16 bias for bf16, f32 and FP8 outputs; otherwise the
      // bias has out's dtype.
      const DType epilogue = is_fp8(operand_dtype) ? DType::kBF16 : out_dtype;
      Config with = base;
      if (call.bias->dtype() == epilogue) {
        with.bias = BiasPath::kEpilogue;
        push(with);
      } else if (epilogue == DType::kF32 && call.bias->dtype() == DType::kBF16) {
        with.bias = BiasPath::kEpilogueF32Copy;
        push(with);
      }
      // Otherwise rounding the bias to the epilogue's dtype would change the result.
    }
    Config own = base;
    own.bias = BiasPath::kKernel;
    if (!out_f32) {  // bias added before the one rounding to bf16 or FP8
      own.staged = true;
      own.fp8_out = false;
    }
    push(own);
  };
  if (!fp8) {
    Config base;
    base.device_scalars = call.alpha_scale != nullptr;
    add(base, call.a.dtype());
    return list;
  }
  if (call.block_scaled) {
    // Only cuBLASLt's block-scaled FP8 kernels read the scale tensors; the caller falls back to
    // its own expansion when they decline. No FP8 out with these modes (section 3.1.4.5).
    Config native;
    native.fp8 = native.block_scaled = true;
    native.a = call.ta == ops::Transpose::kYes ? OperandPath::kTransposed : OperandPath::kAsIs;
    native.b = call.tb == ops::Transpose::kNo ? OperandPath::kTransposed : OperandPath::kAsIs;
    add(native, call.a.dtype());
    return list;
  }
  const bool both_e5m2 = call.a.dtype() == DType::kE5M2 && call.b.dtype() == DType::kE5M2;
  if (!both_e5m2) {  // cuBLASLt has no e5m2 x e5m2 kernel
    Config native;
    native.fp8 = true;
    // TN in cuBLASLt's terms: octet's b read along K (tb = kYes), octet's a too (ta = kNo).
    native.a = call.ta == ops::Transpose::kYes ? OperandPath::kTransposed : OperandPath::kAsIs;
    native.b = call.tb == ops::Transpose::kNo ? OperandPath::kTransposed : OperandPath::kAsIs;
    if (out_fp8) {
      Config direct = native;
      direct.fp8_out = true;
      add(direct, call.a.dtype());
    }
    add(native, call.a.dtype());
  }
  Config bf16;
  bf16.a = bf16.b = OperandPath::kToBf16;
  bf16.device_scalars = true;
  add(bf16, DType::kBF16);
  return list;
}

PlanKey key_of(const Call& call) {
  PlanKey key{};
  key.device = call.out.device().index;
  key.m = call.m;
  key.n = call.n;
  key.k = call.k;
  key.a_dtype = call.a.dtype();
  key.b_dtype = call.b.dtype();
  key.out_dtype = call.out.dtype();
  key.has_bias = call.bias != nullptr;
  key.bias_dtype = key.has_bias ? call.bias->dtype() : DType::kF32;
  key.epilogue = call.gelu ? ops::Epilogue::kGelu : ops::Epilogue::kNone;
  key.ta = call.ta;
  key.tb = call.tb;
  key.accumulate = call.keep ? ops::Accumulate::kYes : ops::Accumulate::kNo;
  key.role = call.role;
  key.align_a = alignment_of(call.a.data());
  key.align_b = alignment_of(call.b.data());
  key.align_out = alignment_of(call.out.data());
  key.align_bias = key.has_bias ? alignment_of(call.bias->data()) : 256;
  key.block_scaled = call.block_scaled;
  key.device_alpha = call.alpha_scale != nullptr;
  key.a_blocks = call.a_blocks;
  key.b_blocks = call.b_blocks;
  return key;
}

#define OCTET_SET_DESC(desc, attribute, value) \
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &(value), sizeof(value)))
#define OCTET_SET_PREF(pref, attribute, value) \
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &(value), sizeof(value)))

// The operand as cuBLASLt sees it: transposes and leading dimension after the path's copy.
struct LtOperand {
  DType dtype;
  bool transposed;  // in octet's row-major sense
  int64_t ld;
};

LtOperand lt_operand(const Tensor& t, ops::Transpose trans, OperandPath path, int64_t k) {
  switch (path) {
    case OperandPath::kAsIs:
      return {t.dtype(), trans == ops::Transpose::kYes, t.cols()};
    case OperandPath::kTransposed:  // now stored with K innermost
      return {t.dtype(), trans != ops::Transpose::kYes, k};
    case OperandPath::kToBf16:
      return {DType::kBF16, trans == ops::Transpose::kYes, t.cols()};
  }
  OCTET_FAIL("gemm: bad operand path");
}

// Descriptors and the heuristic's algorithm for `config`; null (and `status` set) when cuBLASLt
// has no algorithm for it.
std::unique_ptr<Plan> build_plan(const Call& call, const Config& config, cublasStatus_t* status) {
  auto plan = std::make_unique<Plan>();
  plan->config = config;
  const LtOperand a = lt_operand(call.a, call.ta, config.a, call.k);
  const LtOperand b = lt_operand(call.b, call.tb, config.b, call.k);
  const uint64_t m = static_cast<uint64_t>(call.m), n = static_cast<uint64_t>(call.n),
                 k = static_cast<uint64_t>(call.k);
  // cuBLASLt's A = op(b)ᵀ (N, K): octet's b stored (K, N) reads as column-major (N, K) with no
  // transpose; stored (N, K) (b transposed) it is column-major (K, N), transposed.
  const cublasOperation_t transa = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_a, cuda_type(b.dtype),
                                                b.transposed ? k : n, b.transposed ? n : k, b.ld));
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_b, cuda_type(a.dtype),
                                                a.transposed ? m : k, a.transposed ? k : m, a.ld));
  const DType d_dtype = config.staged ? DType::kF32 : call.out.dtype();
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_d, cuda_type(d_dtype), n, m,
                                                static_cast<int64_t>(n)));
  if (config.fp8_out) {
    // cuBLASLt's FP8 D rows take a bf16 C (the bias's type); with beta = 0 C is never read.
    OCTET_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&plan->layout_c, CUDA_R_16BF, n, m, static_cast<int64_t>(n)));
  }

  // f32 GEMMs stay exact f32 (no TF32): the CPU reference is f32.
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
  OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
  if (config.device_scalars) {
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, mode);
  }
  if (config.block_scaled) {
#if CUBLAS_VERSION >= 120900
    // cuBLASLt's A is octet's b: its scale mode is b's blocks.
    auto mode_of = [](BlockScaling blocks) -> int32_t {
      return blocks == BlockScaling::k2D ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                         : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    };
    const int32_t a_mode = mode_of(call.b_blocks), b_mode = mode_of(call.a_blocks);
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
#else
    OCTET_FAIL("gemm: block scale modes need cuBLAS 12.9 or newer at build time");
#endif
  }
  if (config.fp8) {
    // Fast accumulation in the forward pass, split (promoted) accumulation for gradients; block
    // scales are applied per 128-wide K-block, so block-scaled GEMMs never ask for it.
    const int8_t fast = call.role == GemmRole::kFprop && !config.block_scaled ? 1 : 0;
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast);
    const void* a_scale = call.b_scale_inv->data();  // cuBLASLt's A is octet's b
    const void* b_scale = call.a_scale_inv->data();
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
  }
  if (config.fp8_out) {
    // D = fp8(d_scale * v), amax = max |v| before the D scale (cuBLASLt's FP8 definition), the
    // quantize_fp8 contract. The amax pointer here only tells the heuristic that one is wanted;
    // each run sets a fresh one.
    const void* d_scale = call.out_scale->data();
    const void* amax = call.state->workspace.data();
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale);
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax);
  }
  if (config.bias == BiasPath::kEpilogue || config.bias == BiasPath::kEpilogueF32Copy) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    const bool copy = config.bias == BiasPath::kEpilogueF32Copy;
    const cudaDataType_t bias_type = cuda_type(copy ? DType::kF32 : call.bias->dtype());
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    // The heuristic reads the pointer's alignment only; the copy will be a fresh allocation,
    // 256-byte aligned like the workspace that stands in for it here.
    const void* bias_ptr = copy ? call.state->workspace.data() : call.bias->data();
    OCTET_SET_DESC(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
  }

  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&plan->preference));
  const uint64_t workspace_bytes = kWorkspaceBytes;
  OCTET_SET_PREF(plan->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  // Copies made here are fresh allocations (256-byte aligned); given operands may be slices.
  const uint32_t align_a = config.b == OperandPath::kAsIs ? alignment_of(call.b.data()) : 256;
  const uint32_t align_b = config.a == OperandPath::kAsIs ? alignment_of(call.a.data()) : 256;
  const uint32_t align_d = config.staged ? 256 : alignment_of(call.out.data());
  OCTET_SET_PREF(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
  OCTET_SET_PREF(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
  const uint32_t align_c = config.fp8_out ? 256 : align_d;  // C null: never read
  OCTET_SET_PREF(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
  OCTET_SET_PREF(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);

  int found = 0;
  const cublasLtMatrixLayout_t layout_c = config.fp8_out ? plan->layout_c : plan->layout_d;
  *status = cublasLtMatmulAlgoGetHeuristic(call.state->handle, plan->desc, plan->layout_a,
                                           plan->layout_b, layout_c, plan->layout_d,
                                           plan->preference, 1, &plan->heuristic, &found);
  if (*status == CUBLAS_STATUS_SUCCESS &&
      (found < 1 || plan->heuristic.state != CUBLAS_STATUS_SUCCESS)) {
    *status = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (*status != CUBLAS_STATUS_SUCCESS) return nullptr;
  return plan;
}

Tensor workspace_tensor(const Shape& shape, DType dtype, Device device) {
  MemTagScope tag(MemTag::kWorkspace);
  return Tensor::empty(shape, dtype, device);
}

// The operand's device pointer after its path's copy (enqueued on the stream); `holder` keeps
// the copy alive until the call returns (the stream orders its reuse after the GEMM).
const void* prepare_operand(const Call& call, const Tensor& t, OperandPath path, Tensor& holder) {
  switch (path) {
    case OperandPath::kAsIs:
      return t.data();
    case OperandPath::kTransposed: {
      const int64_t rows = t.rows(), cols = t.cols();
      holder = workspace_tensor({cols, rows}, t.dtype(), t.device());
      detail::launch_transpose_bytes(static_cast<const uint8_t*>(t.data()),
                                     holder.data_as<uint8_t>(), rows, cols, call.stream);
      return holder.data();
    }
    case OperandPath::kToBf16: {
      holder = workspace_tensor(t.shape(), DType::kBF16, t.device());
      detail::launch_to_bf16(t.data(), t.dtype(), holder.data_as<uint16_t>(), t.numel(),
                             call.stream);
      return holder.data();
    }
  }
  OCTET_FAIL("gemm: bad operand path");
}

// Enqueues the plan's copies, the GEMM and the kernels after it. Returns cublasLtMatmul's
// status; `out` is untouched unless it is CUBLAS_STATUS_SUCCESS.
cublasStatus_t run_plan(const Call& call, Plan& plan) {
  const Config& config = plan.config;
  Tensor a_copy, b_copy, bias_copy, staged, scalars, amax;
  const void* a_ptr = prepare_operand(call, call.a, config.a, a_copy);
  const void* b_ptr = prepare_operand(call, call.b, config.b, b_copy);
  const Device device = call.out.device();
  if (config.fp8) {
    const void* a_scale = call.b_scale_inv->data();
    const void* b_scale = call.a_scale_inv->data();
    OCTET_SET_DESC(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    OCTET_SET_DESC(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
  }
  if (config.bias == BiasPath::kEpilogue || config.bias == BiasPath::kEpilogueF32Copy) {
    const void* bias_ptr = call.bias->data();
    if (config.bias == BiasPath::kEpilogueF32Copy) {
      bias_copy = workspace_tensor({call.n}, DType::kF32, device);
      detail::launch_to_f32(call.bias->data(), call.bias->dtype(), bias_copy.data_as<float>(),
                            call.n, call.stream);
      bias_ptr = bias_copy.data();
    }
    OCTET_SET_DESC(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
  }
  if (config.fp8_out) {
    // cuBLASLt's amax lands in its own float, zeroed first in case a kernel max-reduces into it;
    // max_into_kernel merges it into out_amax afterwards.
    amax = workspace_tensor({1}, DType::kF32, device);
    OCTET_CUDA_CHECK(cudaMemsetAsync(amax.data(), 0, sizeof(float), call.stream));
    const void* d_scale = call.out_scale->data();
    const void* amax_ptr = amax.data();
    OCTET_SET_DESC(plan.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale);
    OCTET_SET_DESC(plan.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_ptr);
  }
  void* d_ptr = call.out.data();
  if (config.staged) {
    staged = workspace_tensor({call.m, call.n}, DType::kF32, device);
    d_ptr = staged.data();
  }
  // Staged output: the product alone; finish_kernel adds out's old contents.
  const float beta = call.keep && !config.staged ? 1.f : 0.f;
  const void* alpha_ptr = &call.alpha;
  const void* beta_ptr = &beta;
  if (config.device_scalars) {
    scalars = workspace_tensor({2}, DType::kF32, device);
    // FP8 operands: their two scales; high-precision ones: alpha_scale alone.
    const bool scaled = call.alpha_scale != nullptr;
    detail::launch_scalars(call.alpha,
                           (scaled ? call.alpha_scale : call.a_scale_inv)->data_as<float>(),
                           scaled ? nullptr : call.b_scale_inv->data_as<float>(), beta,
                           scalars.data_as<float>(), call.stream);
    alpha_ptr = scalars.data_as<float>();
    beta_ptr = scalars.data_as<float>() + 1;
  }
  // C is D (read only when beta = 1), or, beside an FP8 D, a null bf16 C (beta = 0).
  const void* c_ptr = config.fp8_out ? nullptr : d_ptr;
  const cublasLtMatrixLayout_t layout_c = config.fp8_out ? plan.layout_c : plan.layout_d;
  const cublasStatus_t status = cublasLtMatmul(
      call.state->handle, plan.desc, alpha_ptr, b_ptr, plan.layout_a, a_ptr, plan.layout_b,
      beta_ptr, c_ptr, layout_c, d_ptr, plan.layout_d, &plan.heuristic.algo,
      call.state->workspace.data(), kWorkspaceBytes, call.stream);
  if (status != CUBLAS_STATUS_SUCCESS) return status;

  const int64_t total = call.m * call.n;
  const bool own_bias = config.bias == BiasPath::kKernel;
  const void* bias_ptr = own_bias ? call.bias->data() : nullptr;
  const DType bias_dtype = own_bias ? call.bias->dtype() : DType::kF32;
  if (config.staged && is_fp8(call.out.dtype())) {
    if (own_bias || call.gelu) {
      detail::launch_epilogue(staged.data_as<float>(), bias_ptr, bias_dtype, call.gelu, call.n,
                              total, call.stream);
    }
    ops::detail::cuda_backend().quantize_fp8(staged, *call.out_scale, &call.out, nullptr,
                                             call.out_amax, nullptr, nullptr);
  } else if (config.staged) {
    detail::launch_finish(staged.data_as<float>(), call.out.data(), call.out.dtype(), call.keep,
                          bias_ptr, bias_dtype, call.gelu, call.n, total, call.stream);
  } else if (own_bias || call.gelu) {  // f32 out, written by cuBLASLt
    detail::launch_epilogue(call.out.data_as<float>(), bias_ptr, bias_dtype, call.gelu, call.n,
                            total, call.stream);
  }
  if (config.fp8_out && call.out_amax != nullptr) {
    detail::launch_max_into(amax.data_as<float>(), call.out_amax->data_as<float>(), call.stream);
  }
  return status;
}

}  // namespace

namespace {

std::string dtype_text(DType d) { return std::string(dtype_name(d)); }

// The path a plan takes, in words, for the log line of each new shape.
std::string path_text(const Config& config, bool fp8_operands) {
  std::string text;
  if (config.fp8) {
    text = "native FP8";
  } else if (fp8_operands) {
    text = "FP8 operands as exact bf16 copies on bf16 tensor cores";
  } else {
    text = "cuBLASLt as given";
  }
  if (config.a == OperandPath::kTransposed || config.b == OperandPath::kTransposed) {
    text += ", an operand transposed into a workspace";
  }
  if (config.staged) text += ", f32 staging";
  if (config.fp8_out) text += ", FP8 out from cuBLASLt";
  return text;
}

// Logs the configuration a new shape settled on: info for the expected path, a warning when FP8
// operands fell back to bf16 (it is much slower than FP8, and was silent before).
void log_choice(const Call& call, const Config& config, cublasStatus_t declined) {
  const bool fp8_operands = is_fp8(call.a.dtype());
  const std::string text = "cuBLASLt GEMM M=" + std::to_string(call.m) +
                           " N=" + std::to_string(call.n) + " K=" + std::to_string(call.k) + " " +
                           dtype_text(call.a.dtype()) + " x " + dtype_text(call.b.dtype()) +
                           " -> " + dtype_text(call.out.dtype()) + ": " +
                           path_text(config, fp8_operands);
  if (fp8_operands && !config.fp8) {
    log_warning_message(text + " (native FP8 declined: " + cublasLtGetStatusString(declined) + ")");
  } else {
    log_info_message(text);
  }
}

}  // namespace

std::vector<GemmChoice> gemm_choices() {
  std::lock_guard lock(gemm_mutex());
  std::vector<GemmChoice> out;
  for (const auto& [key, plan] : plan_cache()) {
    if (plan == nullptr) continue;
    out.push_back({key.device, key.m, key.n, key.k, key.a_dtype, key.b_dtype, key.out_dtype,
                   plan->config.fp8, is_fp8(key.a_dtype) && !plan->config.fp8});
  }
  return out;
}

// out (M, N) = epilogue(alpha * op(a) · op(b) * a_scale_inv[0] * b_scale_inv[0] [+ out] [+ bias]).
// An FP8 out (accumulate kNo) gets fp8(value * out_scale[0]), and max |value| max-accumulated into
// out_amax[0] when not null. alpha_scale (non-FP8 operands only; may be null) is read by the device
// (cuBLASLt's device pointer mode), not copied back.
void CudaBackend::gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb,
                       Tensor& out, const ops::GemmOptions& options) const {
  const float alpha = options.alpha;
  const ops::Accumulate accumulate = options.accumulate;
  const Tensor* bias = options.bias;
  const Tensor* a_scale_inv = options.a_scale_inv;
  const Tensor* b_scale_inv = options.b_scale_inv;
  const Tensor* alpha_scale = options.alpha_scale;
  const ops::Epilogue epilogue = options.epilogue;
  const Tensor* out_scale = options.out_scale;
  Tensor* out_amax = options.out_amax;
  // Fast FP8 accumulation is the forward GEMM's; everything else accumulates split.
  const GemmRole role = options.fp8_accumulation == ops::FP8Accumulation::kFast
                            ? GemmRole::kFprop
                            : GemmRole::kGeneric;
  const bool a_trans = ta == ops::Transpose::kYes, b_trans = tb == ops::Transpose::kYes;
  const int64_t m = a_trans ? a.cols() : a.rows();
  const int64_t k = a_trans ? a.rows() : a.cols();
  const int64_t n = b_trans ? b.rows() : b.cols();
  if (m == 0 || n == 0) return;
  const bool keep = accumulate == ops::Accumulate::kYes;
  const bool gelu = epilogue == ops::Epilogue::kGelu;
  const bool out_fp8 = is_fp8(out.dtype());
  OCTET_ASSERT(out_fp8 == (out_scale != nullptr), "an FP8 GEMM output and out_scale come together");
  OCTET_ASSERT(!(keep && (gelu || out_fp8)), "GEMM accumulating into a GELU or FP8 output");
  DeviceGuard guard(out.device());
  const cudaStream_t stream = stream_of(out);
  if (k == 0) {     // an empty product: out = epilogue((keep ? out : 0) + bias)
    Tensor staged;  // (M, N) f32 for an FP8 out, cast below
    if (out_fp8) staged = workspace_tensor({m, n}, DType::kF32, out.device());
    detail::launch_finish(nullptr, out_fp8 ? staged.data() : out.data(),
                          out_fp8 ? DType::kF32 : out.dtype(), keep,
                          bias != nullptr ? bias->data() : nullptr,
                          bias != nullptr ? bias->dtype() : DType::kF32, gelu, n, m * n, stream);
    if (out_fp8) quantize_fp8(staged, *out_scale, &out, nullptr, out_amax, nullptr, nullptr);
    return;
  }
  if (is_fp8(a.dtype())) {
    OCTET_ASSERT(a_scale_inv != nullptr && b_scale_inv != nullptr,
                 "FP8 GEMM without scale_inv tensors");
  }

  std::lock_guard lock(gemm_mutex());
  DeviceState& state = device_state(out.device());
  const Call call{a,    ta,    b,         tb,       out,         m,           n,
                  k,    alpha, keep,      bias,     a_scale_inv, b_scale_inv, alpha_scale,
                  role, gelu,  out_scale, out_amax, stream,      &state};
  const PlanKey key = key_of(call);
  auto& cache = plan_cache();
  if (auto it = cache.find(key); it != cache.end()) {
    OCTET_ASSERT(it->second != nullptr, "a declined plan is cached only for block-scaled keys");
    const cublasStatus_t status = run_plan(call, *it->second);
    OCTET_CHECK(status == CUBLAS_STATUS_SUCCESS,
                "cublasLtMatmul failed: ", cublasLtGetStatusString(status), " (status ",
                static_cast<int>(status), ") for M=", m, " N=", n, " K=", k, ", a ", a.dtype(),
                ", b ", b.dtype(), ", out ", out.dtype());
    return;
  }
  // First call of this shape: the first configuration that cuBLASLt both plans and runs wins.
  // A failed run enqueued only copies into workspaces, never a write to `out`.
  cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
  for (const Config& config : candidates(call)) {
    std::unique_ptr<Plan> plan = build_plan(call, config, &last);
    if (plan == nullptr) continue;
    const cublasStatus_t before = last;
    last = run_plan(call, *plan);
    if (last != CUBLAS_STATUS_SUCCESS) continue;
    log_choice(call, config, before);
    cache.emplace(key, std::move(plan));
    return;
  }
  OCTET_FAIL("gemm: cuBLASLt has no algorithm for M=", m, " N=", n, " K=", k, ", a ", a.dtype(),
             a_trans ? " transposed" : "", ", b ", b.dtype(), b_trans ? " transposed" : "",
             ", out ", out.dtype(), bias != nullptr ? ", with bias" : "",
             gelu ? ", GELU epilogue" : "", " (last status: ", cublasLtGetStatusString(last), ")");
}

// ---- block-scaled FP8 (blockwise recipe) ----
//
// What cuBLAS's documentation (cuBLAS 13 "cuBLASLt API") says about the two modes, and what
// follows for octet:
// - 3.1.4 "Narrow Precision Data Types Usage", table "Scaling Mode Support Overview":
//   128-element 1D block scaling (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) and 128x128 2D block
//   scaling (BLK128x128_32F) are listed for compute capability 9.0 only, for E4M3/E5M2 tensors
//   with CUDA_R_32F scales (Blackwell's block modes are the 32- and 16-element ones, 10.0+).
//   They came with cuBLAS 12.9 (the header's enum values 4 and 5). So: sm_90 and
//   cublasLtGetVersion() >= 120900, else the expansion fallback (blockwise.cu).
// - 3.1.4.5 "128-element 1D and 128x128 2D Block Scaling For FP8 Data Types": set A_SCALE_MODE /
//   B_SCALE_MODE, leave the other modes alone; A/B combinations VEC128 x VEC128, VEC128 x BLK,
//   BLK x VEC128 are supported, BLK x BLK is not; D is CUDA_R_16F, CUDA_R_16BF or CUDA_R_32F only
//   (no FP8 D, no D scale, no amax). Each K-block's product is scaled by the two block scales
//   (DotGeneral, 3.1.4.4), then alpha and beta * C as for the other modes.
// - 3.1.4.5.1 "Scaling factors layouts": scale starts 16-byte aligned; M and N multiples of 4;
//   VEC128: A's scales M-major, M x ceil(K/128) (B's N-major, N x ceil(K/128)); BLK128x128:
//   K-major, ceil(K/128) rounded up to 4 x ceil(M/128) (B: ... x ceil(N/128)), the column stride a
//   multiple of 4. These are octet's layouts (runtime/blockwise_tensor.h) as they are: a 1D
//   scale_inv (ceil(K/128), roundup(rows, 4)) is [K-block][row], with rows % 4 = 0 exactly M-major
//   (cuBLASLt's A is octet's b, so its M is b's rows); a 2D one (ceil(rows/128), roundup(ceil(K/
//   128), 4)) is [row block][K-block], K-major with the column stride padded to 4. No reordering.
// - 3.4.17 "cublasLtMatmul()", FP8 requirements: pointers and dimensions 16-byte aligned (K % 16),
//   TN only on Hopper, CUBLAS_COMPUTE_32F with CUDA_R_32F scale type; bias bf16 for bf16 and f32
//   D; footnote 8: no FP8 D with VEC128 / BLK128x128. The cublasLtMatmul bias and beta rules are
//   the FP8 ones (nothing in 3.1.4.5 restricts them outside grouped GEMMs).
// PyTorch refuses fast accumulation with these modes; octet does not ask for it.
namespace {

int64_t g_native_calls = 0, g_fallback_calls = 0;  // under gemm_mutex()

// Why cuBLASLt's block scale modes cannot run on `device`, or "" when they may.
std::string block_scaling_unavailable(Device device) {
#if CUBLAS_VERSION >= 120900
  const size_t version = cublasLtGetVersion();
  if (version < 120900) {
    return "cuBLASLt " + std::to_string(version) + " predates the block scale modes (12.9)";
  }
  cudaDeviceProp prop{};
  OCTET_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  if (prop.major != 9 || prop.minor != 0) {
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " (cuBLASLt documents VEC128 / BLK128x128 for 9.0 only)";
  }
  return "";
#else
  (void)device;
  return "built against cuBLAS " + std::to_string(CUBLAS_VERSION) + " (block modes need 12.9)";
#endif
}

const char* blocks_name(BlockScaling blocks) {
  return blocks == BlockScaling::k2D ? "128x128" : "1x128";
}

}  // namespace

bool gemm_block_scaled(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                       const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                       Tensor& out, const Tensor* bias, ops::Accumulate accumulate) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  OCTET_ASSERT(a_blocks == BlockScaling::k1D || b_blocks == BlockScaling::k1D,
               "2D x 2D block-scaled GEMM");
  if (m == 0 || n == 0 || k == 0) return false;  // the fallback handles empty products
  // Rules of section 3.1.4.5.1 that the heuristic need not check for us: with M or N not a
  // multiple of 4 octet's padded 1D stride is not cuBLASLt's, and the scale starts must be
  // 16-byte aligned.
  const bool shape_ok = m % 4 == 0 && n % 4 == 0 && alignment_of(a_scale_inv.data()) >= 16 &&
                        alignment_of(b_scale_inv.data()) >= 16;
  DeviceGuard guard(out.device());
  std::lock_guard lock(gemm_mutex());
  if (!shape_ok) {
    ++g_fallback_calls;
    return false;
  }
  DeviceState& state = device_state(out.device());
  const bool keep = accumulate == ops::Accumulate::kYes;
  Call call{a,
            ops::Transpose::kNo,
            b,
            ops::Transpose::kYes,
            out,
            m,
            n,
            k,
            1.f,
            keep,
            bias,
            &a_scale_inv,
            &b_scale_inv,
            nullptr,
            GemmRole::kGeneric,
            false,
            nullptr,
            nullptr,
            stream_of(out),
            &state};
  call.block_scaled = true;
  call.a_blocks = a_blocks;
  call.b_blocks = b_blocks;
  const PlanKey key = key_of(call);
  auto& cache = plan_cache();
  if (auto it = cache.find(key); it != cache.end()) {
    if (it->second == nullptr) {  // declined the first time
      ++g_fallback_calls;
      return false;
    }
    const cublasStatus_t status = run_plan(call, *it->second);
    OCTET_CHECK(status == CUBLAS_STATUS_SUCCESS,
                "cublasLtMatmul (block-scaled) failed: ", cublasLtGetStatusString(status),
                " for M=", m, " N=", n, " K=", k);
    ++g_native_calls;
    return true;
  }
  const std::string shape =
      "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + ", a " +
      std::string(dtype_name(a.dtype())) + " " + blocks_name(a_blocks) + ", b " +
      std::string(dtype_name(b.dtype())) + " " + blocks_name(b_blocks) + ", out " +
      std::string(dtype_name(out.dtype())) + (bias != nullptr ? ", bias" : "") +
      (keep ? ", accumulate" : "");
  std::string why = block_scaling_unavailable(out.device());
  if (why.empty()) {
    cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
    for (const Config& config : candidates(call)) {
      std::unique_ptr<Plan> plan = build_plan(call, config, &last);
      if (plan == nullptr) continue;
      last = run_plan(call, *plan);
      if (last != CUBLAS_STATUS_SUCCESS) continue;
      log_info_message("blockwise GEMM " + shape + ": cuBLASLt's native block-scaled FP8 GEMM");
      cache.emplace(key, std::move(plan));
      ++g_native_calls;
      return true;
    }
    why = std::string("cuBLASLt declined: ") + cublasLtGetStatusString(last);
  }
  log_info_message("blockwise GEMM " + shape + ": f32 expansion fallback (" + why + ")");
  cache.emplace(key, nullptr);
  ++g_fallback_calls;
  return false;
}

void note_blockwise_fallback() {
  std::lock_guard lock(gemm_mutex());
  ++g_fallback_calls;
}

BlockwiseGemmCounts blockwise_gemm_counts() {
  std::lock_guard lock(gemm_mutex());
  return {g_native_calls, g_fallback_calls};
}

void CudaBackend::release_workspace() const {
  std::lock_guard lock(gemm_mutex());
  // Queued GEMMs still read the buffers: the caching allocator hands them out again only in
  // stream order.
  for (auto& [index, state] : device_states()) state.workspace = Tensor();
}

}  // namespace octet::cuda
