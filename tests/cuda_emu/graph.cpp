// CUDA emulation build: stream capture and graphs. While a stream captures, the launches, the
// copies, the memsets and the cuBLASLt calls queued on it are recorded (each with its arguments,
// as CUDA records a node's parameters) instead of running; a graph instantiated from the capture
// runs them again, in order, at each cudaGraphLaunch, with every launch's checks made then (a
// node that points into freed memory is reported at its replay). A copy's host end is read or
// written at each replay, as CUDA's copy nodes do with page-locked memory. Calls CUDA refuses
// during a capture invalidate it and return its error: a synchronisation of the capturing stream
// or of the device, the legacy stream's copies and memsets while a (blocking) stream of the
// device captures, a wait on an event.
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "emu_internal.h"
#include "octet_cuda_emu/device.h"

struct CUgraph_st {
  std::vector<octet::emu::detail::GraphNode> nodes;
};
struct CUgraphExec_st {
  std::vector<octet::emu::detail::GraphNode> nodes;
  int device = 0;
};

namespace octet::emu::detail {
namespace {

struct Capture {
  int device = 0;
  std::vector<GraphNode> nodes;
  bool invalidated = false;
};

std::mutex& captures_mutex() {
  static std::mutex m;
  return m;
}
std::map<cudaStream_t, Capture>& captures() {
  static auto* m = new std::map<cudaStream_t, Capture>();
  return *m;
}

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

}  // namespace

bool capturing(cudaStream_t stream) {
  if (is_legacy(stream) || stream == cudaStreamPerThread) return false;
  std::lock_guard lock(captures_mutex());
  return captures().count(stream) != 0;
}

void capture(cudaStream_t stream, std::string what, std::function<void()> run) {
  std::lock_guard lock(captures_mutex());
  auto it = captures().find(stream);
  if (it == captures().end()) fatal("capture(" + what + ") on a stream that does not capture");
  if (!it->second.invalidated) it->second.nodes.push_back({std::move(what), std::move(run)});
}

cudaError_t refuse_in_capture(cudaStream_t stream, const char* call) {
  std::lock_guard lock(captures_mutex());
  cudaError_t error = cudaSuccess;
  for (auto& [s, c] : captures()) {
    const bool same = s == stream;
    const bool implicit = is_legacy(stream) && c.device == current_device();
    if (!same && !implicit) continue;
    if (!c.invalidated) {
      warn(std::string(call) +
           (same ? " on a capturing stream"
                 : " on the legacy stream while a "
                   "stream of the device captures") +
           ": the capture is invalidated");
    }
    c.invalidated = true;
    error = same ? cudaErrorStreamCaptureUnsupported : cudaErrorStreamCaptureImplicit;
  }
  return error;
}

cudaError_t refuse_device_wide(const char* call) {
  std::lock_guard lock(captures_mutex());
  cudaError_t error = cudaSuccess;
  for (auto& [s, c] : captures()) {
    if (c.device != current_device()) continue;
    if (!c.invalidated)
      warn(std::string(call) + " while a stream captures: the capture is invalidated");
    c.invalidated = true;
    error = cudaErrorStreamCaptureUnsupported;
  }
  return error;
}

void capture_launch(const LaunchConfig& config, std::vector<PointerArg> pointers,
                    std::function<void()> body) {
  auto node = [config, pointers = std::move(pointers), body = std::move(body)]() mutable {
    launch(config, pointers.data(), static_cast<int>(pointers.size()),
           &invoke<std::function<void()>>, &body);
  };
  capture(config.stream, config.name, std::move(node));
}

}  // namespace octet::emu::detail

using octet::emu::detail::record;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode) {
  namespace d = octet::emu::detail;
  if (d::is_legacy(stream) || stream == cudaStreamPerThread) {
    d::warn("cudaStreamBeginCapture on the legacy or per-thread default stream");
    return record(cudaErrorStreamCaptureUnsupported);
  }
  if (const cudaError_t e = d::check_stream(stream, "cudaStreamBeginCapture")) return record(e);
  std::lock_guard lock(d::captures_mutex());
  if (d::captures().count(stream) != 0) {
    d::warn("cudaStreamBeginCapture: the stream already captures");
    return record(cudaErrorIllegalState);
  }
  d::captures()[stream].device = d::current_device();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  namespace d = octet::emu::detail;
  if (graph == nullptr) return record(cudaErrorInvalidValue);
  std::lock_guard lock(d::captures_mutex());
  auto it = d::captures().find(stream);
  if (it == d::captures().end()) return record(cudaErrorIllegalState);
  const bool invalid = it->second.invalidated;
  *graph = invalid ? nullptr : new CUgraph_st{std::move(it->second.nodes)};
  d::captures().erase(it);
  return invalid ? record(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  namespace d = octet::emu::detail;
  if (status == nullptr) return record(cudaErrorInvalidValue);
  std::lock_guard lock(d::captures_mutex());
  auto it = d::captures().find(stream);
  *status = it == d::captures().end() ? cudaStreamCaptureStatusNone
                                      : (it->second.invalidated ? cudaStreamCaptureStatusInvalidated
                                                                : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return record(cudaErrorInvalidValue);
  if (nodes != nullptr) return record(cudaErrorNotSupported);  // only the count is emulated
  *count = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return record(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes, octet::emu::detail::current_device()};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  namespace d = octet::emu::detail;
  if (exec == nullptr) return record(cudaErrorInvalidValue);
  if (const cudaError_t e = d::check_stream(stream, "cudaGraphLaunch")) return record(e);
  if (d::capturing(stream)) {
    d::warn("cudaGraphLaunch into a capturing stream is not emulated");
    return record(cudaErrorNotSupported);
  }
  if (exec->device != d::current_device()) {
    d::warn("cudaGraphLaunch: the graph was instantiated on cuda:" + std::to_string(exec->device));
    return record(cudaErrorInvalidValue);
  }
  for (d::GraphNode& node : exec->nodes) node.run();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
