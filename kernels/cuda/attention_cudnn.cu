// cuDNN's fused flash attention through the cuDNN 9 backend (graph) API, in the operation-graph
// spelling cudnn-frontend's SDPA nodes lower to and cuDNN's fused-attention engines match:
// forward  S = scale·QKᵀ, causal select, softmax with stats (max + log Σexp), O = P·V;
// backward the recompute graph with dQ accumulated in an f32 buffer (cuDNN >= 9's form).
// Grouped-query attention (G key/value heads for H query heads) as cudnn-frontend spells it: K and
// V with G heads in both matmuls, and in the backward dK and dV per query head reduced over each
// group. Operands are bf16 copies of octet's f32 tensors; any failure to build a plan returns
// false. The backend-API plumbing (descriptors, attribute setters, GraphBuilder):
// cudnn_graph_builder.h.
#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include <array>
#include <compare>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cudnn_graph_builder.h"
#include "runtime/log_plain.h"
#include "runtime/memory.h"
#include "runtime/named.h"

namespace octet::cuda::cudnn {
namespace {

// Why cuDNN was not used, once per distinct message, as a warning on octet's logger.
void report_once(const std::string& message) {
  static std::set<std::string> reported;  // guarded by attention_mutex()
  if (!reported.insert(message).second) return;
  log_warning_message("cuDNN attention not used, octet's kernels run instead: " + message);
}

// ---- graphs ----

// Unique ids of the tensors bound at execution; virtual tensors count up from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kOne,
  kDO,
  kDQ,
  kDK,
  kDV,
  kDQAccum,
  kSoftmaxSum,
};
static_assert(kSoftmaxSum < kFirstVirtual);

// Shapes of one problem: Q, K, V live in the packed (B, T, H + 2G, D) bf16 buffer (G = H: the
// (B, T, 3, H, D) of causal_attention), O and dO in (B, T, H, D); cuDNN sees them as (B, H, T, D)
// and K, V as (B, G, T, D) through strides.
struct Shape4 {
  int64_t B, T, H, G, D;
  int64_t row() const { return (H + 2 * G) * D; }  // one token's q, k and v
  Dims qkv_dims() const { return {B, H, T, D}; }
  Dims qkv_strides() const { return {T * row(), D, row(), 1}; }
  Dims kv_dims() const { return {B, G, T, D}; }
  Dims kv_t_dims() const { return {B, G, D, T}; }  // Kᵀ, Vᵀ
  Dims kv_t_strides() const { return {T * row(), D, 1, row()}; }
  Dims o_strides() const { return {T * H * D, D, H * D, 1}; }
  Dims packed_strides() const { return {H * T * D, T * D, D, 1}; }  // dense (B, H, T, D)
  Dims scores() const { return {B, H, T, T}; }
  Dims scores_strides() const { return {H * T * T, T * T, T, 1}; }
  Dims scores_t_strides() const { return {H * T * T, T * T, 1, T}; }  // (B, H, Tk, Tq) view
  Dims rows() const { return {B, H, T, 1}; }
  Dims rows_strides() const { return {H * T, T, 1, 1}; }
};

// y = mode(a, b) in f32 over the (B, H, T, T) scores.
cudnnBackendDescriptor_t scores_op(GraphBuilder& g, const Shape4& s, cudnnPointwiseMode_t mode,
                                   cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b) {
  return g.pointwise_to(mode, a, b, CUDNN_DATA_FLOAT, s.scores(), s.scores_strides());
}

// softmax(scale·QKᵀ, causal) V with the stats (max + ln Σexp) written to Stats.
std::unique_ptr<Plan> build_forward(cudnnHandle_t handle, const Shape4& s) {
  GraphBuilder g(handle);
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  auto q = g.tensor(kQ, bf16, s.qkv_dims(), s.qkv_strides(), false);
  auto kt = g.tensor(kK, bf16, s.kv_t_dims(), s.kv_t_strides(), false);
  auto v = g.tensor(kV, bf16, s.kv_dims(), s.qkv_strides(), false);
  auto o = g.tensor(kO, bf16, s.qkv_dims(), s.o_strides(), false);
  auto stats = g.tensor(kStats, f32, s.rows(), s.rows_strides(), false);
  auto scale = g.scalar(kScale);
  auto neg_inf = g.scalar(kNegInf);

  auto scores = g.virtual_tensor(f32, s.scores(), s.scores_strides());
  g.matmul(q, kt, scores);
  auto scaled = scores_op(g, s, CUDNN_POINTWISE_MUL, scores, scale);
  auto masked = g.causal_mask(scaled, neg_inf, s.scores(), s.scores_strides());
  // Softmax with stats, as cudnn-frontend's composite softmax node lowers it.
  auto max = g.virtual_tensor(f32, s.rows(), s.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  auto shifted = scores_op(g, s, CUDNN_POINTWISE_SUB, masked, max);
  auto exps = scores_op(g, s, CUDNN_POINTWISE_EXP, shifted, nullptr);
  auto sum = g.virtual_tensor(f32, s.rows(), s.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, sum);
  auto log_sum = g.pointwise_to(CUDNN_POINTWISE_LOG, sum, nullptr, f32, s.rows(), s.rows_strides());
  g.pointwise(CUDNN_POINTWISE_ADD, f32, max, log_sum, nullptr, stats);
  // P feeds the second GEMM in the io type (the backend's requirement for bmm2's A).
  auto probs = g.pointwise_to(CUDNN_POINTWISE_DIV, exps, sum, bf16, s.scores(), s.scores_strides());
  g.matmul(probs, v, o);
  return g.finish();
}

// The backward graph's spellings, tried in order. cudnn-frontend's current composite SDPA backward
// (cuDNN 9.x): softmax_sum a bound f32 buffer, an f32 dQ accumulator without reordering (zeroed
// before each run), the stats subtracted before the causal mask, and no dropout multiply. Its
// older releases (frontend 1.x for cuDNN 9.0-9.2, still matched by later cuDNN 9): softmax_sum
// virtual, the accumulator F16x16-reordered, the mask before the stats and dP multiplied by a
// unit dropout mask. Without the accumulator (the dP-workspace engines) dQ is written directly.
struct BackwardForm {
  bool dq_accum;
  bool dq_accum_f16x16;
  bool softmax_sum_in_memory;
  bool legacy_order;  // mask, then - stats; dP · 1
};
constexpr BackwardForm kBackwardForms[] = {
    {true, false, true, false},
    {true, true, false, true},
    {false, false, true, false},
    {false, false, false, true},
};

// x = a·b into `grouped` (B, G, T, D): directly when G == H, else the product per query head
// (B, H, T, D, bf16 as in cudnn-frontend) and its groups of H/G heads summed by a reduction.
void matmul_grouped(GraphBuilder& g, const Shape4& s, cudnnBackendDescriptor_t a,
                    cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t grouped) {
  if (s.G == s.H) {
    g.matmul(a, b, grouped);
    return;
  }
  auto per_head = g.virtual_tensor(CUDNN_DATA_BFLOAT16, s.qkv_dims(), s.packed_strides());
  g.matmul(a, b, per_head);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, grouped);
}

// matmul_grouped of scores `a` (B, H, T, T) read transposed, in bf16.
void matmul_transposed_grouped(GraphBuilder& g, const Shape4& s, cudnnBackendDescriptor_t a,
                               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t grouped) {
  auto a_t = g.virtual_tensor(CUDNN_DATA_BFLOAT16, s.scores(), s.scores_t_strides());
  g.reshape(a, a_t);
  matmul_grouped(g, s, a_t, b, grouped);
}

// dQ, dK, dV of the forward above, recomputing P from Q, K and the stats.
std::unique_ptr<Plan> build_backward(cudnnHandle_t handle, const Shape4& s, BackwardForm form) {
  GraphBuilder g(handle);
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  auto q = g.tensor(kQ, bf16, s.qkv_dims(), s.qkv_strides(), false);
  auto kt = g.tensor(kK, bf16, s.kv_t_dims(), s.kv_t_strides(), false);
  auto vt = g.tensor(kV, bf16, s.kv_t_dims(), s.kv_t_strides(), false);
  auto o = g.tensor(kO, bf16, s.qkv_dims(), s.o_strides(), false);
  auto d_o = g.tensor(kDO, bf16, s.qkv_dims(), s.o_strides(), false);
  auto stats = g.tensor(kStats, f32, s.rows(), s.rows_strides(), false);
  auto dq = g.tensor(kDQ, bf16, s.qkv_dims(), s.qkv_strides(), false);
  auto dk = g.tensor(kDK, bf16, s.kv_dims(), s.qkv_strides(), false);
  auto dv = g.tensor(kDV, bf16, s.kv_dims(), s.qkv_strides(), false);
  // A bound f32 dQ accumulator selects the backend's dQ-accumulating engines.
  auto dq_accum = form.dq_accum ? g.tensor(kDQAccum, f32, s.qkv_dims(), s.packed_strides(), false,
                                           false, form.dq_accum_f16x16)
                                : nullptr;
  auto scale = g.scalar(kScale);
  auto neg_inf = g.scalar(kNegInf);
  auto one = g.scalar(kOne);

  // softmax_sum = rowsum(dO ∘ O) (× 1: the dropout-scale slot of the pattern).
  auto do_o = g.pointwise_to(CUDNN_POINTWISE_MUL, d_o, o, f32, s.qkv_dims(), s.packed_strides());
  auto row_sum = g.virtual_tensor(f32, s.rows(), s.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, row_sum);
  auto softmax_sum = form.softmax_sum_in_memory
                         ? g.tensor(kSoftmaxSum, f32, s.rows(), s.rows_strides(), false)
                         : g.virtual_tensor(f32, s.rows(), s.rows_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, f32, row_sum, one, nullptr, softmax_sum);

  // P = exp(mask(scale·QKᵀ) - stats).
  auto scores = g.virtual_tensor(f32, s.scores(), s.scores_strides());
  g.matmul(q, kt, scores);
  auto scaled = scores_op(g, s, CUDNN_POINTWISE_MUL, scores, scale);
  cudnnBackendDescriptor_t logits = nullptr;  // mask(scale·QKᵀ) - stats
  if (form.legacy_order) {
    auto masked = g.causal_mask(scaled, neg_inf, s.scores(), s.scores_strides());
    logits = scores_op(g, s, CUDNN_POINTWISE_SUB, masked, stats);
  } else {
    auto shifted = scores_op(g, s, CUDNN_POINTWISE_SUB, scaled, stats);
    logits = g.causal_mask(shifted, neg_inf, s.scores(), s.scores_strides());
  }
  auto probs = scores_op(g, s, CUDNN_POINTWISE_EXP, logits, nullptr);

  // dV = Pᵀ dO (per query head, then summed over each group of H/G heads).
  matmul_transposed_grouped(g, s, probs, d_o, dv);

  // dS = scale · P ∘ (dO Vᵀ - softmax_sum).
  auto dp = g.virtual_tensor(f32, s.scores(), s.scores_strides());
  g.matmul(d_o, vt, dp);
  if (form.legacy_order) {  // × 1: the dropout-mask slot of the older pattern
    dp = scores_op(g, s, CUDNN_POINTWISE_MUL, dp, one);
  }
  auto dp_centered = scores_op(g, s, CUDNN_POINTWISE_SUB, dp, softmax_sum);
  auto ds_unscaled = scores_op(g, s, CUDNN_POINTWISE_MUL, dp_centered, probs);
  auto ds = scores_op(g, s, CUDNN_POINTWISE_MUL, ds_unscaled, scale);

  // dK = dSᵀ Q.
  matmul_transposed_grouped(g, s, ds, q, dk);

  // dQ = dS K, accumulated in f32 and copied out in bf16.
  auto k = g.virtual_tensor(f32, s.kv_dims(), s.qkv_strides());
  g.reshape(kt, k);
  if (form.dq_accum) {
    g.matmul(ds, k, dq_accum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, f32, dq_accum, nullptr, nullptr, dq);
  } else {
    g.matmul(ds, k, dq);
  }

  std::unique_ptr<Plan> plan = g.finish();
  plan->dq_accum = form.dq_accum;
  plan->softmax_sum_in_memory = form.softmax_sum_in_memory;
  return plan;
}

// ---- conversions ----

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y,
                                   int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = to_bf16(x[i]);
  }
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ x, float* __restrict__ y,
                                   int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = from_bf16(x[i]);
  }
}

