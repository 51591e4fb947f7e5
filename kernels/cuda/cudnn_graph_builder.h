// The cuDNN 9 backend (graph) API in small pieces: checked calls and attribute setters, owned
// descriptors, and a builder that adds tensors and ops to one operation graph and plans it.
// Included by the cuDNN sources only (not built by the CUDA emulation).
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace octet::cuda::cudnn {

// ---- checks ----

std::string last_cudnn_error();

#define OCTET_CUDNN_CHECK(call)                                                             \
  do {                                                                                      \
    const cudnnStatus_t octet_cudnn_status_ = (call);                                       \
    OCTET_CHECK(octet_cudnn_status_ == CUDNN_STATUS_SUCCESS, #call,                         \
                " failed: ", cudnnGetErrorString(octet_cudnn_status_), last_cudnn_error()); \
  } while (0)

// Names the attribute in the message (the call text alone would not).
void set_attribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t count, const void* values,
                   const char* what);
#define OCTET_CUDNN_SET(desc, name, type, count, values) \
  set_attribute(desc, name, type, count, values, #name)

// One descriptor-valued attribute of an operation, named for set_attribute's message.
struct DescAttr {
  cudnnBackendAttributeName_t name;
  const char* what;
  cudnnBackendDescriptor_t desc;  // null: left unset
};
#define OCTET_CUDNN_DESC(name, desc) \
  DescAttr { name, #name, desc }

// ---- descriptors ----

// An owned backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    OCTET_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
  }
  ~Desc() {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Unique ids of the graph's virtual tensors count up from here; the ids of the tensors bound at
// execution stay below it.
constexpr int64_t kFirstVirtual = 100;

// A finalized execution plan and every descriptor it was built from (kept alive with it).
struct Plan {
  std::vector<std::unique_ptr<Desc>> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
  // Backward only: the graph's form (see BackwardForm in attention_cudnn.cu).
  bool dq_accum = false;
  bool softmax_sum_in_memory = false;
};

// Builds one operation graph, op by op, in the order cudnn-frontend emits them.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                  const Dims& strides, bool is_virtual, bool by_value = false,
                                  bool reorder_f16x16 = false);
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t type, const Dims& dims,
                                          const Dims& strides) {
    return tensor(next_virtual_++, type, dims, strides, true);
  }
  // A host f32 scalar passed by value in the variant pack.
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x[, b[, t]]); GEN_INDEX takes `axis`.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 int64_t axis = -1);
  // Convenience: an f32-math pointwise op into a new virtual tensor of `type`.
  cudnnBackendDescriptor_t pointwise_to(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                        cudnnBackendDescriptor_t b, cudnnDataType_t type,
                                        const Dims& dims, const Dims& strides);

  // c = a · b over the last two dims, batched over the first two; f32 accumulation.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c);

  // y = reduce(x) over the dims where y has extent 1; f32 math.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y);

  // y is x re-described (the graph's transposes are such views).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // s (B, H, T, T) with every key after the query replaced by -FLT_MAX (cudnn-frontend's causal
  // mask: row index >= column index keeps the score).
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t fill,
                                       const Dims& dims, const Dims& strides);

  // Finalizes the graph and the first engine configuration cuDNN's heuristics offer that
  // finalizes into a plan. Throws when there is none.
  std::unique_ptr<Plan> finish();

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    owned_.push_back(std::make_unique<Desc>(type));
    return owned_.back()->get();
  }
  // An operation of `type` with `attrs` set (in order, the null ones skipped), finalized and
  // added to the graph.
  void add_operation(cudnnBackendDescriptorType_t type, std::initializer_list<DescAttr> attrs);

  cudnnHandle_t handle_;
  std::vector<std::unique_ptr<Desc>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

}  // namespace octet::cuda::cudnn
