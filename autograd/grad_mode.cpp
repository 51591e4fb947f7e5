// Thread-local grad-mode state.
#include "autograd/grad_mode.h"

namespace octet::autograd {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
bool inference_mode() { return t_inference_mode; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

InferenceModeGuard::InferenceModeGuard()
    : previous_grad_(t_grad_enabled), previous_inference_(t_inference_mode) {
  t_grad_enabled = false;
  t_inference_mode = true;
}
InferenceModeGuard::~InferenceModeGuard() {
  t_grad_enabled = previous_grad_;
  t_inference_mode = previous_inference_;
}

EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

}  // namespace octet::autograd
