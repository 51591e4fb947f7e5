// Data-parallel training over a Communicator (DESIGN.md "Data parallel"): the ranks' gradients
// averaged (each rank's share summed) in buckets that start reducing while the backward still runs,
// the global gradient's norm and clipping, and ZeRO-1 (the optimizer state sharded across ranks,
// each rank's updated part of the parameters gathered by every rank after the step). The
// Trainer drives it; the FP8 scope reduces the amaxes (modules/fp8_autocast.h).
//
// Every rank ends a step with the same bits in every parameter: a bucket is reduced once per
// element, in rank order, and copied to every rank (runtime/comm.h), the norm is summed in one
// order from parts that every rank holds alike, and ZeRO-1 applies the same element-wise update
// to each element as the unsharded optimizer does, so ZeRO-1 and plain data parallelism give
// the same parameters bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "modules/module.h"
#include "modules/optimizer.h"
#include "runtime/comm.h"
#include "runtime/safetensors.h"
#include "train/gradient_sync.h"

namespace octet::train {

// 0: every rank holds the whole optimizer state; 1 (ZeRO-1): each rank holds the state of one
// part of every gradient bucket, and gradients are reduce-scattered instead of all-reduced.
enum class ZeroStage : uint8_t { kNone = 0, kOptimizerState = 1 };

class DataParallel final : public GradientSync {
 public:
  // Buckets of about `bucket_bytes` of f32 gradient, filled in reverse parameter order (the
  // order the backward produces gradients), and a hook on every parameter's gradient. `comm`
  // has more than one rank; the parameters live on one device.
  DataParallel(std::shared_ptr<Communicator> comm, std::vector<modules::Parameter> params,
               ZeroStage zero, int64_t bucket_bytes);
  ~DataParallel();  // removes the hooks
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& comm() override { return *comm_; }
  ZeroStage zero() const { return zero_; }
  // ZeRO-1: each parameter's part that this rank's optimizer owns (modules::Optimizer's
  // shards); empty without ZeRO.
  const std::vector<modules::ElementRange>& optimizer_shards() const override { return shards_; }
  // ZeRO-1, once the optimizer exists: FP8 primary weights gathered as FP8 bytes no longer need
  // the module's full f32 copy (the optimizer holds this rank's part of the master); others get
  // one, kept current by every step's gather.
  void attach(modules::Optimizer& optimizer) override;

  // At the start of each step: the byte counts of step_bytes() start again.
  void begin_step() override;
  // The mean of every rank's `value` (the loss), the same bits on every rank; NaN anywhere
  // gives NaN everywhere, so every rank skips a non-finite step together.
  double mean(double value) override;

  // Before each backward of a step: `last` for the step's last micro-batch, whose gradients
  // are complete when the backward has added into them, so each bucket starts reducing as soon
  // as its gradients are in. Each rank's loss must be scaled by 1 / ranks (its share of the
  // global mean; the Trainer does it): the buckets sum the ranks' gradients.
  void begin_backward(bool last) override;
  // After the last backward: every bucket reduced and the global gradient (the mean over every
  // rank's rows) in each parameter's .grad (ZeRO-1: in this rank's part of it). Every
  // parameter must have a gradient (an unused one is an error naming it).
  void finish_gradients() override;
  // The L2 norm of the global gradient, the same bits on every rank, and the gradients scaled
  // down to max_norm as modules::clip_grad_norm does (max_norm <= 0 only measures).
  double clip(double max_norm) override;
  // The same, with the norm left on the gradients' device and nothing read on the host (ZeRO-1
  // all-gathers the ranks' parts of it as a tensor, where the communicator takes them).
  modules::GradNorm clip_on_device(double max_norm) override;
  // ZeRO-1, after optimizer.step(): every rank's updated part of every parameter to every rank.
  void gather_parameters(modules::Optimizer& optimizer) override;
  // ZeRO-1: the optimizer's state as full tensors, named as an unsharded optimizer's
  // state_dict() (so any number of ranks can load the checkpoint); a collective. Without ZeRO:
  // optimizer.state_dict().
  NamedTensors optimizer_state(modules::Optimizer& optimizer) override;
  // ZeRO-1, after the optimizer loaded a checkpoint: the modules' full masters (formats
  // gathered as f32) made from the loaded parts.
  void after_load(modules::Optimizer& optimizer) override;

