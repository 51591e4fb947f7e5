// The CPU backend: every op of kernels/backend.h, each defined in the file of its kernel
// (kernels/cpu/*.cpp). The data is in host memory, so a scalar tensor (a scale, an amax slot, a
// loss) is read and written there.
#pragma once

#include "kernels/backend.h"

namespace octet::cpu {

class CpuBackend final : public ops::detail::Backend {
 public:
  const char* name() const override { return "cpu"; }
  OCTET_BACKEND_OVERRIDES
};

}  // namespace octet::cpu
