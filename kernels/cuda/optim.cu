// Optimizer updates on the GPU: AdamW over a whole list of tensors in one launch, and SGD. The
// per-element arithmetic is kernels/cpu/optim.cpp's, operation for operation, in f32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/optim.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

using ops::AdamWTensors;

// Elements per block of the multi-tensor kernel: 32 per thread.
constexpr int64_t kChunk = int64_t{kThreads} * 32;

// One tensor of the AdamW list, as the kernel reads it from the device table.
struct AdamWEntry {
  float* w;       // (n,) f32 master weights
  const void* g;  // (n,) f32 or bf16
  float* m;       // (n,) f32
  float* v;       // (n,) f32
  void* model;    // (n,) model_dtype: the updated w, stored again; null: none
  int64_t n;
  int64_t first_chunk;  // blocks before this tensor's first: a prefix sum over the list
  DType g_dtype;
  DType model_dtype;
  int g_size;   // bytes per element of g
  bool vector;  // w, g, m, v and model aligned for kVec-element accesses
};

// Host-computed constants, the same values the CPU computes.
struct AdamWConstants {
  float lr, beta1, beta2, eps;
  float one_minus_beta1, one_minus_beta2;  // 1.f - beta, as the CPU loop computes it
  float decay;                             // 1.f - lr * weight_decay
  float c1, c2;                            // bias corrections 1 - beta^step, from f64
  float weight_decay;
  // A step decided on the device (ops::DeviceStep), else null: a shut gate skips the update,
  // and c1, c2 come from the count in device memory; lr_device, when set, is the rate (and
  // decay is made from it as the host makes it).
  const float* gate;
  const int64_t* steps;
  const float* lr_device;
};

// Block b updates chunk (b - first_chunk) of the tensor whose chunk range holds b. Every
// operation is rounded separately (_rn intrinsics: no FMA contraction), in the CPU's order:
//   w' = w * decay;  m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g;
//   w = w' - (lr * (m / c1)) / (sqrt(v / c2) + eps)
__global__ void adamw_kernel(const AdamWEntry* table, int count, AdamWConstants k) {
  if (k.gate != nullptr) {
    if (*k.gate == 0.f) return;
    k.c1 = math::bias_correction(k.beta1, *k.steps);
    k.c2 = math::bias_correction(k.beta2, *k.steps);
    if (k.lr_device != nullptr) {
      k.lr = *k.lr_device;
      k.decay = __fsub_rn(1.f, __fmul_rn(k.lr, k.weight_decay));
    }
  }
  const int64_t b = blockIdx.x;
  // The last entry whose first chunk is <= b (entries are in chunk order, none empty).
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_chunk <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const AdamWEntry e = table[lo];
  // The chunk's elements, indexed from its start in 32 bits (kChunk elements at most); chunks
  // start at multiples of kChunk, so an aligned tensor's chunk is aligned too.
  const int64_t begin = (b - e.first_chunk) * kChunk;
  const int len = static_cast<int>(begin + kChunk < e.n ? kChunk : e.n - begin);
  float* w = e.w + begin;
  float* m = e.m + begin;
  float* v = e.v + begin;
  const void* g = static_cast<const char*>(e.g) + begin * e.g_size;
  void* model = e.model == nullptr
                    ? nullptr
                    : static_cast<char*>(e.model) + begin * (e.model_dtype == DType::kF32 ? 4 : 2);
  auto one = [&](float gi, float& wi, float& mi, float& vi) {
    const float wd = __fmul_rn(wi, k.decay);
    mi = __fadd_rn(__fmul_rn(k.beta1, mi), __fmul_rn(k.one_minus_beta1, gi));
    vi = __fadd_rn(__fmul_rn(k.beta2, vi), __fmul_rn(__fmul_rn(k.one_minus_beta2, gi), gi));
    const float step = __fdiv_rn(__fmul_rn(k.lr, __fdiv_rn(mi, k.c1)),
                                 __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, k.c2)), k.eps));
    wi = __fsub_rn(wd, step);
  };
  int done = 0;
  if (e.vector) {
    const int groups = len / kVec;
    for (int j = threadIdx.x; j < groups; j += blockDim.x) {
      const int i = j * kVec;
      float gv[kVec];
      load_f32_vec(g, e.g_dtype, i, gv);
      Vec<float> wv = load_vec(w, i), mv = load_vec(m, i), vv = load_vec(v, i);
      for (int q = 0; q < kVec; ++q) one(gv[q], wv.v[q], mv.v[q], vv.v[q]);
      store_vec(m, i, mv);
      store_vec(v, i, vv);
      store_vec(w, i, wv);
      if (model != nullptr) store_f32_vec(model, e.model_dtype, i, wv.v);
    }
    done = groups * kVec;
  }
  for (int i = done + threadIdx.x; i < len; i += blockDim.x) {
    float wi = w[i], mi = m[i], vi = v[i];
    one(load_f32(g, e.g_dtype, i), wi, mi, vi);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    if (model != nullptr) store_f32(model, e.model_dtype, i, wi);
  }
}

