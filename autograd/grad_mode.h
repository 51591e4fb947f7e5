// Grad modes as thread-local RAII guards: NoGradGuard records nothing; InferenceModeGuard records
// nothing and lets code skip backward-only work (column-wise FP8 copies, saved state).
#pragma once

namespace octet::autograd {

bool grad_enabled();    // false inside NoGradGuard or InferenceModeGuard
bool inference_mode();  // true inside InferenceModeGuard

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class InferenceModeGuard {
 public:
  InferenceModeGuard();
  ~InferenceModeGuard();
  InferenceModeGuard(const InferenceModeGuard&) = delete;
  InferenceModeGuard& operator=(const InferenceModeGuard&) = delete;

 private:
  bool previous_grad_;
  bool previous_inference_;
};

// Re-enables recording inside a no-grad region (e.g. recompute in backward).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace octet::autograd
