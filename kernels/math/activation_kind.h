// kernels/nn.h's Activation as compile-time code, shared by the CPU and CUDA kernels:
// act<kAct>(x), act_grad<kAct>(x), and the switch that turns the runtime enum into the template
// argument.
#pragma once

#include "kernels/math/activation.h"
#include "kernels/nn.h"
#include "runtime/error.h"
#include "runtime/macros.h"

namespace octet::math {

template <ops::Activation kAct>
OCTET_HD float act(float x) {
  if constexpr (kAct == ops::Activation::kGelu) return gelu_tanh(x);
  if constexpr (kAct == ops::Activation::kRelu) return relu(x);
  if constexpr (kAct == ops::Activation::kSquaredRelu) return squared_relu(x);
  if constexpr (kAct == ops::Activation::kSilu) return silu(x);
}

template <ops::Activation kAct>
OCTET_HD float act_grad(float x) {
  if constexpr (kAct == ops::Activation::kGelu) return gelu_tanh_grad(x);
  if constexpr (kAct == ops::Activation::kRelu) return relu_grad(x);
  if constexpr (kAct == ops::Activation::kSquaredRelu) return squared_relu_grad(x);
  if constexpr (kAct == ops::Activation::kSilu) return silu_grad(x);
}

// Calls f.template operator()<kAct>() for the runtime activation `a`.
template <typename F>
void dispatch_activation(ops::Activation a, F&& f) {
  switch (a) {
    case ops::Activation::kGelu:
      return f.template operator()<ops::Activation::kGelu>();
    case ops::Activation::kRelu:
      return f.template operator()<ops::Activation::kRelu>();
    case ops::Activation::kSquaredRelu:
      return f.template operator()<ops::Activation::kSquaredRelu>();
    case ops::Activation::kSilu:
      return f.template operator()<ops::Activation::kSilu>();
  }
  OCTET_FAIL("unknown activation ", static_cast<int>(a));
}

}  // namespace octet::math