Tensor workspace(const Shape& shape, DType dtype, Device device) {
  MemTagScope tag(MemTag::kWorkspace);
  return Tensor::empty(shape, dtype, device);
}

// x as bf16: itself when it is (a bf16 activation, kernels/nn.h), else a bf16 copy of the f32 or
// f16 tensor, same shape (f16 rounded once, as through an exact f32 copy).
Tensor as_bf16(const Tensor& x, cudaStream_t stream) {
  if (x.dtype() == DType::kBF16) return x;
  Tensor y = workspace(x.shape(), DType::kBF16, x.device());
  if (x.dtype() != DType::kF32) {
    ops::detail::cuda_backend().convert(x, y);
    return y;
  }
  f32_to_bf16_kernel<<<blocks_for(x.numel()), kThreads, 0, stream>>>(
      x.data_as<float>(), y.data_as<uint16_t>(), x.numel());
  OCTET_CUDA_LAUNCH_CHECK("f32_to_bf16_kernel");
  return y;
}

// Where cuDNN writes the bf16 result for `y`: y itself when it is bf16, else a workspace that
// from_bf16_into converts into y (f32 or f16).
Tensor bf16_target(Tensor& y) {
  return y.dtype() == DType::kBF16 ? y : workspace(y.shape(), DType::kBF16, y.device());
}

