// One optimizer step's result as the Trainer reports it.
#pragma once

#include <cstdint>

#include "train/gradient_sync.h"

namespace octet::train {

struct StepResult {
  int64_t step = 0;           // 1-based: the step just run
  double loss = 0.0;          // mean over the micro-batches; NaN when the step was skipped
  double grad_norm = 0.0;     // before clipping; NaN when the step was skipped
  float lr = 0.f;             // the learning rate the step used (or would have)
  bool skipped = false;       // the loss or the gradient norm was NaN/inf: no update
  int64_t nonfinite_run = 0;  // skipped steps in a row, this one included
  CommBytes comm;             // data parallel: what the step communicated (zeros alone)
};

}  // namespace octet::train
