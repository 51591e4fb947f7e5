// Causal multi-head attention on packed qkv (B, T, 3, H, D) on the GPU: cuDNN's fused attention
// where it takes the shape (kernels/cuda/attention_cudnn.h), else octet's own kernels here.
//
// The own kernels follow kernels/cpu/attention.cpp (scores scale * q.k, keys 0..t visible to
// query t, lse (B, H, T) the natural-log log-sum-exp of each scaled score row, the backward
// rebuilding probabilities from lse) in the flash-attention shape: a block holds 8 rows of one
// (batch, head), one warp per row, and streams the other side through shared memory 32 rows at a
// time, one row per lane, so no (T, T) score matrix exists.
// - forward: a warp per query row keeps an online softmax (running max and sum) and its output
//   row in registers;
// - backward: delta_i = dout_i . out_i first; then a warp per query row accumulates dq over its
//   keys, and a warp per key row accumulates dk and dv over its queries. Every element of dqkv is
//   written once, without atomics.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/math/exp.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kAttnThreads = kRowsPerBlock * kWarp;
constexpr int kTile = 32;  // rows of the other side per shared tile: one per lane
constexpr int kMaxHeadDim = 256;
// Dynamic shared memory past this needs the kernel's opt-in attribute.
constexpr size_t kDefaultSmem = 48 * 1024;

// One (batch, head) of the packed layouts: row t of q, k, v at t * 3C, of out/dout at t * C.
struct HeadPtrs {
  int64_t bh;   // b * H + h: the (B, H, T) row of lse and delta
  int64_t qkv;  // offset of q's row 0 in qkv (and dqkv); k and v follow at +C, +2C
  int64_t o;    // offset of row 0 in out / dout
  int64_t C, stride;
};

__device__ __forceinline__ HeadPtrs head_of(int64_t bh, int T, int H, int D) {
  const int64_t b = bh / H, h = bh % H, C = int64_t{H} * D;
  return {bh, b * T * 3 * C + h * D, b * T * C + h * D, C, 3 * C};
}

// The block's (batch, head) and row block from a flat grid; `reverse` hands out the last row
// block first (causal query rows: the longest rows start first, so the tail is short ones).
struct BlockRows {
  int64_t bh;
  int r0;
};

__device__ __forceinline__ BlockRows block_rows(int T, bool reverse) {
  const int row_blocks = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  const int rb = static_cast<int>(blockIdx.x % row_blocks);
  return {blockIdx.x / row_blocks, (reverse ? row_blocks - 1 - rb : rb) * kRowsPerBlock};
}

// Copies rows r0 .. r0 + kTile - 1 (row stride `stride` in src, `ld` in dst, D columns) into a
// shared tile; rows at or past `limit` become zeros (so 0-probability rows never meet NaN).
__device__ __forceinline__ void load_tile(ActIn src, int64_t stride, int r0, int limit, int D,
                                          float* dst, int ld) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
    const int r = idx / D, d = idx - r * D;
    dst[r * ld + d] = r0 + r < limit ? src[int64_t{r0 + r} * stride + d] : 0.f;
  }
}