void from_bf16_into(const Tensor& x, Tensor& y, cudaStream_t stream) {
  if (x.data() == y.data()) return;  // cuDNN wrote y itself
  if (y.dtype() != DType::kF32) {    // an f16 activation: rounded once
    ops::detail::cuda_backend().convert(x, y);
    return;
  }
  bf16_to_f32_kernel<<<blocks_for(x.numel()), kThreads, 0, stream>>>(x.data_as<uint16_t>(),
                                                                     y.data_as<float>(), x.numel());
  OCTET_CUDA_LAUNCH_CHECK("bf16_to_f32_kernel");
}

// ---- plan cache ----

enum class Direction : uint8_t { kForward, kBackward };

struct PlanKey {
  int device;
  int64_t B, T, H, G, D;
  uint32_t scale_bits;
  Direction direction;
  auto operator<=>(const PlanKey&) const = default;
};

std::mutex& attention_mutex() {
  static std::mutex m;
  return m;
}

// Never destroyed: descriptors and handles must not be torn down after the driver at exit.
std::map<PlanKey, std::unique_ptr<Plan>>& plan_cache() {  // null entry: cuDNN declined
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();
  return *plans;
}

struct HandleState {
  cudnnHandle_t handle = nullptr;
  bool failed = false;
};

// The device's cuDNN handle; null when cuDNN cannot start there. Caller holds the lock.
cudnnHandle_t handle_for(Device device) {
  static auto* handles = new std::map<int, HandleState>();
  HandleState& state = (*handles)[device.index];
  if (state.handle == nullptr && !state.failed) {
    const cudnnStatus_t status = cudnnCreate(&state.handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      state.failed = true;
      state.handle = nullptr;
      report_once(std::string("cudnnCreate failed: ") + cudnnGetErrorString(status) +
                  last_cudnn_error());
    }
  }
  return state.handle;
}

