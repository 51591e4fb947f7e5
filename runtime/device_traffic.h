// The device traffic of a stretch of work (kernel launches and the bytes they moved, GEMM FLOPs,
// copies) and the step time a simple model predicts from it. Recorded by the CUDA emulation build,
// where it needs no GPU; other builds say it is not available.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace octet {

struct KernelTraffic {
  std::string kernel;  // as written at the launch
  int64_t launches = 0;
  int64_t bytes_read = 0;     // distinct 4 KiB pages each launch read, times 4096, summed
  int64_t bytes_written = 0;  // the same for the pages written
};

struct DeviceTraffic {
  std::vector<KernelTraffic> kernels;  // in order of first launch
  int64_t launches = 0;                // kernel launches (cuBLASLt's own are not counted)
  int64_t gemm_calls = 0;
  int64_t gemm_flops = 0;  // 2 m n k per matmul, exact
  int64_t gemm_fp8_flops = 0;
  int64_t gemm_bytes = 0;         // operands, scales, bias and output of the matmuls, exact
  int64_t copy_device_bytes = 0;  // device-to-device copies, read plus written, exact
  int64_t copy_host_bytes = 0;    // between host and device, exact
  int64_t memset_bytes = 0;       // exact

  // What the kernels, device copies and memsets moved: everything but the GEMMs and host copies.
  int64_t non_gemm_bytes() const;
};

// The model's constants; docs/cuda.md says where the defaults come from.
struct TrafficRates {
  double bf16_tflops = 730;
  double fp8_tflops = 1350;
  double bandwidth_gbs = 4800;
  double launch_us = 4;
};

// GEMM FLOPs at their rate, plus non-GEMM bytes at the bandwidth, plus launches (the cuBLASLt
// calls too) at the fixed cost, in milliseconds.
double predicted_ms(const DeviceTraffic& traffic, const TrafficRates& rates);

// The non-GEMM bytes one training step of a pre-norm GPT-2 layer (LayerNorm, QKV, causal
// attention, projection, LayerNorm, GELU MLP, biases, residuals; AdamW with f32 masters and
// moments) must move in a fused design, to hold a recorded step against. The design: every
// tensor is written once by its producer and read once by each consumer pass; each
// high-precision GEMM operand is read once by the cast that writes all its usages (amaxes taken
// in the producers); GELU + cast and dGELU + dbias + cast are one pass each, as are the other
// gradients' cast + dbias (high precision: dbias in the GEMM epilogue); each residual add (and the
// sum of the two gradients at each residual backward) a pass of its own, as TransformerEngine's
// modules leave them, so the GEMM outputs round as they do there; flash attention (forward reads q,
// k, v and writes the output and the log-sum-exp; backward reads q, k, v, the output, its gradient
// and the log-sum-exp, and writes dq, dk, dv and the row deltas); the optimizer one pass over
// master, moments, gradient and the model-dtype weight; the FP8 weights cast once a step.
struct LayerStepShape {
  int64_t tokens = 0, d_model = 0, ffn = 0, heads = 0;
  int64_t activation_bytes = 2;  // the model dtype's element size
};
// How a precision stores a GEMM operand, per element and per usage (row-wise, column-wise).
struct OperandFormat {
  bool quantized = false;         // false: the GEMMs read the model-dtype tensors, no casts
  double data_bytes = 1;          // 1 for FP8; the model dtype's size where Hopper expands
  double scale_bytes = 0;         // activations and gradients
  double weight_scale_bytes = 0;  // weights
  int64_t cast_bytes = 0;         // per cast: a per-tensor scale_inv and amax
};
// The format of `octet bench`'s precision names (bf16, delayed, current, blockwise, mxfp8,
// nvfp4, quartet2, rowwise) on Hopper: MXFP8, NVFP4 and row-wise GEMMs run on operands the cast
// writes expanded to bf16.
OperandFormat operand_format_on_hopper(const std::string& precision);
double layer_step_floor_bytes(const LayerStepShape& shape, const OperandFormat& format);

// Whether this build records device traffic (the CUDA emulation build on x86-64).
bool device_traffic_available();

// Records the device traffic of its lifetime (every thread's work); one at a time.
class TrafficRecording {
 public:
  TrafficRecording();  // throws where device_traffic_available() is false, or one is running
  ~TrafficRecording();
  TrafficRecording(const TrafficRecording&) = delete;
  TrafficRecording& operator=(const TrafficRecording&) = delete;
  DeviceTraffic stop();  // what was recorded; once

 private:
  bool running_ = true;
};

}  // namespace octet
