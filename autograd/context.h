// The save-for-backward context (DESIGN.md "Saved tensors and ownership"): plain tensors are
// saved by reference with a version check; owned saveables by reference, untouched; internal
// saveables hand their buffers over, so the context is their only holder until restore.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "runtime/saveable.h"
#include "runtime/tensor.h"

namespace octet::autograd {

class Context {
 public:
  // A recording context belongs to a node; a non-recording one (grad disabled, or no input
  // needs a gradient) ignores every save, so nothing is kept.
  explicit Context(bool recording = true) : recording_(recording) {}
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  bool recording() const { return recording_; }

  // Saves tensors by reference (undefined tensors allowed: restore gives them back undefined).
  template <typename... Ts>
  void save(const Ts&... tensors) {
    (save_tensor(tensors), ...);
  }
  void save_tensor(const Tensor& tensor);
  // Saves an owned object by reference or takes an internal object's buffers.
  void save_object(std::shared_ptr<Saveable> object);

  // Everything saved with save(), in order, version-checked. Throws once released.
  std::vector<Tensor> restore_tensors();
  template <size_t N>
  std::array<Tensor, N> restore() {
    std::vector<Tensor> all = restore_tensors();
    check_count(all.size(), N);
    std::array<Tensor, N> out;
    for (size_t i = 0; i < N; ++i) out[i] = std::move(all[i]);
    return out;
  }
  // Objects saved with save_object(), in order. Internal ones get their buffers back, and the
  // context lets go of the buffers: from here the object (held by the caller) is their holder.
  std::vector<std::shared_ptr<Saveable>> restore_objects();
  template <typename T>
  std::shared_ptr<T> restore_object(size_t index) {
    std::vector<std::shared_ptr<Saveable>> all = restore_objects();
    check_count(all.size(), index + 1, true);
    auto typed = std::dynamic_pointer_cast<T>(all[index]);
    check_type(typed != nullptr, index);
    return typed;
  }

  // Drops all saved state now (after the node's backward unless the graph is retained).
  void release();
  bool released() const { return released_; }

  // Name of the owning node, for error messages.
  void set_owner_name(std::string name) { owner_ = std::move(name); }

 private:
  struct SavedTensor {
    Tensor tensor;
    uint64_t version = 0;
  };
  struct SavedObject {
    std::shared_ptr<Saveable> object;
    // Internal objects: the buffers the context holds (kept, and counted as saved, until release
    // even once handed back, so a retained graph still accounts for them).
    std::vector<Tensor> buffers;
    bool internal = false;
    uint64_t version = 0;           // owned objects: their version when saved
    std::vector<SavedTensor> held;  // owned objects: their buffers and those buffers' versions
    bool restored = false;          // internal objects: buffers already handed back
  };

  void check_live(const char* what) const;
  void check_owned(const SavedObject& s, size_t index) const;
  void check_count(size_t have, size_t want, bool at_least = false) const;
  void check_type(bool ok, size_t index) const;
  static void hold(const Tensor& t);
  static void unhold(const Tensor& t);

  bool recording_;
  bool released_ = false;
  std::string owner_ = "operation";
  std::vector<SavedTensor> tensors_;
  std::vector<SavedObject> objects_;
};

// Test-only switch: keep restored state until the graph dies (the behaviour octet avoids), to
// measure the peak-memory difference. Thread-local; restores the previous policy on exit.
class KeepSavedUntilGraphDiesForTesting {
 public:
  KeepSavedUntilGraphDiesForTesting();
  ~KeepSavedUntilGraphDiesForTesting();

 private:
  bool previous_;
};
bool keep_saved_until_graph_dies();

}  // namespace octet::autograd