std::string shape_text(const PlanKey& key) {
  return std::string(key.direction == Direction::kForward ? "forward" : "backward") +
         " B=" + std::to_string(key.B) + " T=" + std::to_string(key.T) +
         " H=" + std::to_string(key.H) + " G=" + std::to_string(key.G) +
         " D=" + std::to_string(key.D);
}

// The cached plan for `key`, built on first use; null when cuDNN declines (reported once).
Plan* plan_for(const PlanKey& key, cudnnHandle_t handle) {
  auto& cache = plan_cache();
  if (auto it = cache.find(key); it != cache.end()) return it->second.get();
  const Shape4 shape{key.B, key.T, key.H, key.G, key.D};
  std::unique_ptr<Plan> plan;
  std::string why;
  if (key.direction == Direction::kForward) {
    try {
      plan = build_forward(handle, shape);
    } catch (const Error& e) {
      why = e.what();
      (void)cudaGetLastError();  // a failed cuDNN call can leave a CUDA error for the next check
    }
  } else {
    for (const BackwardForm& form : kBackwardForms) {
      try {
        plan = build_backward(handle, shape, form);
        break;
      } catch (const Error& e) {
        why += std::string(why.empty() ? "" : "; ") + e.what();
        (void)cudaGetLastError();
      }
    }
  }
  if (plan == nullptr) report_once(shape_text(key) + ": " + why);
  Plan* result = plan.get();
  cache.emplace(key, std::move(plan));
  return result;
}