// SGD with momentum, the CPU's order: g' = g + wd w; buf = g' (first step or no buffer) or
// momentum buf + g'; w = w - lr buf.
template <typename I>
__global__ void sgd_kernel(float* w, const void* g, DType g_dtype, float* buf, I n, float lr,
                           float momentum, float wd, bool first, bool vector, const float* gate,
                           const int64_t* steps, const float* lr_device) {
  if (gate != nullptr) {  // a step decided on the device (ops::DeviceStep)
    if (*gate == 0.f) return;
    first = *steps <= 1;
    if (lr_device != nullptr) lr = *lr_device;
  }
  auto one = [&](float gr, float& wi, float& bi) {
    const float gi = __fadd_rn(gr, __fmul_rn(wd, wi));
    bi = (buf == nullptr || first) ? gi : __fadd_rn(__fmul_rn(momentum, bi), gi);
    wi = __fsub_rn(wi, __fmul_rn(lr, bi));
  };
  grid_stride_vec(
      n, vector,
      [&](I i) {
        float gv[kVec];
        load_f32_vec(g, g_dtype, i, gv);
        Vec<float> wv = load_vec(w, i), bv{};
        if (buf != nullptr && !first) bv = load_vec(buf, i);
        for (int k = 0; k < kVec; ++k) one(gv[k], wv.v[k], bv.v[k]);
        if (buf != nullptr) store_vec(buf, i, bv);
        store_vec(w, i, wv);
      },
      [&](I i) {
        float wi = w[i], bi = buf != nullptr && !first ? buf[i] : 0.f;
        one(load_f32(g, g_dtype, i), wi, bi);
        if (buf != nullptr) buf[i] = bi;
        w[i] = wi;
      });
}

__global__ void advance_steps_kernel(const float* gate, int64_t* steps) {
  if (*gate != 0.f) *steps += 1;
}

// One block: gate = 1 when every value and the f64 whose bits f64_bits holds are finite.
__global__ void finite_gate_kernel(const float* values, int n, const int64_t* f64_bits,
                                   float* gate) {
  int bad = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) bad |= isfinite(values[i]) ? 0 : 1;
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    const bool norm_finite = f64_bits == nullptr || isfinite(__longlong_as_double(*f64_bits));
    *gate = bad == 0 && norm_finite ? 1.f : 0.f;
  }
}

}  // namespace