// a . b over D, a in shared memory read by every lane (broadcast), b one row per lane.
__device__ __forceinline__ float dot(const float* a, const float* b, int D) {
  float acc = 0.f;
#pragma unroll 4
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

// Forward. Shared memory (floats): K tile (kTile, D + 1), V tile (kTile, D), the block's query
// rows (kRowsPerBlock, D), each warp's probabilities (kRowsPerBlock, kTile). The K tile's odd row
// stride lets 32 lanes read one column of 32 rows from 32 banks. Lane l holds output columns
// l + 32 m, m < kChunks (D <= 32 kChunks).
template <int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    attention_forward_kernel(ActIn qkv, ActOut out, float* lse, int T, int H, int D, float scale) {
  extern __shared__ float smem[];
  const int ks = D + 1;
  float* ktile = smem;
  float* vtile = ktile + kTile * ks;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* qrow = vtile + kTile * D + warp * D;
  float* probs = vtile + kTile * D + kRowsPerBlock * D + warp * kTile;

  const BlockRows br = block_rows(T, /*reverse=*/true);
  const HeadPtrs hp = head_of(br.bh, T, H, D);
  const ActIn q = qkv + hp.qkv;
  const int i = br.r0 + warp;  // this warp's query row
  const bool active = i < T;
  const int keys = min(T, br.r0 + kRowsPerBlock);  // the block's rows see keys 0 .. keys - 1
  if (active) {
    for (int d = lane; d < D; d += kWarp) qrow[d] = q[int64_t{i} * hp.stride + d];
  }
  float o[kChunks];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) o[m] = 0.f;
  float run_max = -INFINITY, run_sum = 0.f;  // the online softmax, the same in every lane

  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // the previous tile's readers are done; qrow is written
    load_tile(q + hp.C, hp.stride, j0, keys, D, ktile, ks);
    load_tile(q + 2 * hp.C, hp.stride, j0, keys, D, vtile, D);
    __syncthreads();
    if (!active || j0 > i) continue;  // warp-uniform; the warp still meets every barrier
    const int j = j0 + lane;          // this lane's key
    const float s = j <= i ? dot(qrow, ktile + lane * ks, D) * scale : -INFINITY;
    // Key j0 <= i is visible, so the max is finite for finite inputs.
    const float new_max = fmaxf(run_max, warp_reduce(s, MaxOp()));
    const float p = j <= i ? math::exp_f32(s - new_max) : 0.f;
    const float alpha = math::exp_f32(run_max - new_max);  // 0 on the first tile
    run_sum = run_sum * alpha + warp_reduce(p, SumOp());
    run_max = new_max;
    probs[lane] = p;
    __syncwarp();
    const int n = min(kTile, i - j0 + 1);  // the tile's visible keys
#pragma unroll
    for (int m = 0; m < kChunks; ++m) o[m] *= alpha;
    for (int l = 0; l < n; ++l) {
      const float pl = probs[l];
#pragma unroll
      for (int m = 0; m < kChunks; ++m) {
        const int d = lane + kWarp * m;
        if (d < D) o[m] += pl * vtile[l * D + d];
      }
    }
    __syncwarp();  // probs is rewritten by the next tile
  }
  if (!active) return;
  const float inv = 1.f / run_sum;
  const ActOut orow = out + (hp.o + int64_t{i} * hp.C);
#pragma unroll
  for (int m = 0; m < kChunks; ++m) {
    const int d = lane + kWarp * m;
    if (d < D) orow.set(d, o[m] * inv);
  }
  if (lane == 0) lse[hp.bh * T + i] = run_max + logf(run_sum);
}

// delta (B, H, T) = sum over d of dout * out, one warp per row. Row w of out (B, T, H, D) is
// (b, t, h) with w = (b T + t) H + h, at w * D.
__global__ void attention_delta_kernel(ActIn dout, ActIn out, float* delta, int64_t rows, int T,
                                       int H, int D) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / kWarp);
  for (int64_t w = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp; w < rows;
       w += warps) {
    float s = 0.f;
    for (int d = lane; d < D; d += kWarp) s += dout[w * D + d] * out[w * D + d];
    s = warp_reduce(s, SumOp());
    if (lane == 0) {
      const int64_t h = w % H, t = w / H % T, b = w / (int64_t{H} * T);
      delta[(b * H + h) * T + t] = s;
    }
  }
}

// dq, one warp per query row i over keys 0..i: ds_ij = p_ij (dout_i . v_j - delta_i) with
// p_ij = exp(scale q_i . k_j - lse_i); dq_i = scale sum_j ds_ij k_j. Shared memory (floats): K and
// V tiles (kTile, D + 1) each, the block's q and dout rows (kRowsPerBlock, D) each, each warp's ds
// (kRowsPerBlock, kTile).
template <int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    attention_dq_kernel(ActIn qkv, ActIn dout, const float* lse, const float* delta, ActOut dqkv,
                        int T, int H, int D, float scale) {
  extern __shared__ float smem[];
  const int ks = D + 1;
  float* ktile = smem;
  float* vtile = ktile + kTile * ks;
  float* rows = vtile + kTile * ks;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* qrow = rows + warp * D;
  float* dorow = rows + kRowsPerBlock * D + warp * D;
  float* dsw = rows + 2 * kRowsPerBlock * D + warp * kTile;

  const BlockRows br = block_rows(T, /*reverse=*/true);
  const HeadPtrs hp = head_of(br.bh, T, H, D);
  const ActIn q = qkv + hp.qkv;
  const int i = br.r0 + warp;
  const bool active = i < T;
  const int keys = min(T, br.r0 + kRowsPerBlock);
  float lse_i = 0.f, delta_i = 0.f;
  if (active) {
    for (int d = lane; d < D; d += kWarp) {
      qrow[d] = q[int64_t{i} * hp.stride + d];
      dorow[d] = dout[hp.o + int64_t{i} * hp.C + d];
    }
    lse_i = lse[hp.bh * T + i];
    delta_i = delta[hp.bh * T + i];
  }
  float acc[kChunks];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) acc[m] = 0.f;

  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    load_tile(q + hp.C, hp.stride, j0, keys, D, ktile, ks);
    load_tile(q + 2 * hp.C, hp.stride, j0, keys, D, vtile, ks);
    __syncthreads();
    if (!active || j0 > i) continue;
    const int j = j0 + lane;
    float ds = 0.f;
    if (j <= i) {
      const float p = math::exp_f32(dot(qrow, ktile + lane * ks, D) * scale - lse_i);
      ds = p * (dot(dorow, vtile + lane * ks, D) - delta_i);
    }
    dsw[lane] = ds;
    __syncwarp();
    const int n = min(kTile, i - j0 + 1);
    for (int l = 0; l < n; ++l) {
      const float dl = dsw[l];
#pragma unroll
      for (int m = 0; m < kChunks; ++m) {
        const int d = lane + kWarp * m;
        if (d < D) acc[m] += dl * ktile[l * ks + d];
      }
    }
    __syncwarp();
  }
  if (!active) return;
  const ActOut dq = dqkv + (hp.qkv + int64_t{i} * hp.stride);
