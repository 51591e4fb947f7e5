// The cuDNN backend-API helpers declared in cudnn_graph_builder.h: the checked attribute setter
// and GraphBuilder's tensors, ops and engine search. Not built by the CUDA emulation.
#include <cudnn_graph.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cudnn_graph_builder.h"

namespace octet::cuda::cudnn {

std::string last_cudnn_error() {
  char message[1024] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message[0] != '\0' ? std::string(" (") + message + ")" : std::string();
}

void set_attribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t count, const void* values,
                   const char* what) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(desc, name, type, count, values);
  OCTET_CHECK(status == CUDNN_STATUS_SUCCESS, "cudnnBackendSetAttribute(", what,
              ") failed: ", cudnnGetErrorString(status), last_cudnn_error());
}

cudnnBackendDescriptor_t GraphBuilder::tensor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                              const Dims& strides, bool is_virtual, bool by_value,
                                              bool reorder_f16x16) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) {
    OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  }
  if (reorder_f16x16) {
    const cudnnBackendTensorReordering_t mode = CUDNN_TENSOR_REORDERING_F16x16;
    OCTET_CUDNN_SET(t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1,
                    &mode);
  }
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(t));
  return t;
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                             cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                             cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis) {
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  OCTET_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  OCTET_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) OCTET_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(pw));
  add_operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                {OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)});
}

cudnnBackendDescriptor_t GraphBuilder::pointwise_to(cudnnPointwiseMode_t mode,
                                                    cudnnBackendDescriptor_t x,
                                                    cudnnBackendDescriptor_t b,
                                                    cudnnDataType_t type, const Dims& dims,
                                                    const Dims& strides) {
  cudnnBackendDescriptor_t y = virtual_tensor(type, dims, strides);
  pointwise(mode, CUDNN_DATA_FLOAT, x, b, nullptr, y);
  return y;
}

void GraphBuilder::matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t c) {
  cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  OCTET_CUDNN_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(mm));
  add_operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                {OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)});
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t red = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  OCTET_CUDNN_SET(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  OCTET_CUDNN_SET(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(red));
  add_operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                {OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)});
}

void GraphBuilder::reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  add_operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                {OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x),
                 OCTET_CUDNN_DESC(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)});
}

void GraphBuilder::add_operation(cudnnBackendDescriptorType_t type,
                                 std::initializer_list<DescAttr> attrs) {
  cudnnBackendDescriptor_t op = make(type);
  for (const DescAttr& a : attrs) {
    if (a.desc != nullptr) {
      set_attribute(op, a.name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.desc, a.what);
    }
  }
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(op));
  ops_.push_back(op);
}

cudnnBackendDescriptor_t GraphBuilder::causal_mask(cudnnBackendDescriptor_t s,
                                                   cudnnBackendDescriptor_t fill, const Dims& dims,
                                                   const Dims& strides) {
  cudnnBackendDescriptor_t row = virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr, row, 2);
  cudnnBackendDescriptor_t col = virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr, col, 3);
  cudnnBackendDescriptor_t keep = virtual_tensor(CUDNN_DATA_BOOLEAN, dims, strides);
  pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep);
  cudnnBackendDescriptor_t masked = virtual_tensor(CUDNN_DATA_FLOAT, dims, strides);
  // BINARY_SELECT: y = t ? x : b.
  pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, fill, keep, masked);
  return masked;
}

std::unique_ptr<Plan> GraphBuilder::finish() {
  auto plan = std::make_unique<Plan>();
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  OCTET_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                  static_cast<int64_t>(ops_.size()), ops_.data());
  OCTET_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  OCTET_CUDNN_CHECK(cudnnBackendFinalize(graph));

  std::string last = "no engine configuration";
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    OCTET_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &graph);
    OCTET_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cudnnStatus_t status = cudnnBackendFinalize(heur);
    if (status != CUDNN_STATUS_SUCCESS) {
      last = std::string("engine heuristics: ") + cudnnGetErrorString(status) + last_cudnn_error();
      continue;
    }
    // The results are written into engine-config descriptors created beforehand.
    constexpr int kMaxConfigs = 16;
    std::array<cudnnBackendDescriptor_t, kMaxConfigs> configs{};
    for (auto& config : configs) config = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t count = 0;
    status =
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 kMaxConfigs, &count, configs.data());
    if (status != CUDNN_STATUS_SUCCESS || count < 1) {
      last = std::string("engine heuristics results: ") + cudnnGetErrorString(status) +
             last_cudnn_error();
      continue;
    }
    for (int64_t i = 0; i < count && i < kMaxConfigs; ++i) {
      cudnnBackendDescriptor_t exec = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      OCTET_CUDNN_SET(exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
      OCTET_CUDNN_SET(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                      1, &configs[static_cast<size_t>(i)]);
      status = cudnnBackendFinalize(exec);
      if (status != CUDNN_STATUS_SUCCESS) {
        last = std::string("execution plan: ") + cudnnGetErrorString(status) + last_cudnn_error();
        continue;
      }
      int64_t elements = 0;
      OCTET_CUDNN_CHECK(cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &elements,
                                                 &plan->workspace_bytes));
      plan->plan = exec;
      plan->keep = std::move(owned_);
      return plan;
    }
  }
  OCTET_FAIL("no cuDNN engine runs this graph: ", last);
}

}  // namespace octet::cuda::cudnn
