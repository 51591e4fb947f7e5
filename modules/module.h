// Module: the base of every layer. Named parameters and buffers (recursive, dotted names),
// train/eval mode, a state dict for checkpoints, and parameter counts.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/quantized_tensor.h"
#include "runtime/tensor.h"

namespace octet {
class FP8Meta;
}  // namespace octet

namespace octet::modules {

class FP8State;

enum class Mode : uint8_t { kTrain, kEval };

// A trainable weight. `tensor` is the autograd leaf whose gradient the optimizer reads: the
// f32/bf16 value itself, or with FP8 primary weights a handle on the row-wise data of `fp8` (an
// owned quantized tensor; its gradient is f32 and the optimizer keeps the f32 master copy).
struct Parameter {
  std::string name;  // dotted, from the root module
  Tensor* tensor = nullptr;
  std::shared_ptr<QuantizedTensor>* fp8 = nullptr;  // set only for FP8 primary weights
  // FP8 primary weights: the f32 value they were cast from at initialisation; the optimizer
  // adopts it as its master copy (same storage, counted as optimizer state).
  Tensor* initial_master = nullptr;
  // The weight of an FP8 GEMM: the state whose slot forward_slot(fp8_gemm, kWeight) casts it
  // (null for parameters no FP8 GEMM reads: biases, norms, embeddings).
  FP8State* fp8_state = nullptr;
  int fp8_gemm = -1;
  bool is_fp8() const { return fp8 != nullptr && *fp8 != nullptr; }
  // The shape of the values the parameter stands for, which its gradient, master copy and
  // optimizer state have: an FP8 primary weight's logical shape (its leaf may be packed bytes,
  // two NVFP4 values a byte), else the tensor's.
  const Shape& value_shape() const { return is_fp8() ? (*fp8)->shape() : tensor->shape(); }
  int64_t value_numel() const { return is_fp8() ? (*fp8)->numel() : tensor->numel(); }
};

class Module {
 public:
  explicit Module(std::string type) : type_(std::move(type)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type() const { return type_; }

  // Every parameter below this module, depth first, with dotted names ("layers.0.fc1.weight").
  std::vector<Parameter> parameters();
  // Non-trainable state (FP8 scales and amax histories, stochastic-rounding streams, ...), with
  // dotted names.
  std::vector<std::pair<std::string, Tensor*>> buffers();
  // The FP8 state of every FP8 module below this one, with the module's dotted name ("" for this
  // module): recipes, quantizers and, under delayed scaling, the metas.
  std::vector<std::pair<std::string, FP8State*>> fp8_states();
  // The delayed-scaling FP8 state of every module below this one that has some, with the
  // module's dotted name ("" for this module): for diagnostics kept outside the state dict
  // (FP8Meta::take_cast_counts).
  std::vector<std::pair<std::string, FP8Meta*>> fp8_metas();
  int64_t num_parameters();

  void set_mode(Mode mode);
  void train() { set_mode(Mode::kTrain); }
  void eval() { set_mode(Mode::kEval); }
  bool training() const { return mode_ == Mode::kTrain; }

  // Moves every parameter (FP8 data included), its gradient and every buffer (FP8 metas
  // included) to `device`, in place; "no CUDA device ..." when there is none. Optimizers made
  // before the move follow too (their state moves with Optimizer::to).
  void to(Device device);
  // Where the module's state lives (the CPU until to() moves it).
  Device device() const { return device_; }

  // Names -> tensors: parameters (FP8 primary weights in their format's checkpoint form,
  // QuantizedTensor::rowwise_state: the data under the parameter's name, its scaling under a
  // suffix) and buffers. Tensors are handles to the live state.
  std::vector<std::pair<std::string, Tensor>> state_dict();
  // Copies values into the live state; every name must exist with the same shape and dtype, and
  // every state entry must be given (clear errors naming the key). A graph built before the load
  // and backwarded after it fails with the saved-tensor version error.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

 protected:
  // Registration, from the constructor of the derived module.
  void register_parameter(std::string name, Tensor* tensor);
  void register_fp8_parameter(std::string name, Tensor* tensor,
                              std::shared_ptr<QuantizedTensor>* fp8, Tensor* initial_master,
                              FP8State* state, int gemm);
  void register_buffer(std::string name, Tensor* tensor);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }
  // A weight in either form (see WeightStorage in modules/linear.h), read by GEMM `gemm` of
  // `state` (null: no FP8 GEMM).
  template <typename W>
  void register_weight(std::string name, W& w, FP8State* state = nullptr, int gemm = -1) {
    register_fp8_parameter(std::move(name), w.is_fp8() ? &w.fp8_leaf : &w.hp,
                           w.is_fp8() ? &w.fp8 : nullptr, w.is_fp8() ? &w.initial_master : nullptr,
                           state, gemm);
  }
  // Called by set_mode on every module.
  virtual void on_mode_change(Mode) {}
  // Buffers whose tensors may be replaced over time (FP8 metas rebuilt for a new recipe): asked
  // for afresh by every buffers() / state_dict() call.
  virtual std::vector<std::pair<std::string, Tensor*>> dynamic_buffers() { return {}; }
  // The same for buffers that stay on the host when the module moves (to() leaves them).
  virtual std::vector<std::pair<std::string, Tensor*>> dynamic_host_buffers() { return {}; }
  // This module's own FP8 state, or null (no FP8 GEMMs).
  virtual FP8State* own_fp8_state() { return nullptr; }

 private:
  enum class HostBuffers : uint8_t { kSkip, kKeep };
  // buffers(); with kSkip without the host-only ones: what to() moves.
  std::vector<std::pair<std::string, Tensor*>> collect_buffers(HostBuffers host);
  void visit(const std::string& prefix, const std::function<void(const std::string&, Module&)>& f);

  std::string type_;
  Mode mode_ = Mode::kTrain;
  Device device_ = Device::cpu();
  std::vector<Parameter> params_;  // names local to this module
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace octet::modules
