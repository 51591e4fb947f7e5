// How a training step's losses, gradients and parameters meet the other ranks. The Trainer holds
// one GradientSync, never none: DataParallel (train/data_parallel.h) across a communicator of
// several ranks, or LocalSync for one process, where each call does what one process needs and
// nothing more (the mean of one loss is the loss; the gradients are already complete).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "modules/module.h"
#include "modules/optimizer.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace octet::train {

// What a data-parallel step handed to the communicator, in bytes.
struct CommBytes {
  int64_t grads = 0;   // gradient buckets reduced (f32)
  int64_t params = 0;  // ZeRO-1: parameter bytes gathered after the step (FP8 primary weights
                       // as FP8 bytes, where their format allows)
  int64_t sent = 0;    // everything this rank sent to others in the step (Communicator::bytes_sent:
                       // buckets, parameters, the FP8 amax reductions, the loss)
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  virtual Communicator& comm() = 0;  // the ranks (one process: a single-rank communicator)
  // The part of each parameter this rank's optimizer owns (ZeRO-1); empty: all of it.
  virtual const std::vector<modules::ElementRange>& optimizer_shards() const = 0;
  // Once the optimizer exists (ZeRO-1 lets FP8 primary weights drop their full f32 copies).
  virtual void attach(modules::Optimizer& optimizer) = 0;

  virtual void begin_step() = 0;
  // The mean of every rank's `value` (a micro-batch's loss), the same bits on every rank.
  virtual double mean(double value) = 0;
  // Before each backward of a step; `last` for the step's last micro-batch.
  virtual void begin_backward(bool last) = 0;
  // After the last backward: the global gradient in each parameter's .grad.
  virtual void finish_gradients() = 0;
  // The global gradient's L2 norm (the same bits on every rank), the gradients scaled down to
  // max_norm (<= 0 only measures): on the host, or left on the gradients' device.
  virtual double clip(double max_norm) = 0;
  virtual modules::GradNorm clip_on_device(double max_norm) = 0;
  // Every rank's `mine` (its micro-batch losses) into `all`, rank-major.
  virtual void gather_losses(const Tensor& mine, Tensor& all) = 0;
  // After optimizer.step(): every rank's updated part of every parameter to every rank.
  virtual void gather_parameters(modules::Optimizer& optimizer) = 0;
  // The optimizer's state as full tensors, named as Optimizer::state_dict names them.
  virtual NamedTensors optimizer_state(modules::Optimizer& optimizer) = 0;
  // After the optimizer loaded a checkpoint.
  virtual void after_load(modules::Optimizer& optimizer) = 0;
  // What the step since begin_step() communicated (zeros in one process).
  virtual CommBytes step_bytes() const = 0;
};

// One process: the loss is its own mean, the gradients are complete when the backward ends, and
// clipping is modules::clip_grad_norm's.
class LocalSync final : public GradientSync {
 public:
  // `comm`: a communicator of one rank, or null for a SingleProcessCommunicator.
  LocalSync(std::shared_ptr<Communicator> comm, std::vector<modules::Parameter> params)
      : comm_(comm != nullptr ? std::move(comm) : std::make_shared<SingleProcessCommunicator>()),
        params_(std::move(params)) {
    OCTET_CHECK(comm_->size() == 1, "LocalSync: a communicator of ", comm_->size(),
                " ranks; data parallelism is DataParallel's");
  }

  Communicator& comm() override { return *comm_; }
  const std::vector<modules::ElementRange>& optimizer_shards() const override { return shards_; }
  void attach(modules::Optimizer&) override {}
  void begin_step() override {}
  double mean(double value) override { return value; }
  void begin_backward(bool) override {}
  void finish_gradients() override {}
  double clip(double max_norm) override { return modules::clip_grad_norm(params_, max_norm); }
  modules::GradNorm clip_on_device(double max_norm) override {
    return modules::clip_grad_norm_deferred(params_, max_norm);
  }
  void gather_losses(const Tensor& mine, Tensor& all) override {
    if (all.data() != mine.data()) ops::copy_(all, mine);
  }
  void gather_parameters(modules::Optimizer&) override {}
  NamedTensors optimizer_state(modules::Optimizer& optimizer) override {
    return optimizer.state_dict();
  }
  void after_load(modules::Optimizer&) override {}
  CommBytes step_bytes() const override { return {}; }

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<modules::Parameter> params_;
  std::vector<modules::ElementRange> shards_;  // none: the optimizer owns every element
};

}  // namespace octet::train
