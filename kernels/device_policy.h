// Device policy of the ops layer, in one place: the device an op runs on (every tensor argument
// on it, else an error naming the op and the devices) and, for the call into its backend, that
// device made current together with its table. Results are allocated on the op's device.
#pragma once

#include <initializer_list>

#include "kernels/backend.h"
#include "runtime/cuda.h"

namespace octet::ops::detail {

// One tensor argument of an op, named as the op's messages name it. Null and undefined tensors
// (an output not asked for, no bias) take no part.
struct DeviceArg {
  DeviceArg(const Tensor& t, const char* arg_name) : tensor(&t), name(arg_name) {}
  DeviceArg(const Tensor* t, const char* arg_name) : tensor(t), name(arg_name) {}
  const Tensor* tensor;
  const char* name;
};

// The device `op` runs on: the one all its defined tensor arguments share (at least one must be
// defined). Two devices among them are a caller error naming both arguments and devices.
Device op_device(const char* op, std::initializer_list<DeviceArg> args);

// `device` made current for as long as this lives, and its backend:
//   on_device(device)->softmax(x, y);
// As a temporary it lives to the end of the full expression: one call, one guard.
class OnDevice {
 public:
  explicit OnDevice(Device device) : backend_(backend_for(device)), guard_(device) {}
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  const Backend* operator->() const { return &backend_; }
  const Backend& operator*() const { return backend_; }

 private:
  const Backend& backend_;  // looked up first: a build without CUDA says so before the guard
  octet::cuda::DeviceGuard guard_;
};
inline OnDevice on_device(Device device) { return OnDevice(device); }

// The dispatch that ends a quantize op of x into data and its scales (`scales_name` in device
// messages): run(backend) on the op's device, then both outputs' versions bumped.
template <typename Run>
void quantize_on_device(const char* op, const Tensor& x, Tensor& data, Tensor& scales,
                        const char* scales_name, Run&& run) {
  const Device device = op_device(op, {{x, "x"}, {data, "data"}, {scales, scales_name}});
  run(*on_device(device));
  data.bump_version();
  scales.bump_version();
}

// The dispatch that ends a dequantize op of data and its scales (`scales_name` in device
// messages): `out` of `shape` and `dtype` made on the op's device and filled by
// run(backend, out).
template <typename Run>
Tensor dequantize_on_device(const char* op, const Tensor& data, const Tensor& scales,
                            const char* scales_name, const Shape& shape, DType dtype, Run&& run) {
  const Device device = op_device(op, {{data, "data"}, {scales, scales_name}});
  Tensor out = Tensor::empty(shape, dtype, device);
  run(*on_device(device), out);
  return out;
}

}  // namespace octet::ops::detail
