// The MPI communicator. Reductions are octet's own, not MPI_Allreduce's: an all-to-all hands
// rank r part r of every rank's buffer, rank r combines the parts in rank order, and an
// all-gather copies every reduced part to every rank. The result is then the same bits on every
// rank and in every run, whatever algorithm MPI picks, for the same bandwidth as a ring
// all-reduce; the non-blocking form advances through both steps from test() or wait().
//
// MPI matches collectives by the order ranks start them. When the first step of a two-step
// collective finishes is up to MPI, so a rank could start the second step before or after a
// later collective; the communicator therefore starts any pending second step before it starts
// anything else. Collectives meant to overlap each other use duplicate communicators.
#include "runtime/comm_mpi.h"

#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/error.h"
#include "runtime/memory.h"

// Every MPI call is checked (the communicator returns errors instead of aborting): the error
// names the call and MPI's message.
#define OCTET_MPI_CHECK(call)                                                     \
  do {                                                                            \
    const int octet_mpi_rc = (call);                                              \
    if (octet_mpi_rc != MPI_SUCCESS) {                                            \
      char octet_mpi_text[MPI_MAX_ERROR_STRING];                                  \
      int octet_mpi_len = 0;                                                      \
      MPI_Error_string(octet_mpi_rc, octet_mpi_text, &octet_mpi_len);             \
      OCTET_FAIL(#call, " failed: ", std::string(octet_mpi_text, octet_mpi_len)); \
    }                                                                             \
  } while (0)

namespace octet::detail {
namespace {

enum class Elem : uint8_t { kF32, kF64, kI32, kI64 };

Elem reducible(const Tensor& t, const char* what) {
  OCTET_CHECK(t.defined() && t.device().is_cpu(), what,
              ": the MPI communicator takes host tensors, got ", t,
              " (device tensors go through the NCCL communicator)");
  switch (t.dtype()) {
    case DType::kF32:
      return Elem::kF32;
    case DType::kI32:
      return Elem::kI32;
    case DType::kI64:
      return Elem::kI64;
    default:
      OCTET_FAIL(what, ": ", t, " cannot be reduced (f32, i32 or i64 tensors)");
  }
}

size_t elem_size(Elem e) { return e == Elem::kF32 || e == Elem::kI32 ? 4 : 8; }

template <typename T>
T combine(T a, T b, ReduceOp op) {
  if (op != ReduceOp::kMax) return a + b;
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a > b ? a : b;
}

// out = parts[0] op parts[1] op ... op parts[n-1], element by element, in that order; each part
// holds `count` elements. kAvg divides the sum by n.
template <typename T>
void reduce_parts_as(const void* parts, void* out, int64_t count, int n, ReduceOp op) {
  const T* p = static_cast<const T*>(parts);
  T* o = static_cast<T*>(out);
  std::memmove(o, p, static_cast<size_t>(count) * sizeof(T));
  for (int r = 1; r < n; ++r) {
    const T* part = p + static_cast<int64_t>(r) * count;
    for (int64_t i = 0; i < count; ++i) o[i] = combine(o[i], part[i], op);
  }
  if (op == ReduceOp::kAvg) {
    for (int64_t i = 0; i < count; ++i) o[i] = static_cast<T>(o[i] / static_cast<T>(n));
  }
}

void reduce_parts(Elem e, const void* parts, void* out, int64_t count, int n, ReduceOp op) {
  switch (e) {
    case Elem::kF32:
      return reduce_parts_as<float>(parts, out, count, n, op);
    case Elem::kF64:
      return reduce_parts_as<double>(parts, out, count, n, op);
    case Elem::kI32:
      return reduce_parts_as<int32_t>(parts, out, count, n, op);
    case Elem::kI64:
      return reduce_parts_as<int64_t>(parts, out, count, n, op);
  }
}

int byte_count(int64_t bytes, const char* what) {
  OCTET_CHECK(bytes <= INT_MAX, what, ": ", bytes,
              " bytes per rank in one call exceed MPI's int count (split the tensor)");
  return static_cast<int>(bytes);
}

// A buffer on the host, with whatever keeps its memory alive.
struct HostBuffer {
  void* data = nullptr;
  int64_t count = 0;
  Elem elem = Elem::kF32;
  Tensor owner;  // undefined for memory the caller keeps (a span of doubles)
};

// The state of one all-reduce or reduce-scatter. Shared, so that a handle destroyed before the
// collective finished can leave it to MPI (never freed) instead of waiting.
struct Exchange {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  ReduceOp op = ReduceOp::kSum;
  bool gather = true;  // all-reduce: all-gather the reduced parts; reduce-scatter: stop there
  HostBuffer target;   // all-reduce: in and out; reduce-scatter: out (one part)
  Tensor input;        // what the all-to-all sends: size * part elements
  Tensor received;     // size * part elements: part `rank` of every rank's input
  int64_t part = 0;    // elements per rank
  MPI_Request request = MPI_REQUEST_NULL;
  int step = 0;  // 0: all-to-all in flight, 1: all-gather in flight, 2: done
};

// The step in flight of `x` has finished: starts the next one, or finishes.
void advance(Exchange& x) {
  const size_t es = elem_size(x.target.elem);
  if (x.step == 1) {
    // All-gathered into the padded input; the caller's buffer gets its elements back.
    if (x.input.data() != x.target.data) {
      std::memcpy(x.target.data, x.input.data(), static_cast<size_t>(x.target.count) * es);
    }
    x.step = 2;
    if (x.target.owner.defined()) x.target.owner.bump_version();
    return;
  }
  if (!x.gather) {
    reduce_parts(x.target.elem, x.received.data(), x.target.data, x.part, x.size, x.op);
    x.step = 2;
    if (x.target.owner.defined()) x.target.owner.bump_version();
    return;
  }
  // The all-to-all is done, so the input may be overwritten: this rank's reduced part goes
  // where the all-gather expects it, and the gather fills in the others in place.
  auto* mine = static_cast<uint8_t*>(x.input.data()) + static_cast<size_t>(x.rank * x.part) * es;
  reduce_parts(x.target.elem, x.received.data(), mine, x.part, x.size, x.op);
  const int bytes = byte_count(x.part * static_cast<int64_t>(es), "all_reduce");
  OCTET_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.input.data(), bytes,
                                 MPI_BYTE, x.comm, &x.request));
  x.step = 1;
}

class MpiCollective final : public PendingCollective {
 public:
  explicit MpiCollective(std::shared_ptr<Exchange> x) : x_(std::move(x)) {}
  ~MpiCollective() override {
    // An unfinished collective still owns its buffers in MPI's eyes: leave them alive.
    if (x_ != nullptr && x_->step < 2) (void)new std::shared_ptr<Exchange>(std::move(x_));
  }

  bool test() override {
    while (x_->step < 2) {
      int done = 0;
      OCTET_MPI_CHECK(MPI_Test(&x_->request, &done, MPI_STATUS_IGNORE));
      if (done == 0) return false;
      advance(*x_);
    }
    return true;
  }

  void wait() override {
    while (x_->step < 2) {
      OCTET_MPI_CHECK(MPI_Wait(&x_->request, MPI_STATUS_IGNORE));
      advance(*x_);
    }
  }

 private:
  std::shared_ptr<Exchange> x_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<int64_t> sent)
      : Communicator(std::move(sent)), comm_(comm) {
    OCTET_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    OCTET_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized == 0) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<Communicator> duplicate() override {
    settle();
    MPI_Comm comm = MPI_COMM_NULL;
    OCTET_MPI_CHECK(MPI_Comm_dup(comm_, &comm));
    OCTET_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    return std::make_shared<MpiCommunicator>(comm, sent_counter());
  }

  void all_reduce(Tensor& t, ReduceOp op) override { start_all_reduce(t, op)->wait(); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    start_reduce_scatter(in, out, op)->wait();
  }
  void all_reduce(std::span<double> values, ReduceOp op) override {
    start(HostBuffer{values.data(), static_cast<int64_t>(values.size()), Elem::kF64, Tensor()}, op)
        ->wait();
  }

  std::unique_ptr<PendingCollective> start_all_reduce(Tensor t, ReduceOp op) override {
    const Elem e = reducible(t, "all_reduce");
    return start(HostBuffer{t.data(), t.numel(), e, t}, op);
  }

  std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor in, Tensor out,
                                                          ReduceOp op) override {
    const Elem e = reducible(in, "reduce_scatter");
    OCTET_CHECK(reducible(out, "reduce_scatter") == e &&
                    in.numel() == out.numel() * static_cast<int64_t>(size_),
                "reduce_scatter: ", in, " into ", out, ": the input must hold ", size_,
                " x the output's elements, of the same dtype");
    settle();
    auto x = exchange(op, /*gather=*/false, HostBuffer{out.data(), out.numel(), e, out});
    x->part = out.numel();
    x->input = in;
    return launch(std::move(x));
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    OCTET_CHECK(in.defined() && out.defined() && in.device().is_cpu() && out.device().is_cpu() &&
                    in.dtype() == out.dtype() &&
                    out.numel() == in.numel() * static_cast<int64_t>(size_),
                "all_gather: ", in, " into ", out, ": host tensors of one dtype, the output ",
                size_, " x the input's elements");
    settle();
    const int bytes = byte_count(static_cast<int64_t>(in.nbytes()), "all_gather");
    OCTET_MPI_CHECK(MPI_Allgather(in.data(), bytes, MPI_BYTE, out.data(), bytes, MPI_BYTE, comm_));
    count_sent(static_cast<int64_t>(bytes) * (size_ - 1));
    out.bump_version();
  }

  void broadcast(Tensor& t, int root) override {
    OCTET_CHECK(t.defined() && t.device().is_cpu() && root >= 0 && root < size_, "broadcast: ", t,
                " from root ", root, ": a host tensor and a root in [0, ", size_, ")");
    settle();
    const int bytes = byte_count(static_cast<int64_t>(t.nbytes()), "broadcast");
    OCTET_MPI_CHECK(MPI_Bcast(t.data(), bytes, MPI_BYTE, root, comm_));
    if (rank_ == root) count_sent(static_cast<int64_t>(bytes) * (size_ - 1));
    t.bump_version();
  }

  void barrier() override {
    settle();
    OCTET_MPI_CHECK(MPI_Barrier(comm_));
  }

  void abort(int code) override {
    MPI_Abort(comm_, code);
    std::abort();  // MPI_Abort does not return; if it did, the process must still end
  }

 private:
  std::shared_ptr<Exchange> exchange(ReduceOp op, bool gather, HostBuffer target) {
    auto x = std::make_shared<Exchange>();
    x->comm = comm_;
    x->rank = rank_;
    x->size = size_;
    x->op = op;
    x->gather = gather;
    x->target = std::move(target);
    return x;
  }

  // Starts the second step of the last two-step collective if it has not started yet (see the
  // file comment): every rank then starts its collectives in program order.
  void settle() {
    std::shared_ptr<Exchange> x = in_flight_.lock();
    in_flight_.reset();
    if (x == nullptr || x->step != 0) return;
    OCTET_MPI_CHECK(MPI_Wait(&x->request, MPI_STATUS_IGNORE));
    advance(*x);
  }

  // An all-reduce of `target` in place.
  std::unique_ptr<PendingCollective> start(HostBuffer target, ReduceOp op) {
    settle();
    auto x = exchange(op, /*gather=*/true, std::move(target));
    const int64_t n = x->target.count;
    x->part = (n + size_ - 1) / size_;
    const size_t es = elem_size(x->target.elem);
    if (x->part * size_ == n && x->target.owner.defined()) {
      x->input = x->target.owner;
    } else {
      // Padded to a whole part per rank; the padding is reduced and dropped.
      MemTagScope tag(MemTag::kWorkspace);
      x->input = Tensor::zeros({x->part * size_ * static_cast<int64_t>(es)}, DType::kU8);
      std::memcpy(x->input.data(), x->target.data, static_cast<size_t>(n) * es);
    }
    return launch(std::move(x));
  }

  std::unique_ptr<PendingCollective> launch(std::shared_ptr<Exchange> x) {
    const int64_t part_bytes = x->part * static_cast<int64_t>(elem_size(x->target.elem));
    {
      MemTagScope tag(MemTag::kWorkspace);
      x->received = Tensor::empty({part_bytes * size_}, DType::kU8);
    }
    const int bytes = byte_count(part_bytes, "all_reduce");
    OCTET_MPI_CHECK(MPI_Ialltoall(x->input.data(), bytes, MPI_BYTE, x->received.data(), bytes,
                                  MPI_BYTE, comm_, &x->request));
    // The all-to-all sends every part but our own; the all-gather sends our part to every rank.
    count_sent(part_bytes * (size_ - 1) * (x->gather ? 2 : 1));
    if (x->gather) in_flight_ = x;
    return std::make_unique<MpiCollective>(std::move(x));
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::weak_ptr<Exchange> in_flight_;  // the last all-reduce, until its gather has started
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}

}  // namespace

std::shared_ptr<Communicator> mpi_world_communicator() {
  int initialized = 0;
  OCTET_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized == 0) {
    // Only the thread that called in talks to MPI; OpenMP workers never do.
    int provided = 0;
    OCTET_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    std::atexit(finalize_mpi);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  OCTET_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  OCTET_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return std::make_shared<MpiCommunicator>(comm, std::make_shared<int64_t>(0));
}

}  // namespace octet::detail
