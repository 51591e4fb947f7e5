// Save-for-backward context: holds, version checks, hand-over of internal buffers, release.
#include "autograd/context.h"

#include "runtime/error.h"

namespace octet::autograd {
namespace {
thread_local bool t_keep_until_graph_dies = false;
}  // namespace

bool keep_saved_until_graph_dies() { return t_keep_until_graph_dies; }
KeepSavedUntilGraphDiesForTesting::KeepSavedUntilGraphDiesForTesting()
    : previous_(t_keep_until_graph_dies) {
  t_keep_until_graph_dies = true;
}
KeepSavedUntilGraphDiesForTesting::~KeepSavedUntilGraphDiesForTesting() {
  t_keep_until_graph_dies = previous_;
}

Context::~Context() { release(); }

void Context::hold(const Tensor& t) {
  if (t.defined()) t.storage()->hold_for_backward();
}

void Context::unhold(const Tensor& t) {
  if (t.defined()) t.storage()->release_from_backward();
}

void Context::save_tensor(const Tensor& tensor) {
  if (!recording_) return;
  check_live("save");
  tensors_.push_back({tensor, tensor.defined() ? tensor.version() : 0});
  hold(tensor);
}

void Context::save_object(std::shared_ptr<Saveable> object) {
  if (!recording_) return;
  check_live("save");
  OCTET_CHECK(object != nullptr, "save_object in ", owner_, ": null object");
  SavedObject saved;
  saved.internal = object->ownership() == Ownership::kInternal;
  saved.version = object->version();
  if (saved.internal) {
    saved.buffers = object->take_buffers();
    for (const Tensor& t : saved.buffers) hold(t);
  }
  saved.object = std::move(object);
  objects_.push_back(std::move(saved));
}

std::vector<Tensor> Context::restore_tensors() {
  check_live("restore");
  std::vector<Tensor> out;
  out.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SavedTensor& s = tensors_[i];
    if (s.tensor.defined()) {
      OCTET_CHECK(s.tensor.version() == s.version, "tensor #", i, " (", s.tensor,
                  ") saved for the backward of ", owner_,
                  " was modified by an in-place operation after it was saved (version ", s.version,
                  ", now ", s.tensor.version(), ")");
    }
    out.push_back(s.tensor);
  }
  return out;
}

std::vector<std::shared_ptr<Saveable>> Context::restore_objects() {
  check_live("restore");
  std::vector<std::shared_ptr<Saveable>> out;
  out.reserve(objects_.size());
  for (size_t i = 0; i < objects_.size(); ++i) {
    SavedObject& s = objects_[i];
    if (!s.internal) {
      OCTET_CHECK(s.object->version() == s.version, "owned object #", i,
                  " saved for the backward of ", owner_,
                  " was modified in place after it was saved (version ", s.version, ", now ",
                  s.object->version(), "), e.g. by an optimizer step between forward and backward");
    }
    if (s.internal && !s.restored) {
      if (keep_saved_until_graph_dies()) {
        s.object->give_buffers(s.buffers);  // the context keeps its references too
        s.restored = true;
      } else {
        for (const Tensor& t : s.buffers) unhold(t);
        s.object->give_buffers(std::move(s.buffers));
        s.buffers.clear();
        s.restored = true;
      }
    }
    out.push_back(s.object);
  }
  return out;
}

void Context::release() {
  if (released_) return;
  released_ = true;
  for (const SavedTensor& s : tensors_) unhold(s.tensor);
  for (const SavedObject& s : objects_) {
    for (const Tensor& t : s.buffers) unhold(t);
  }
  tensors_.clear();
  objects_.clear();
}

void Context::check_live(const char* what) const {
  OCTET_CHECK(!released_, "cannot ", what, " in the backward of ", owner_,
              ": saved state already released (the graph was freed by a previous backward; pass "
              "RetainGraph::kYes to the first backward to run it again)");
}

void Context::check_count(size_t have, size_t want, bool at_least) const {
  OCTET_ASSERT(at_least ? have >= want : have == want, owner_, " restored ", have,
               " saved items, expected ", want);
}

void Context::check_type(bool ok, size_t index) const {
  OCTET_ASSERT(ok, owner_, ": saved object #", index, " has an unexpected type");
}

}  // namespace octet::autograd
