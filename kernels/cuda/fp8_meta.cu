// FP8 scale bookkeeping on the GPU: the delayed-scaling slot update (runtime/fp8_meta.cpp's rule)
// for a list of slots in one launch, current scaling's scale from a device amax, and a device
// reciprocal. The scale formulas are runtime/fp8_scaling.h, shared with the CPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/fp8_scaling.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

using ops::detail::SlotUpdate;

// One slot of the list, as the kernel reads it from the device table.
struct SlotEntry {
  float* history;    // (len,) f32 amax history; [0] collected this step's amax
  float* scale;      // (1,) f32
  float* scale_inv;  // (1,) f32
  int64_t len;
  float fp8_max;
  int margin;
  AmaxComputeAlgo algo;
};

// One warp per slot (blockDim.x == 32, blockIdx.x = slot), update_fp8_slot's steps in order:
// nothing when history[0] is 0; amax over the window (or the newest); the history rolls left
// with the newest wrapping to the end and a fresh 0 in front; the scale from delayed_scale.
__global__ void update_slots_kernel(const SlotEntry* slots) {
  const SlotEntry s = slots[blockIdx.x];
  const int lane = threadIdx.x;
  float* h = s.history;
  const float newest = h[0];
  if (newest == 0.f) return;  // the same on every lane

  float amax = newest;
  if (s.algo == AmaxComputeAlgo::kMax) {
    // fmaxf ignores NaN, and a max does not depend on the order it is taken in: the CPU's
    // sequential fmax from 0 gives the same value.
    float m = 0.f;
    for (int64_t i = lane; i < s.len; i += kWarp) m = fmaxf(m, h[i]);
    amax = warp_reduce(m, MaxOp());
  }
  __syncwarp();  // every lane has read the history before any lane writes it

  // h[i] = h[i + 1], 32 entries at a time: a pass reads all its sources (including the first
  // entry of the next pass) before it writes, and later passes only read further right.
  for (int64_t base = 0; base + 1 < s.len; base += kWarp) {
    const int64_t i = base + lane;
    const bool moves = i + 1 < s.len;
    const float next = moves ? h[i + 1] : 0.f;
    __syncwarp();
    if (moves) h[i] = next;
    __syncwarp();
  }
  if (lane == 0) {
    h[s.len - 1] = newest;
    h[0] = 0.f;
    const float scale = octet::delayed_scale(amax, *s.scale, s.fp8_max, s.margin);
    *s.scale = scale;
    *s.scale_inv = scale_inverse(scale);
  }
}

__global__ void current_scale_kernel(const float* amax, float fp8_max, float amax_epsilon,
                                     bool power_2, float* scale, float* scale_inv) {
  const float s = octet::current_scale(amax[0], fp8_max, amax_epsilon, power_2);
  scale[0] = s;
  scale_inv[0] = scale_inverse(s);
}

__global__ void reciprocal_kernel(const float* x, float* out) { out[0] = scale_inverse(x[0]); }

void check_slot_tensor(const Tensor& t, int64_t numel, Device device, const char* name) {
  OCTET_CHECK(t.defined() && t.dtype() == DType::kF32 && t.device() == device &&
                  (numel < 0 ? t.numel() >= 1 : t.numel() == numel),
              "update_fp8_slots: ", name, " must be an f32 tensor on ", device, " with ",
              numel < 0 ? "at least one element" : "one element", ", got ", t);
}

}  // namespace

void CudaBackend::update_fp8_slots(const std::vector<SlotUpdate>& slots) const {
  if (slots.empty()) return;
  const Device device = slots.front().slot->scale.device();
  OCTET_CHECK(device.is_cuda(), "update_fp8_slots: slot tensors on ", device, ", not CUDA");
  OCTET_CHECK(slots.size() <= size_t{0x7FFFFFFF}, "update_fp8_slots: too many slots");
  std::vector<SlotEntry> table;
  table.reserve(slots.size());
  for (const SlotUpdate& u : slots) {
    FP8Slot& slot = *u.slot;
    check_slot_tensor(slot.scale, 1, device, "scale");
    check_slot_tensor(slot.scale_inv, 1, device, "scale_inv");
    check_slot_tensor(slot.amax_history, -1, device, "amax_history");
    table.push_back({slot.amax_history.data_as<float>(), slot.scale.data_as<float>(),
                     slot.scale_inv.data_as<float>(), slot.amax_history.numel(), u.fp8_max,
                     u.margin, u.algo});
  }
  const cudaStream_t stream = stream_of(slots.front().slot->scale);
  const Tensor device_table = upload_table(table, device, stream);
  update_slots_kernel<<<static_cast<unsigned>(table.size()), kWarp, 0, stream>>>(
      static_cast<const SlotEntry*>(device_table.data()));
  OCTET_CUDA_LAUNCH_CHECK("update_slots_kernel");
  // The launch wrote every slot's tensors (update_fp8_slot bumps the CPU's itself).
  for (const SlotUpdate& u : slots) {
    u.slot->amax_history.bump_version();
    u.slot->scale.bump_version();
    u.slot->scale_inv.bump_version();
  }
}

void CudaBackend::current_scale(const Tensor& amax, float fp8_max, float amax_epsilon,
                                Power2Scale power_2, Tensor& scale, Tensor& scale_inv) const {
  current_scale_kernel<<<1, 1, 0, stream_of(amax)>>>(
      amax.data_as<float>(), fp8_max, amax_epsilon, power_2 == Power2Scale::kOn,
      scale.data_as<float>(), scale_inv.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("current_scale_kernel");
}

// The scale_inv of data a kernel other than the per-tensor cast wrote (that cast writes its own).
void CudaBackend::reciprocal(const Tensor& x, Tensor& out) const {
  reciprocal_kernel<<<1, 1, 0, stream_of(x)>>>(x.data_as<float>(), out.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("reciprocal_kernel");
}

}  // namespace octet::cuda
