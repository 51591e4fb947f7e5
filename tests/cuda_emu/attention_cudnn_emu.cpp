// CUDA emulation build: stands in for kernels/cuda/attention_cudnn.cu, which needs cuDNN (a GPU
// library the emulator cannot run). cuDNN "declines" every shape, so causal_attention takes
// octet's own kernels (kernels/cuda/attention.cu), which the emulator runs. The real cuDNN path
// only runs on a GPU.
#include "kernels/cuda/attention_cudnn.h"

namespace octet::cuda::cudnn {

bool attention_forward(const Tensor&, int64_t, int64_t, float, Tensor&, Tensor&) { return false; }

AttentionRuns attention_runs() { return {}; }  // never runs here

bool attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                        int64_t, float, Tensor&) {
  return false;
}

}  // namespace octet::cuda::cudnn
