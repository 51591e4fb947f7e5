// Argument checks shared by the ops layer's dispatch files (kernels/ops.cpp, kernels/nn.cpp).
#pragma once

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace octet::ops::detail {

// Argument `name` of `op` is a defined tensor.
inline void check_defined(const char* op, const Tensor& t, const char* name) {
  OCTET_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
}

}  // namespace octet::ops::detail