#pragma unroll
  for (int m = 0; m < kChunks; ++m) {
    const int d = lane + kWarp * m;
    if (d < D) dq.set(d, scale * acc[m]);
  }
}

// dk and dv, one warp per key row j over queries j..T-1: dv_j = sum_i p_ij dout_i,
// dk_j = scale sum_i ds_ij q_i. Shared memory (floats): Q and dout tiles (kTile, D + 1) each, the
// tile's lse and delta (kTile) each, the block's k and v rows (kRowsPerBlock, D) each, each warp's
// p and ds (kRowsPerBlock, kTile) each.
template <int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    attention_dkdv_kernel(ActIn qkv, ActIn dout, const float* lse, const float* delta, ActOut dqkv,
                          int T, int H, int D, float scale) {
  extern __shared__ float smem[];
  const int ks = D + 1;
  float* qtile = smem;
  float* dotile = qtile + kTile * ks;
  float* lse_t = dotile + kTile * ks;
  float* delta_t = lse_t + kTile;
  float* rows = delta_t + kTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* krow = rows + warp * D;
  float* vrow = rows + kRowsPerBlock * D + warp * D;
  float* pw = rows + 2 * kRowsPerBlock * D + warp * kTile;
  float* dsw = rows + 2 * kRowsPerBlock * D + kRowsPerBlock * kTile + warp * kTile;

  // Early key rows see the most queries: natural order starts them first.
  const BlockRows br = block_rows(T, /*reverse=*/false);
  const HeadPtrs hp = head_of(br.bh, T, H, D);
  const ActIn q = qkv + hp.qkv;
  const int j = br.r0 + warp;
  const bool active = j < T;
  if (active) {
    for (int d = lane; d < D; d += kWarp) {
      krow[d] = q[hp.C + int64_t{j} * hp.stride + d];
      vrow[d] = q[2 * hp.C + int64_t{j} * hp.stride + d];
    }
  }
  float dk[kChunks], dv[kChunks];
#pragma unroll
  for (int m = 0; m < kChunks; ++m) dk[m] = dv[m] = 0.f;

  // Queries before the block's first key row see none of its keys.
  for (int i0 = br.r0; i0 < T; i0 += kTile) {
    __syncthreads();
    load_tile(q, hp.stride, i0, T, D, qtile, ks);
    load_tile(dout + hp.o, hp.C, i0, T, D, dotile, ks);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_t[threadIdx.x] = i < T ? lse[hp.bh * T + i] : 0.f;
      delta_t[threadIdx.x] = i < T ? delta[hp.bh * T + i] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    const int i = i0 + lane;  // this lane's query
    float p = 0.f, ds = 0.f;
    if (i < T && i >= j) {
      p = math::exp_f32(dot(krow, qtile + lane * ks, D) * scale - lse_t[lane]);
      ds = p * (dot(vrow, dotile + lane * ks, D) - delta_t[lane]);
    }
    pw[lane] = p;
    dsw[lane] = ds;
    __syncwarp();
    const int n = min(kTile, T - i0);
    for (int l = 0; l < n; ++l) {
      const float pl = pw[l], dl = dsw[l];
#pragma unroll
      for (int m = 0; m < kChunks; ++m) {
        const int d = lane + kWarp * m;
        if (d < D) {
          dv[m] += pl * dotile[l * ks + d];
          dk[m] += dl * qtile[l * ks + d];
        }
      }
    }
    __syncwarp();
  }
  if (!active) return;
  const ActOut dkrow = dqkv + (hp.qkv + hp.C + int64_t{j} * hp.stride);
  const ActOut dvrow = dkrow + hp.C;
#pragma unroll
  for (int m = 0; m < kChunks; ++m) {
    const int d = lane + kWarp * m;
    if (d < D) {
      dkrow.set(d, scale * dk[m]);
      dvrow.set(d, dv[m]);
    }
  }
}