// Every tensor of the list in one launch. A DeviceStep's gate and count are read by the kernels:
// nothing waits for them.
void CudaBackend::adamw_step(const std::vector<AdamWTensors>& tensors,
                             const ops::AdamWHyper& h) const {
  std::vector<AdamWEntry> table;
  table.reserve(tensors.size());
  int64_t chunks = 0;
  Device device = Device::cpu();
  for (const AdamWTensors& t : tensors) {
    const int64_t n = t.master->numel();
    if (n == 0) continue;  // no chunk: the kernel's search relies on every entry having one
    if (table.empty()) device = t.master->device();
    OCTET_CHECK(t.master->device() == device, "adamw_step: tensors on different devices (", device,
                " and ", t.master->device(), ")");
    const bool vector =
        vec_aligned(t.master->data(), 4) && vec_aligned(t.m->data(), 4) &&
        vec_aligned(t.v->data(), 4) && vec_aligned(t.grad->data(), t.grad->element_size()) &&
        (t.model == nullptr || vec_aligned(t.model->data(), t.model->element_size()));
    table.push_back({t.master->data_as<float>(), t.grad->data(), t.m->data_as<float>(),
                     t.v->data_as<float>(), t.model != nullptr ? t.model->data() : nullptr, n,
                     chunks, t.grad->dtype(), t.model != nullptr ? t.model->dtype() : DType::kF32,
                     static_cast<int>(t.grad->element_size()), vector});
    chunks += (n + kChunk - 1) / kChunk;
  }
  if (table.empty()) return;
  OCTET_CHECK(chunks <= int64_t{0x7FFFFFFF}, "adamw_step: ", chunks, " chunks is too many");
  OCTET_CHECK(table.size() <= size_t{0x7FFFFFFF}, "adamw_step: too many tensors");

  // The CPU's constants (kernels/cpu/optim.cpp), computed the same way on the host.
  AdamWConstants k;
  k.lr = h.lr;
  k.beta1 = h.beta1;
  k.beta2 = h.beta2;
  k.eps = h.eps;
  k.one_minus_beta1 = 1.f - h.beta1;
  k.one_minus_beta2 = 1.f - h.beta2;
  k.decay = 1.f - h.lr * h.weight_decay;
  k.c1 = math::bias_correction(h.beta1, h.step);
  k.c2 = math::bias_correction(h.beta2, h.step);
  k.weight_decay = h.weight_decay;
  k.gate = h.device_step.gate != nullptr ? h.device_step.gate->data_as<float>() : nullptr;
  k.steps = h.device_step.steps != nullptr ? h.device_step.steps->data_as<int64_t>() : nullptr;
  k.lr_device = h.device_step.lr != nullptr ? h.device_step.lr->data_as<float>() : nullptr;

  const cudaStream_t stream = stream_of(*tensors.front().master);
  const Tensor device_table = upload_table(table, device, stream);
  adamw_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
      static_cast<const AdamWEntry*>(device_table.data()), static_cast<int>(table.size()), k);
  OCTET_CUDA_LAUNCH_CHECK("adamw_kernel");
  // device_table goes back to the allocator's cache here; the stream orders its next user after
  // this kernel (runtime/cuda.cpp).
}

void CudaBackend::sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr,
                           float momentum, float weight_decay, int64_t step,
                           const ops::DeviceStep& device_step) const {
  const int64_t n = master.numel();
  if (n == 0) return;
  float* pb = momentum != 0.f ? buf.data_as<float>() : nullptr;  // momentum 0: no buffer
  const bool vector = vec_aligned(master.data(), 4) &&
                      vec_aligned(grad.data(), grad.element_size()) &&
                      (pb == nullptr || vec_aligned(pb, 4));
  with_index_type(n, [&]<typename I>(I) {
    sgd_kernel<I><<<vec_blocks_for(n), kThreads, 0, stream_of(master)>>>(
        master.data_as<float>(), grad.data(), grad.dtype(), pb, static_cast<I>(n), lr, momentum,
        weight_decay, step <= 1, vector,
        device_step.gate != nullptr ? device_step.gate->data_as<float>() : nullptr,
        device_step.steps != nullptr ? device_step.steps->data_as<int64_t>() : nullptr,
        device_step.lr != nullptr ? device_step.lr->data_as<float>() : nullptr);
    OCTET_CUDA_LAUNCH_CHECK("sgd_kernel");
  });
}

void CudaBackend::advance_steps(const Tensor& gate, Tensor& steps) const {
  advance_steps_kernel<<<1, 1, 0, stream_of(steps)>>>(gate.data_as<float>(),
                                                      steps.data_as<int64_t>());
  OCTET_CUDA_LAUNCH_CHECK("advance_steps_kernel");
}

void CudaBackend::finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate) const {
  const int64_t n = values.numel();
  OCTET_CHECK(n <= int64_t{0x7FFFFFFF}, "finite_gate: ", n, " values is too many");
  finite_gate_kernel<<<1, kThreads, 0, stream_of(gate)>>>(
      values.data_as<float>(), static_cast<int>(n),
      f64_bits != nullptr ? f64_bits->data_as<int64_t>() : nullptr, gate.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("finite_gate_kernel");
}

}  // namespace octet::cuda
