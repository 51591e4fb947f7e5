// Gradient buckets and their reduction while the backward runs, the global norm, and ZeRO-1's
// gathers of parameters and optimizer state.
#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/variable.h"
#include "kernels/fp8_per_tensor.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "kernels/quantized.h"
#include "runtime/error.h"
#include "runtime/float8_tensor.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace octet::train {
namespace {

using modules::Parameter;

// Communicators the buckets take in turn: bucket b's second step must start before bucket
// b + kLanes starts, which leaves it the backward of the buckets between to finish its first.
constexpr size_t kLanes = 2;

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

// A per-tensor FP8 primary weight under delayed scaling: its scale is known before the cast, so
// each rank can cast its own part and the ranks gather FP8 bytes.
const DelayedScalingQuantizer* fp8_bytes_quantizer(const Parameter& p) {
  if (!p.is_fp8() || (*p.fp8)->format() != kPerTensorFormat) return nullptr;
  return dynamic_cast<const DelayedScalingQuantizer*>((*p.fp8)->quantizer().get());
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, std::vector<Parameter> params,
                           ZeroStage zero, int64_t bucket_bytes)
    : comm_(std::move(comm)), params_(std::move(params)), zero_(zero) {
  OCTET_CHECK(comm_ != nullptr && comm_->size() > 1,
              "DataParallel: a communicator of several ranks is needed, got ",
              comm_ == nullptr ? 0 : comm_->size());
  OCTET_CHECK(bucket_bytes >= 4, "DataParallel: bucket_bytes must be >= 4, got ", bucket_bytes);
  OCTET_CHECK(!params_.empty(), "DataParallel: the model has no parameters");
  const Device device = params_.front().tensor->device();
  const bool zero1 = zero_ == ZeroStage::kOptimizerState;
  const int ranks = comm_->size();
  where_.assign(params_.size(), {SIZE_MAX, SIZE_MAX});
  // One open bucket per kind of bytes ZeRO-1 gathers, so that a bucket gathers one kind.
  std::map<std::pair<Gather, DType>, size_t> open;
  for (size_t k = params_.size(); k-- > 0;) {
    const Parameter& p = params_[k];
    OCTET_CHECK(p.tensor->device() == device, "DataParallel: parameter \"", p.name, "\" is on ",
                p.tensor->device(), " but \"", params_.front().name, "\" on ", device,
                " (one device per rank)");
    if (!autograd::requires_grad(*p.tensor)) continue;  // frozen: nothing to reduce
    // Plain data parallelism buckets alike, so that both sum the norm over the same parts.
    const std::pair<Gather, DType> key = !p.is_fp8() ? std::pair{Gather::kValues, p.tensor->dtype()}
                                         : fp8_bytes_quantizer(p) != nullptr
                                             ? std::pair{Gather::kFp8Bytes, (*p.fp8)->dtype()}
                                             : std::pair{Gather::kMasters, DType::kF32};
    auto it = open.find(key);
    if (it == open.end() || buckets_[it->second].numel * 4 >= bucket_bytes) {
      Bucket b;
      b.gather = key.first;
      b.dtype = key.second;
      buckets_.push_back(std::move(b));
      it = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    Bucket& b = buckets_[it->second];
    where_[k] = {it->second, b.slots.size()};
    b.slots.push_back({k, b.numel, p.value_numel()});
    b.numel += p.value_numel();
  }
  MemTagScope tag(MemTag::kGrads);
  for (Bucket& b : buckets_) {
    b.part = (b.numel + ranks - 1) / ranks;
    b.numel = b.part * ranks;
    b.grads = Tensor::zeros({b.numel}, DType::kF32, device);
    if (zero1) b.reduced = Tensor::zeros({b.part}, DType::kF32, device);
    b.arrived.assign(b.slots.size(), false);
  }
  if (zero1) {
    for (size_t k = 0; k < params_.size(); ++k) {
      const auto [bi, si] = where_[k];
      if (bi == SIZE_MAX) {
        shards_.push_back({0, params_[k].value_numel()});  // frozen: every rank keeps it all
        continue;
      }
      const Owned o = owned(buckets_[bi], buckets_[bi].slots[si], comm_->rank());
      shards_.push_back({o.begin, o.end});
    }
  }
  for (size_t i = 0; i < std::min<size_t>(kLanes, buckets_.size()); ++i) {
    lanes_.push_back(comm_->duplicate());
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    if (where_[k].first == SIZE_MAX) continue;
    autograd::set_grad_ready_hook(*params_[k].tensor,
                                  [this, k](const Tensor& g) { on_gradient(k, g); });
  }
}

DataParallel::~DataParallel() {
  for (size_t k = 0; k < params_.size(); ++k) {
    if (where_[k].first == SIZE_MAX) continue;
    try {
      autograd::set_grad_ready_hook(*params_[k].tensor, {});
    } catch (const std::exception& e) {
      OCTET_LOG_ERROR("DataParallel: removing the gradient hook of {} failed: {}", params_[k].name,
                      e.what());
    }
  }
}

DataParallel::Owned DataParallel::owned(const Bucket& b, const Slot& s, int rank) {
  const int64_t first = rank * b.part;
  const int64_t lo = std::max(s.offset, first);
  const int64_t hi = std::min(s.offset + s.numel, first + b.part);
  if (lo >= hi) return {};
  return {lo - s.offset, hi - s.offset, lo - first};
}

void DataParallel::attach(modules::Optimizer& optimizer) {
  if (zero_ != ZeroStage::kOptimizerState) return;
  OCTET_CHECK(optimizer.sharded() || shards_.empty(),
              "DataParallel::attach: ZeRO-1 needs the optimizer built with optimizer_shards()");
  for (const Bucket& b : buckets_) {
    for (const Slot& s : b.slots) {
      const Parameter& p = params_[s.param];
      if (b.gather == Gather::kFp8Bytes && p.initial_master != nullptr) {
        *p.initial_master = Tensor();  // this rank's part of the master is the optimizer's
      } else if (b.gather == Gather::kMasters && p.initial_master != nullptr &&
                 !p.initial_master->defined()) {
        MemTagScope tag(MemTag::kOptimizer);
        *p.initial_master = ops::dequantize(**p.fp8, DType::kF32);
      }
    }
  }
}

void DataParallel::begin_step() {
  bytes_ = {};
  sent_at_step_start_ = comm_->bytes_sent();
}

CommBytes DataParallel::step_bytes() const {
  CommBytes out = bytes_;
  out.sent = comm_->bytes_sent() - sent_at_step_start_;
  return out;
}

double DataParallel::mean(double value) {
  double v[1] = {value};
  comm_->all_reduce(std::span<double>(v, 1), ReduceOp::kAvg);
  return v[0];
}

void DataParallel::begin_backward(bool last) {
  armed_ = last;
  if (!last) return;
  next_launch_ = 0;
  for (Bucket& b : buckets_) {
    b.arrived.assign(b.slots.size(), false);
    b.pending_slots = b.slots.size();
    b.pending.reset();
  }
}

void DataParallel::on_gradient(size_t param, const Tensor& grad) {
  if (!armed_) return;
  const auto [bi, si] = where_[param];
  Bucket& b = buckets_[bi];
  const Slot& s = b.slots[si];
  OCTET_ASSERT(!b.arrived[si], "gradient of ", params_[param].name, " arrived twice in a backward");
  Tensor dst = b.grads.slice(s.offset, s.offset + s.numel).reshape(grad.shape());
  ops::copy_(dst, grad);
  b.arrived[si] = true;
  --b.pending_slots;
  launch_ready();
  progress();
}

void DataParallel::launch_ready() {
  // In bucket order on every rank, so that every rank starts the same collectives in the
  // same order, whatever order the gradients arrived in.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending_slots == 0) {
    Communicator& lane = *lanes_[next_launch_ % lanes_.size()];
    Bucket& b = buckets_[next_launch_++];
    // A sum: each rank's backward already took its 1 / ranks share (Trainer::step).
    b.pending = zero_ == ZeroStage::kOptimizerState
                    ? lane.start_reduce_scatter(b.grads, b.reduced, ReduceOp::kSum)
                    : lane.start_all_reduce(b.grads, ReduceOp::kSum);
    bytes_.grads += static_cast<int64_t>(b.grads.nbytes());
  }
}

void DataParallel::progress() {
  for (size_t i = 0; i < next_launch_; ++i) {
    if (buckets_[i].pending != nullptr) buckets_[i].pending->test();
  }
}

void DataParallel::finish_gradients() {
  OCTET_CHECK(armed_,
              "DataParallel::finish_gradients without a last backward (begin_backward(true))");
  armed_ = false;
  for (Bucket& b : buckets_) {
    for (size_t i = 0; i < b.slots.size(); ++i) {
      OCTET_CHECK(b.arrived[i], "data parallel: parameter \"", params_[b.slots[i].param].name,
                  "\" got no gradient in the step's last backward on rank ", comm_->rank(),
                  " (every trained parameter must take part in every rank's loss)");
    }
  }
  started_in_backward_ = next_launch_;
  launch_ready();
  OCTET_ASSERT(next_launch_ == buckets_.size(), "a complete bucket was not started");
  const bool zero1 = zero_ == ZeroStage::kOptimizerState;
  for (Bucket& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
    for (const Slot& s : b.slots) {
      Tensor g = autograd::grad(*params_[s.param].tensor);
      if (!zero1) {
        ops::copy_(g, b.grads.slice(s.offset, s.offset + s.numel).reshape(g.shape()));
        continue;
      }
      const Owned o = owned(b, s, comm_->rank());
      if (o.end == o.begin) continue;
      Tensor dst = flat(g).slice(o.begin, o.end);
      ops::copy_(dst, b.reduced.slice(o.at, o.at + (o.end - o.begin)));
    }
  }
}

modules::GradNorm DataParallel::clip_on_device(double max_norm) {
  // Per rank's part of every bucket, summed over buckets in order; then over ranks in order.
  // Both forms hold the parts alike: plain data parallelism measures every rank's part itself,
  // ZeRO-1 measures its own and gathers the others', so the norm is the same bits either way.
  const int ranks = comm_->size();
  const bool zero1 = zero_ == ZeroStage::kOptimizerState;
  const Device device = params_.front().tensor->device();  // no bucket when all are frozen
  Tensor parts;
  {
    MemTagScope tag(MemTag::kWorkspace);
    parts = Tensor::empty({ranks}, DType::kI64, device);
  }
  std::vector<Tensor> slices;
  auto part_of = [&](int rank) {
    slices.clear();
    for (const Bucket& b : buckets_) {
      slices.push_back(zero1 ? b.reduced : b.grads.slice(rank * b.part, (rank + 1) * b.part));
    }
    std::vector<const Tensor*> list;
    for (const Tensor& t : slices) list.push_back(&t);
    return ops::sum_of_squares_part(list, device);
  };
  if (zero1) {
    comm_->all_gather(part_of(comm_->rank()), parts);
  } else {
    for (int r = 0; r < ranks; ++r) parts.slice(r, r + 1).copy_bytes_from(part_of(r));
  }
  // The gradients this rank clips: all of them, or (ZeRO-1) the parts its optimizer owns.
  std::vector<Tensor> grads;
  for (const Bucket& b : buckets_) {
    for (const Slot& s : b.slots) {
      const Owned o = zero1 ? owned(b, s, comm_->rank()) : Owned{0, s.numel, 0};
      if (o.end == o.begin) continue;
      grads.push_back(flat(autograd::grad(*params_[s.param].tensor)).slice(o.begin, o.end));
    }
  }
  std::vector<Tensor*> list;
  for (Tensor& g : grads) list.push_back(&g);
  return modules::GradNorm(ops::clip_grad_norm_from_parts_(list, parts, max_norm));
}

double DataParallel::clip(double max_norm) { return clip_on_device(max_norm).read(); }

Tensor DataParallel::gather(Bucket& b, DType dtype, const PartWriter& write) {
  const Device device = b.grads.device();
  Tensor packed, full;
  {
    MemTagScope tag(MemTag::kWorkspace);
    packed = Tensor::empty({b.part}, dtype, device);
    full = Tensor::empty({b.numel}, dtype, device);
  }
  for (const Slot& s : b.slots) {
    const Owned o = owned(b, s, comm_->rank());
    if (o.end == o.begin) continue;
    Tensor dst = packed.slice(o.at, o.at + (o.end - o.begin));
    write(static_cast<size_t>(&s - b.slots.data()), dst);
  }
  comm_->all_gather(packed, full);
  return full;
}

void DataParallel::gather_parameters(modules::Optimizer& optimizer) {
  if (zero_ != ZeroStage::kOptimizerState) return;
  std::vector<std::pair<const Parameter*, Tensor>> fp8_amaxes;  // (weight, (1,) amax)
  for (Bucket& b : buckets_) {
    switch (b.gather) {
      case Gather::kValues: {
        const Tensor full = gather(b, b.dtype, [&](size_t i, Tensor& dst) {
          const Slot& s = b.slots[i];
          dst.copy_bytes_from(optimizer_part(*params_[s.param].tensor, s));
        });
        for (const Slot& s : b.slots) {
          Tensor dst = flat(*params_[s.param].tensor);
          dst.copy_bytes_from(full.slice(s.offset, s.offset + s.numel));
        }
        bytes_.params += static_cast<int64_t>(full.nbytes());
        break;
      }
      case Gather::kFp8Bytes:
        gather_fp8(b, optimizer, fp8_amaxes);
        break;
      case Gather::kMasters:
        gather_masters(b, optimizer, /*requantize=*/true);
        break;
    }
  }
  if (fp8_amaxes.empty()) return;
  // max |master| of every part, with the slot's history[0]: the unsharded cast's amax.
  const auto n = static_cast<int64_t>(fp8_amaxes.size());
  Tensor packed = Tensor::empty({n}, DType::kF32, fp8_amaxes.front().second.device());
  for (int64_t i = 0; i < n; ++i) {
    Tensor dst = packed.slice(i, i + 1);
    ops::copy_(dst, fp8_amaxes[static_cast<size_t>(i)].second);
  }
  comm_->all_reduce(packed, ReduceOp::kMax);
  for (int64_t i = 0; i < n; ++i) {
    const auto* q = fp8_bytes_quantizer(*fp8_amaxes[static_cast<size_t>(i)].first);
    Tensor newest = q->amax_history().slice(0, 1);
    ops::copy_(newest, packed.slice(i, i + 1));
  }
}

Tensor DataParallel::optimizer_part(const Tensor& param, const Slot& s) const {
  const modules::ElementRange r = shards_[s.param];
  return flat(param).slice(r.begin, r.end);
}

void DataParallel::gather_fp8(Bucket& b, modules::Optimizer& optimizer,
                              std::vector<std::pair<const Parameter*, Tensor>>& amaxes) {
  const Device device = b.grads.device();
  // Each rank casts its part of the master with the weight's scale (the same on every rank),
  // max-accumulating |x| into a copy of the slot's history[0].
  const size_t first = amaxes.size();
  for (const Slot& s : b.slots) {
    const auto* q = fp8_bytes_quantizer(params_[s.param]);
    amaxes.emplace_back(&params_[s.param], q->amax_history().slice(0, 1).clone());
  }
  const Tensor full = gather(b, b.dtype, [&](size_t i, Tensor& dst) {
    const Slot& s = b.slots[i];
    const auto* q = fp8_bytes_quantizer(params_[s.param]);
    Tensor& amax = amaxes[first + i].second;
    ops::quantize_fp8(optimizer.master_part(s.param), q->scale(), &dst, nullptr, &amax,
                      q->counts_for(AmaxRecording::kRecord));
  });
  const Tensor one = Tensor::full({1}, 1.f, DType::kF32, device);
  for (const Slot& s : b.slots) {
    const Parameter& p = params_[s.param];
    auto& f = dynamic_cast<Float8Tensor&>(**p.fp8);
    Tensor row = f.rowwise_data();
    flat(row).copy_bytes_from(full.slice(s.offset, s.offset + s.numel));
    // What quantize_into writes besides the data: scale_inv, and column-wise data when held
    // (the byte transpose of the row-wise data, exactly what the cast writes).
    Tensor scale_inv = f.scale_inv();
    scale_inv.copy_bytes_from(ops::div(one, fp8_bytes_quantizer(p)->scale()));
    if (f.has(Usage::kColumnwise)) {
      Tensor col = f.columnwise_data();
      col.copy_bytes_from(ops::transpose_2d(row.flatten_2d()));
    }
    f.bump_version();
  }
  bytes_.params += static_cast<int64_t>(full.nbytes());
}

void DataParallel::gather_masters(Bucket& b, modules::Optimizer& optimizer, bool requantize) {
  const Tensor full = gather(b, DType::kF32, [&](size_t i, Tensor& dst) {
    dst.copy_bytes_from(optimizer.master_part(b.slots[i].param));
  });
  for (const Slot& s : b.slots) {
    const Parameter& p = params_[s.param];
    Tensor master = flat(*p.initial_master);
    master.copy_bytes_from(full.slice(s.offset, s.offset + s.numel));
    if (requantize) ops::quantize_into(**p.fp8, *p.initial_master, AmaxRecording::kRecord);
  }
  bytes_.params += static_cast<int64_t>(full.nbytes());
}

void DataParallel::after_load(modules::Optimizer& optimizer) {
  if (zero_ != ZeroStage::kOptimizerState) return;
  for (Bucket& b : buckets_) {
    if (b.gather == Gather::kMasters) gather_masters(b, optimizer, /*requantize=*/false);
  }
}

NamedTensors DataParallel::optimizer_state(modules::Optimizer& optimizer) {
  if (zero_ != ZeroStage::kOptimizerState) return optimizer.state_dict();
  std::vector<modules::Optimizer::ShardEntry> entries = optimizer.shard_state();
  // Per parameter: its entries by suffix (".exp_avg", ...).
  std::vector<std::vector<const modules::Optimizer::ShardEntry*>> of(params_.size());
  for (const auto& e : entries) {
    if (e.param >= 0) of[static_cast<size_t>(e.param)].push_back(&e);
  }
  auto suffix = [&](const modules::Optimizer::ShardEntry& e) {
    return e.name.substr(params_[static_cast<size_t>(e.param)].name.size());
  };
  std::map<std::string, Tensor> full_state;
  for (Bucket& b : buckets_) {
    std::vector<std::string> suffixes;  // in first-seen order, the same on every rank
    for (const Slot& s : b.slots) {
      for (const auto* e : of[s.param]) {
        if (std::find(suffixes.begin(), suffixes.end(), suffix(*e)) == suffixes.end()) {
          suffixes.push_back(suffix(*e));
        }
      }
    }
    for (const std::string& sfx : suffixes) {
      const Tensor full = gather(b, DType::kF32, [&](size_t i, Tensor& dst) {
        for (const auto* e : of[b.slots[i].param]) {
          if (suffix(*e) == sfx) dst.copy_bytes_from(e->tensor);
        }
      });
      for (const Slot& s : b.slots) {
        const Parameter& p = params_[s.param];
        full_state[p.name + sfx] =
            full.slice(s.offset, s.offset + s.numel).reshape(p.value_shape()).clone();
      }
    }
  }
  NamedTensors out;
  for (const auto& e : entries) {
    auto it = full_state.find(e.name);
    // The step and the state of frozen parameters are whole on every rank.
    out.emplace_back(e.name, it != full_state.end() ? it->second : e.tensor);
  }
  return out;
}

}  // namespace octet::train