  // Every rank's micro-batch losses, all-gathered (rank-major).
  void gather_losses(const Tensor& mine, Tensor& all) override { comm_->all_gather(mine, all); }
  // What the step since begin_step() handed to the communicator.
  CommBytes step_bytes() const override;
  size_t num_buckets() const { return buckets_.size(); }
  // Buckets of the last step whose reduction started during its backward, from a gradient
  // hook (the rest started in finish_gradients): the overlap, observable.
  size_t started_in_backward() const { return started_in_backward_; }

 private:
  enum class Gather : uint8_t {
    kValues,    // the parameters' own values (f32, bf16): ZeRO-1 gathers them as they are
    kFp8Bytes,  // per-tensor delayed-scaling FP8 primary weights: each rank casts its part
    kMasters,   // other FP8 primary weights: the f32 master is gathered, every rank casts it
  };
  struct Slot {
    size_t param;    // index into params_
    int64_t offset;  // first element in the bucket
    int64_t numel;
  };
  struct Bucket {
    Gather gather = Gather::kValues;
    DType dtype = DType::kF32;  // what ZeRO-1 gathers: the parameter's dtype, or f32 masters
    std::vector<Slot> slots;
    int64_t numel = 0;          // padded to a multiple of the rank count
    int64_t part = 0;           // numel / ranks: the elements each rank reduces (ZeRO-1: owns)
    Tensor grads;               // (numel,) f32
    Tensor reduced;             // ZeRO-1: (part,) f32, this rank's part of the averaged gradient
    std::vector<bool> arrived;  // per slot, in this backward
    size_t pending_slots = 0;
    std::unique_ptr<PendingCollective> pending;
  };
  // The part of slot `s` of bucket `b` that rank `rank` owns: parameter elements
  // [begin, end), at `at` in the rank's part of the bucket; begin == end when none.
  struct Owned {
    int64_t begin = 0, end = 0, at = 0;
  };
  static Owned owned(const Bucket& b, const Slot& s, int rank);

  void on_gradient(size_t param, const Tensor& grad);
  void launch_ready();
  void progress();
  // Writes this rank's part of slot i (its owned elements, 1-D) into dst.
  using PartWriter = std::function<void(size_t slot, Tensor& dst)>;
  // Every rank's parts of bucket `b` as written by `write`, gathered: (numel,) of `dtype`.
  Tensor gather(Bucket& b, DType dtype, const PartWriter& write);
  // `param`'s elements that this rank's optimizer owns, 1-D.
  Tensor optimizer_part(const Tensor& param, const Slot& s) const;
  void gather_fp8(Bucket& b, modules::Optimizer& optimizer,
                  std::vector<std::pair<const modules::Parameter*, Tensor>>& amaxes);
  void gather_masters(Bucket& b, modules::Optimizer& optimizer, bool requantize);

  std::shared_ptr<Communicator> comm_;
  // Duplicates of comm_ that the buckets take in turn, so that a bucket's reduction overlaps
  // the next one's and the FP8 amax reductions on comm_ (runtime/comm.h, duplicate()).
  std::vector<std::shared_ptr<Communicator>> lanes_;
  std::vector<modules::Parameter> params_;
  ZeroStage zero_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // per parameter: (bucket, slot)
  std::vector<modules::ElementRange> shards_;
  bool armed_ = false;
  size_t next_launch_ = 0;
  size_t started_in_backward_ = 0;
  CommBytes bytes_;
  int64_t sent_at_step_start_ = 0;
};

}  // namespace octet::train
