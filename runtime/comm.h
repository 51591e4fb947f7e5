// Collective communication between the processes of a data-parallel run (DESIGN.md "Data
// parallel"): the Communicator interface, the single-process communicator, and the process's
// own communicator over every process its launcher started (MPI, runtime/comm_mpi.cpp; the NCCL
// communicator for device tensors is runtime/comm_nccl.h).
//
//   std::shared_ptr<Communicator> world = world_communicator();  // MPI only under mpirun -np N>1
//   world->all_reduce(grads, ReduceOp::kAvg);                     // the same bits on every rank
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace octet {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

// A collective that was started and may not have finished. Its tensors must stay untouched
// until it has. Destroying one that has not finished never waits and never throws: its buffers
// are kept alive for MPI, and the process is expected to end (an error is unwinding).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Lets the collective advance without blocking; true once it has finished (outputs written).
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// Every rank calls the same collectives in the same order, with tensors of the same shape and
// dtype. Reductions take f32, i32 and i64 tensors (all-gather and broadcast any dtype). Results
// are identical bit for bit on every rank: each element is reduced on one rank, in rank order
// (x_0 op x_1 op ... op x_{N-1}; kAvg is that sum divided by N), and the result is copied to the
// others, so no rank depends on MPI's or NCCL's choice of algorithm to agree with the others.
// kMax propagates NaN. Tensors are host tensors (MPI), or device tensors for a communicator
// that takes them (NCCL); a tensor a backend cannot take is an error naming it.
class Communicator {
 public:
  Communicator() : sent_(std::make_shared<int64_t>(0)) {}
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;  // "single", "mpi", "nccl"
  // A communicator over the same ranks whose collectives are matched apart from this one's, so
  // that collectives in flight on both overlap (a collective of MPI's own communicator, by
  // contrast, starts only when the previous one's steps have all started). Counts its bytes
  // with this one. A collective (every rank calls it).
  virtual std::shared_ptr<Communicator> duplicate() = 0;

  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // `in` holds size() * n elements, `out` n: out = op over the ranks of part rank() of `in`.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  // `in` holds n elements, `out` size() * n: part r of `out` is rank r's `in`.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Numbers on the host (a loss, the parts of a norm), by the same rule.
  virtual void all_reduce(std::span<double> values, ReduceOp op) = 0;

  // Non-blocking forms; a backend that cannot overlap runs the collective at once and returns a
  // finished handle (this default).
  virtual std::unique_ptr<PendingCollective> start_all_reduce(Tensor t, ReduceOp op);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor in, Tensor out,
                                                                  ReduceOp op);

  // Ends every process of the communicator now (MPI_Abort), so that no rank waits forever for
  // one that failed. For a program's top level after it has reported an error; library code
  // never calls it. A single process exits with `code`.
  [[noreturn]] virtual void abort(int code) = 0;

  // Bytes this rank has handed to the transport for other ranks so far, counted as if each
  // message went straight to its destination (MPI or NCCL may relay some).
  int64_t bytes_sent() const { return *sent_; }

 protected:
  explicit Communicator(std::shared_ptr<int64_t> sent) : sent_(std::move(sent)) {}
  void count_sent(int64_t bytes) { *sent_ += bytes; }
  const std::shared_ptr<int64_t>& sent_counter() const { return sent_; }

 private:
  std::shared_ptr<int64_t> sent_;  // shared with duplicates
};

// One process: reductions return their input, gathers copy it.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "single"; }
  std::shared_ptr<Communicator> duplicate() override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override {}
  void all_reduce(std::span<double> values, ReduceOp op) override;
  [[noreturn]] void abort(int code) override;
};

// Where this process stands in a launch, read from the launcher's environment alone (Open MPI's
// OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK / _LOCAL_SIZE, or PMI_SIZE / PMI_RANK); nothing is
// initialised. Without a launcher: rank 0 of 1.
struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the processes on this machine
  int local_size = 1;
};
LaunchInfo launch_info();

// The communicator over every process started with this one: MPI when a launcher started more
// than one (MPI is initialised by the first call and finalised at exit, unless the program
// initialised it itself), a SingleProcessCommunicator otherwise, when MPI is never initialised.
// A build without MPI launched as several processes is an error that says so.
std::shared_ptr<Communicator> world_communicator();

// The error that every rank throws alike (require_same_on_all_ranks, run_collectively), so that a
// program's top level can report it once, from rank 0.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// Rank `root`'s string on every rank.
void broadcast_string(Communicator& comm, std::string& text, int root);

// Throws the same CollectiveError on every rank unless every rank holds the same `items` (name,
// value) as rank 0: "<what> differ across ranks: rank R has <name>=<value> but rank 0 has <value>",
// for the first item that differs on any rank. `show_values` false leaves the values out
// (tensor contents compared by hash).
void require_same_on_all_ranks(Communicator& comm,
                               const std::vector<std::pair<std::string, std::string>>& items,
                               std::string_view what, bool show_values = true);

// Runs `f` on every rank; `f` itself must not call collectives. When it throws on any rank,
// every rank throws the error of the lowest rank that failed as a CollectiveError, "rank R:
// ...", so that a failure
// only some ranks meet (a file one rank cannot read or write) leaves no rank waiting in a
// collective for it.
void run_collectively(Communicator& comm, const std::function<void()>& f);

}  // namespace octet
