// The CUDA backend: every op of kernels/backend.h, each defined in the file of its kernels
// (kernels/cuda/*.cu). Tensors live on the current CUDA device and kernels run on its octet
// stream (runtime/cuda.h), in order with every other octet operation. Scalars that the CPU reads
// on the host (a scale, a scale_inv) stay on the device: one-element f32 device tensors read by
// the kernels, so no launch waits for the host. Counts of a cast (FP8CastCounts) are kept on the
// device (runtime/fp8_stats.h, DeviceCastStats) and read when a metrics log takes them.
#pragma once

#include "kernels/backend.h"

namespace octet::cuda {

class CudaBackend final : public ops::detail::Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool takes_16bit_activations() const override { return true; }  // the kernels' ActIn / ActOut
  OCTET_BACKEND_OVERRIDES
};

}  // namespace octet::cuda