// The problem as the kernels see it, checked against their limits.
struct Dims {
  int B, T, H, D;
  unsigned blocks;  // B * H * ceil(T / kRowsPerBlock)
};

Dims dims_of(const Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3 / heads;
  OCTET_CHECK(D <= kMaxHeadDim, "causal attention (own CUDA kernels): head_dim ", D,
              " is above the supported ", kMaxHeadDim);
  OCTET_CHECK(T < (int64_t{1} << 30) && B * heads < (int64_t{1} << 30),
              "causal attention (own CUDA kernels): B * heads = ", B * heads, " or T = ", T,
              " is too large");
  const int64_t blocks = B * heads * ((T + kRowsPerBlock - 1) / kRowsPerBlock);
  OCTET_CHECK(blocks < (int64_t{1} << 31), "causal attention (own CUDA kernels): ", blocks,
              " blocks for qkv ", shape_str(qkv.shape()), " exceed the grid");
  return {static_cast<int>(B), static_cast<int>(T), static_cast<int>(heads), static_cast<int>(D),
          static_cast<unsigned>(blocks)};
}

// Calls f.template operator()<kChunks>() with the smallest kChunks in {1, 2, 4, 8} that covers
// D = 32 kChunks.
template <typename F>
void dispatch_chunks(int D, F&& f) {
  if (D <= 32) return f.template operator()<1>();
  if (D <= 64) return f.template operator()<2>();
  if (D <= 128) return f.template operator()<4>();
  return f.template operator()<8>();
}

// Lets `kernel` use `bytes` of dynamic shared memory (above 48 KiB it must opt in).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return;
  OCTET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

bool cudnn_attention_enabled() {
  // Read once: OCTET_CUDNN_ATTENTION=0 forces the own kernels.
  static const bool enabled = [] {
    const char* v = std::getenv("OCTET_CUDNN_ATTENTION");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

thread_local bool t_last_used_cudnn = false;

// Problems (device, B, T, 3C, heads, scale) whose latest forward ran on cuDNN: the backward takes
// cuDNN only for those, so a pass never mixes the paths' numerics when cuDNN takes one direction
// but not the other. A forward that falls back removes its problem (cuDNN's plans are per device
// and scale, and a plan that failed once is dropped), so the backward follows the path that ran.
using ShapeKey = std::array<int64_t, 7>;
std::mutex g_cudnn_shapes_mutex;
std::set<ShapeKey> g_cudnn_shapes;

ShapeKey key_of(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  return {qkv.device().index, qkv.size(0), qkv.size(1), qkv.size(2), heads, kv_heads, scale_bits};
}

// cuDNN's forward when it takes the problem, remembered for the backward; false: nothing written.
bool cudnn_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale, Tensor& out,
                   Tensor& lse) {
  t_last_used_cudnn =
      cudnn_attention_enabled() && cudnn::attention_forward(qkv, heads, kv_heads, scale, out, lse);
  std::lock_guard lock(g_cudnn_shapes_mutex);
  if (t_last_used_cudnn) {
    g_cudnn_shapes.insert(key_of(qkv, heads, kv_heads, scale));
  } else {
    g_cudnn_shapes.erase(key_of(qkv, heads, kv_heads, scale));
  }
  return t_last_used_cudnn;
}

// cuDNN's backward, only after its forward ran for the problem. Both paths read lse in octet's
// (B, H, T) layout, so either can follow either forward; cuDNN declining the backward leaves the
// caller's fallback.
bool cudnn_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                    int64_t heads, int64_t kv_heads, float scale, Tensor& dqkv) {
  if (!cudnn_attention_enabled()) return false;
  {
    std::lock_guard lock(g_cudnn_shapes_mutex);
    if (g_cudnn_shapes.count(key_of(qkv, heads, kv_heads, scale)) == 0) return false;
  }
  return cudnn::attention_backward(dout, qkv, out, lse, heads, kv_heads, scale, dqkv);
}

}  // namespace

