// The one same-device check of the ops layer.
#include "kernels/device_policy.h"

namespace octet::ops::detail {

Device op_device(const char* op, std::initializer_list<DeviceArg> args) {
  const DeviceArg* first = nullptr;
  for (const DeviceArg& arg : args) {
    if (arg.tensor == nullptr || !arg.tensor->defined()) continue;
    if (first == nullptr) {
      first = &arg;
      continue;
    }
    OCTET_CHECK(arg.tensor->device() == first->tensor->device(), op, ": ", arg.name, " is on ",
                arg.tensor->device(), " but ", first->name, " is on ", first->tensor->device(),
                " (an op's tensors must all be on one device; move them with Tensor::to)");
  }
  OCTET_ASSERT(first != nullptr, op, ": no defined tensor to take the device from");
  return first->tensor->device();
}

}  // namespace octet::ops::detail