// Runs `plan` with the tensors bound by uid. False (and the plan dropped from use) when cuDNN
// refuses to run it; by then nothing has been written.
bool execute(const PlanKey& key, Plan& plan, cudnnHandle_t handle, cudaStream_t stream,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers, Device device) {
  Tensor work;
  if (plan.workspace_bytes > 0) work = workspace({plan.workspace_bytes}, DType::kU8, device);
  void* work_ptr = work.defined() ? work.data() : nullptr;
  try {
    OCTET_CUDNN_CHECK(cudnnSetStream(handle, stream));
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    OCTET_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                    static_cast<int64_t>(uids.size()), uids.data());
    OCTET_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                    static_cast<int64_t>(pointers.size()), pointers.data());
    OCTET_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                    &work_ptr);
    OCTET_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
    OCTET_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan, pack.get()));
  } catch (const Error& e) {
    // Cleared so that the fallback's own launch checks do not report cuDNN's error as theirs.
    (void)cudaGetLastError();
    report_once(shape_text(key) + ": execution failed: " + e.what());
    plan_cache()[key].reset();  // later calls of this shape go straight to the fallback
    return false;
  }
  return true;
}

constexpr Named<CudnnRule> kRuleTexts[] = {
    {CudnnRule::kUse, "used"},
    {CudnnRule::kDeclineOldVersion, "cuDNN older than 9.0"},
    {CudnnRule::kDeclineVersion,
     "cuDNN 9.10.0 and 9.10.1 are refused (cudnn-frontend refuses their fused attention)"},
    {CudnnRule::kDeclineBackwardKvLength1,
     "backward with key/value length 1 is not supported from cuDNN 9.18"}};
std::string rule_text(CudnnRule rule) { return std::string(name_in(kRuleTexts, rule)); }

// Successful cuDNN runs in this process (guarded by attention_mutex()).
AttentionRuns& runs() {
  static AttentionRuns counts;
  return counts;
}

// B, T, H, G, D of a packed qkv (B, T, (H + 2G) * D), or false when cuDNN's fused attention cannot
// take it.
bool supported(const Tensor& qkv, int64_t heads, int64_t kv_heads, Direction direction,
               Shape4* shape) {
  if (qkv.dim() != 3 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 ||
      qkv.size(2) % (heads + 2 * kv_heads) != 0) {
    return false;
  }
  *shape = {qkv.size(0), qkv.size(1), heads, kv_heads, qkv.size(2) / (heads + 2 * kv_heads)};
  if (shape->B == 0 || shape->T == 0) return false;
  // The fused engines take head dims up to 128 in multiples of 8 (16-byte bf16 rows).
  if (shape->D > 128 || shape->D % 8 != 0) return false;
  const CudnnRule rule = cudnn_rule(static_cast<int64_t>(cudnnGetVersion()),
                                    direction == Direction::kBackward, shape->T);
  if (rule == CudnnRule::kUse) return true;
  std::lock_guard lock(attention_mutex());  // report_once's set
  report_once(rule_text(rule) + " (cuDNN " + std::to_string(cudnnGetVersion()) + ")");
  return false;
}

PlanKey key_for(Device device, const Shape4& s, float scale, Direction direction) {
  uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof(bits));
  return {device.index, s.B, s.T, s.H, s.G, s.D, bits, direction};
}

// The start of a forward or backward call: the shapes checked, then, for as long as this lives,
// the device current and the attention mutex held, and the handle and plan looked up. plan is
// null where cuDNN does not run the call.
struct Call {
  Call(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale, Direction direction) {
    if (!supported(qkv, heads, kv_heads, direction, &s)) return;
    device = qkv.device();
    guard.emplace(device);
    lock = std::unique_lock(attention_mutex());
    handle = handle_for(device);
    if (handle == nullptr) return;
    key = key_for(device, s, scale, direction);
    plan = plan_for(key, handle);
  }