void causal_attention_fallback(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                               Tensor& lse) {
  if (qkv.numel() == 0) return;
  const Dims dm = dims_of(qkv, heads);
  const ActIn pqkv = act_in(qkv);      // (B, T, 3, H, D)
  const ActOut pout = act_out(out);    // (B, T, H, D)
  float* plse = lse.data_as<float>();  // (B, H, T)
  cudaStream_t stream = stream_of(qkv);
  const size_t smem =
      sizeof(float) * (kTile * (dm.D + 1) + kTile * dm.D + kRowsPerBlock * (dm.D + kTile));
  dispatch_chunks(dm.D, [&]<int kChunks>() {
    allow_smem(attention_forward_kernel<kChunks>, smem);
    attention_forward_kernel<kChunks>
        <<<dm.blocks, kAttnThreads, smem, stream>>>(pqkv, pout, plse, dm.T, dm.H, dm.D, scale);
    OCTET_CUDA_LAUNCH_CHECK("attention_forward");
  });
}

void causal_attention_backward_fallback(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& lse, int64_t heads, float scale,
                                        Tensor& dqkv) {
  if (qkv.numel() == 0) return;
  const Dims dm = dims_of(qkv, heads);
  const ActIn pqkv = act_in(qkv);            // (B, T, 3, H, D)
  const ActIn pdout = act_in(dout);          // (B, T, H, D)
  const float* plse = lse.data_as<float>();  // (B, H, T)
  const ActOut pd = act_out(dqkv);           // (B, T, 3, H, D)
  cudaStream_t stream = stream_of(qkv);
  Tensor delta;  // (B, H, T)
  {
    MemTagScope tag(MemTag::kWorkspace);
    delta = Tensor::empty({dm.B, dm.H, dm.T}, DType::kF32, qkv.device());
  }
  const int64_t rows = int64_t{dm.B} * dm.T * dm.H;
  attention_delta_kernel<<<blocks_for(rows * kWarp), kThreads, 0, stream>>>(
      pdout, act_in(out), delta.data_as<float>(), rows, dm.T, dm.H, dm.D);
  OCTET_CUDA_LAUNCH_CHECK("attention_delta");
  const float* pdelta = delta.data_as<float>();
  const size_t dq_smem =
      sizeof(float) * (2 * kTile * (dm.D + 1) + kRowsPerBlock * (2 * dm.D + kTile));
  const size_t dkdv_smem =
      sizeof(float) * (2 * kTile * (dm.D + 1) + 2 * kTile + kRowsPerBlock * (2 * dm.D + 2 * kTile));
  dispatch_chunks(dm.D, [&]<int kChunks>() {
    allow_smem(attention_dq_kernel<kChunks>, dq_smem);
    attention_dq_kernel<kChunks><<<dm.blocks, kAttnThreads, dq_smem, stream>>>(
        pqkv, pdout, plse, pdelta, pd, dm.T, dm.H, dm.D, scale);
    OCTET_CUDA_LAUNCH_CHECK("attention_backward_dq");
    allow_smem(attention_dkdv_kernel<kChunks>, dkdv_smem);
    attention_dkdv_kernel<kChunks><<<dm.blocks, kAttnThreads, dkdv_smem, stream>>>(
        pqkv, pdout, plse, pdelta, pd, dm.T, dm.H, dm.D, scale);
    OCTET_CUDA_LAUNCH_CHECK("attention_backward_dkdv");
  });
}

// cuDNN's fused attention where it takes the shape, else the own kernels.
void CudaBackend::causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                                   Tensor& lse) const {
  if (cudnn_forward(qkv, heads, heads, scale, out, lse)) return;
  causal_attention_fallback(qkv, heads, scale, out, lse);
}

void CudaBackend::causal_attention_backward(const Tensor& dout, const Tensor& qkv,
                                            const Tensor& out, const Tensor& lse, int64_t heads,
                                            float scale, Tensor& dqkv) const {
  if (cudnn_backward(dout, qkv, out, lse, heads, heads, scale, dqkv)) return;
  causal_attention_backward_fallback(dout, qkv, out, lse, heads, scale, dqkv);
}

// Through cuDNN only; false (nothing written) when cuDNN does not take it. The backward runs
// only after a forward that did.
bool CudaBackend::grouped_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale,
                                    Tensor& out, Tensor& lse) const {
  return cudnn_forward(qkv, heads, kv_heads, scale, out, lse);
}

bool CudaBackend::grouped_attention_backward(const Tensor& dout, const Tensor& qkv,
                                             const Tensor& out, const Tensor& lse, int64_t heads,
                                             int64_t kv_heads, float scale, Tensor& dqkv) const {
  return cudnn_backward(dout, qkv, out, lse, heads, kv_heads, scale, dqkv);
}

bool last_attention_used_cudnn() { return t_last_used_cudnn; }

}  // namespace octet::cuda