  Shape4 s{};
  Device device;
  std::optional<DeviceGuard> guard;
  std::unique_lock<std::mutex> lock;  // released before the guard
  cudnnHandle_t handle = nullptr;
  PlanKey key{};
  Plan* plan = nullptr;
};

}  // namespace

AttentionRuns attention_runs() {
  std::lock_guard lock(attention_mutex());
  return runs();
}

bool attention_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale, Tensor& out,
                       Tensor& lse) {
  const Call call(qkv, heads, kv_heads, scale, Direction::kForward);
  if (call.plan == nullptr) return false;
  const Shape4& s = call.s;

  const cudaStream_t stream = stream_of(qkv);
  OCTET_ASSERT(out.numel() == s.B * s.T * s.H * s.D && lse.numel() == s.B * s.H * s.T);
  const Tensor qkv16 = as_bf16(qkv, stream);  // (B, T, H + 2G, D)
  Tensor o16 = bf16_target(out);              // (B, T, H, D)
  auto* base = const_cast<uint16_t*>(qkv16.data_as<uint16_t>());
  const int64_t k_at = s.H * s.D, v_at = (s.H + s.G) * s.D;
  float scale_value = scale;
  float neg_inf = std::numeric_limits<float>::lowest();
  const std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  const std::vector<void*> pointers = {base,       base + k_at,  base + v_at, o16.data(),
                                       lse.data(), &scale_value, &neg_inf};
  if (!execute(call.key, *call.plan, call.handle, stream, uids, pointers, call.device)) {
    return false;
  }
  from_bf16_into(o16, out, stream);
  ++runs().forward;
  return true;
}

bool attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t heads, int64_t kv_heads, float scale, Tensor& dqkv) {
  const Call call(qkv, heads, kv_heads, scale, Direction::kBackward);
  if (call.plan == nullptr) return false;
  const Shape4& s = call.s;

  const cudaStream_t stream = stream_of(qkv);
  OCTET_ASSERT(dout.numel() == out.numel() && dqkv.numel() == qkv.numel() &&
               lse.numel() == s.B * s.H * s.T);
  const Tensor qkv16 = as_bf16(qkv, stream);  // (B, T, H + 2G, D)
  // out is the forward's bf16 O (widened to f32 for an f32 out) when cuDNN ran the forward: the
  // copy back to bf16 is exact.
  const Tensor o16 = as_bf16(out, stream);    // (B, T, H, D)
  const Tensor do16 = as_bf16(dout, stream);  // (B, T, H, D)
  Tensor dqkv16 = bf16_target(dqkv);          // (B, T, H + 2G, D)
  Tensor dq_accum, softmax_sum;
  if (call.plan->dq_accum) {
    dq_accum = workspace({s.B, s.H, s.T, s.D}, DType::kF32, call.device);
    OCTET_CUDA_CHECK(cudaMemsetAsync(dq_accum.data(), 0, dq_accum.nbytes(), stream));
  }
  if (call.plan->softmax_sum_in_memory) {
    softmax_sum = workspace({s.B, s.H, s.T}, DType::kF32, call.device);
  }

  auto* base = const_cast<uint16_t*>(qkv16.data_as<uint16_t>());
  auto* dbase = dqkv16.data_as<uint16_t>();
  const int64_t k_at = s.H * s.D, v_at = (s.H + s.G) * s.D;
  float scale_value = scale;
  float neg_inf = std::numeric_limits<float>::lowest();
  float one = 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kNegInf, kOne};
  std::vector<void*> pointers = {base,
                                 base + k_at,
                                 base + v_at,
                                 const_cast<void*>(o16.data()),
                                 const_cast<void*>(do16.data()),
                                 const_cast<void*>(lse.data()),
                                 dbase,
                                 dbase + k_at,
                                 dbase + v_at,
                                 &scale_value,
                                 &neg_inf,
                                 &one};
  if (dq_accum.defined()) {
    uids.push_back(kDQAccum);
    pointers.push_back(dq_accum.data());
  }
  if (softmax_sum.defined()) {
    uids.push_back(kSoftmaxSum);
    pointers.push_back(softmax_sum.data());
  }
  if (!execute(call.key, *call.plan, call.handle, stream, uids, pointers, call.device)) {
    return false;
  }
  from_bf16_into(dqkv16, dqkv, stream);
  ++runs().backward;
  return true;
}

}  // namespace octet::cuda::cudnn