// The communicator interface's defaults, the single-process communicator, the launch environment
// and the checks that every rank agrees.
#include "runtime/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/comm_mpi.h"
#include "runtime/comm_nccl.h"
#include "runtime/error.h"
#include "runtime/named.h"

namespace octet {
namespace {

class FinishedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// A non-negative integer from the environment, or `fallback` when unset.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  OCTET_CHECK(end != text && *end == '\0' && value >= 0 && value <= (1 << 24),
              "environment variable ", name, "=\"", text,
              "\" is not a process count or rank (set by the launcher, e.g. mpirun)");
  return static_cast<int>(value);
}

uint64_t fnv1a(std::string_view text, uint64_t h = 1469598103934665603ull) {
  for (const char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// The item at `index`, or empty when the list is shorter.
std::pair<std::string, std::string> item_at(
    const std::vector<std::pair<std::string, std::string>>& items, int64_t index) {
  if (index < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(index)];
  return {};
}

[[noreturn]] void throw_collective(const auto&... parts) {
  throw CollectiveError(detail::concat(parts...));
}

}  // namespace

constexpr Named<ReduceOp> kReduceOps[] = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"}, {ReduceOp::kMax, "max"}};
std::string_view reduce_op_name(ReduceOp op) { return name_in(kReduceOps, op); }

std::unique_ptr<PendingCollective> Communicator::start_all_reduce(Tensor t, ReduceOp op) {
  all_reduce(t, op);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter(Tensor in, Tensor out,
                                                                      ReduceOp op) {
  reduce_scatter(in, out, op);
  return std::make_unique<FinishedCollective>();
}

// ---- one process ----

std::shared_ptr<Communicator> SingleProcessCommunicator::duplicate() {
  return std::make_shared<SingleProcessCommunicator>();
}

void SingleProcessCommunicator::all_reduce(Tensor& t, ReduceOp) {
  OCTET_CHECK(t.defined(), "all_reduce: undefined tensor");
}

void SingleProcessCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) {
  OCTET_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype(), "reduce_scatter: ", in,
              " into ", out, ": one rank needs the same element count and dtype");
  if (!in.shares_storage(out) || in.storage_offset() != out.storage_offset()) {
    out.copy_bytes_from(in);
  }
}

void SingleProcessCommunicator::all_gather(const Tensor& in, Tensor& out) {
  OCTET_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype(), "all_gather: ", in, " into ",
              out, ": one rank needs the same element count and dtype");
  if (!in.shares_storage(out) || in.storage_offset() != out.storage_offset()) {
    out.copy_bytes_from(in);
  }
}

void SingleProcessCommunicator::broadcast(Tensor& t, int root) {
  OCTET_CHECK(t.defined() && root == 0, "broadcast: root ", root, " of a single process");
}

void SingleProcessCommunicator::all_reduce(std::span<double>, ReduceOp) {}

void SingleProcessCommunicator::abort(int code) { std::exit(code); }

// ---- the launch ----

LaunchInfo launch_info() {
  LaunchInfo info;
  // Open MPI's mpirun; PMI_* for launchers of other MPI implementations (hydra, srun).
  const bool ompi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  info.size = env_int(ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE", 1);
  info.rank = env_int(ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", 0);
  info.local_size = env_int(ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS", info.size);
  info.local_rank = env_int(ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID", info.rank);
  OCTET_CHECK(info.size >= 1 && info.rank < info.size && info.local_size >= 1 &&
                  info.local_rank < info.local_size,
              "the launcher's environment says rank ", info.rank, " of ", info.size,
              " (local rank ", info.local_rank, " of ", info.local_size, "): not a valid place");
  return info;
}

std::shared_ptr<Communicator> world_communicator() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (world != nullptr) return world;
  const LaunchInfo info = launch_info();
  if (info.size == 1) {
    world = std::make_shared<SingleProcessCommunicator>();
  } else {
#if OCTET_WITH_MPI
    world = detail::mpi_world_communicator();
#else
    OCTET_FAIL("this process is one of ", info.size,
               " started by a launcher, but octet was built without MPI: install libopenmpi-dev "
               "(tools/setup.sh does) and configure again");
#endif
  }
  return world;
}

#if !OCTET_WITH_NCCL
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator>, Device device) {
  OCTET_FAIL("make_nccl_communicator(", device,
             "): octet was built without NCCL (a CUDA build finds it in the toolkit)");
}
#endif

void broadcast_string(Communicator& comm, std::string& text, int root) {
  if (comm.size() == 1) return;
  Tensor length = Tensor::zeros({1}, DType::kI64);
  length.data_as<int64_t>()[0] = static_cast<int64_t>(text.size());
  comm.broadcast(length, root);
  const int64_t n = length.data_as<int64_t>()[0];
  Tensor bytes = Tensor::zeros({std::max<int64_t>(n, 1)}, DType::kU8);
  if (comm.rank() == root) std::memcpy(bytes.data(), text.data(), text.size());
  comm.broadcast(bytes, root);
  text.assign(static_cast<const char*>(bytes.data()), static_cast<size_t>(n));
}

void run_collectively(Communicator& comm, const std::function<void()>& f) {
  if (comm.size() == 1) return f();
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  // The lowest failing rank r has the largest size - r; 0 when no rank failed.
  double key[1] = {error.empty() ? 0.0 : static_cast<double>(comm.size() - comm.rank())};
  comm.all_reduce(std::span<double>(key, 1), ReduceOp::kMax);
  if (key[0] == 0.0) return;
  const int failed = comm.size() - static_cast<int>(key[0]);
  broadcast_string(comm, error, failed);
  throw_collective("rank ", failed, ": ", error);
}

void require_same_on_all_ranks(Communicator& comm,
                               const std::vector<std::pair<std::string, std::string>>& items,
                               std::string_view what, bool show_values) {
  if (comm.size() == 1) return;
  // Rank 0's item hashes to everyone; each rank finds the first index where it differs.
  const auto count = static_cast<int64_t>(items.size());
  std::vector<int64_t> mine(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    mine[i] = static_cast<int64_t>(fnv1a(items[i].second, fnv1a(items[i].first + '\0')));
  }
  Tensor count0 = Tensor::zeros({1}, DType::kI64);
  count0.data_as<int64_t>()[0] = count;
  comm.broadcast(count0, 0);
  const int64_t n0 = count0.data_as<int64_t>()[0];
  Tensor hashes = Tensor::zeros({std::max<int64_t>(n0, 1)}, DType::kI64);
  int64_t* h0 = hashes.data_as<int64_t>();
  if (comm.rank() == 0) std::copy(mine.begin(), mine.end(), h0);
  comm.broadcast(hashes, 0);
  int64_t first = -1;
  for (int64_t i = 0; i < std::max(n0, count) && first < 0; ++i) {
    if (i >= n0 || i >= count || h0[i] != mine[static_cast<size_t>(i)]) first = i;
  }
  // The smallest (index, rank) that differs, found by a max over negated keys (exact in f64).
  const int size = comm.size();
  double key[1] = {first < 0 ? -1e18 : -static_cast<double>(first * size + comm.rank())};
  comm.all_reduce(std::span<double>(key, 1), ReduceOp::kMax);
  if (key[0] == -1e18) return;
  const auto code = static_cast<int64_t>(-key[0]);
  const int64_t index = code / size;
  const int bad_rank = static_cast<int>(code % size);
  auto [name0, value0] = item_at(items, index);
  auto [name, value] = item_at(items, index);
  broadcast_string(comm, name0, 0);
  broadcast_string(comm, value0, 0);
  broadcast_string(comm, name, bad_rank);
  broadcast_string(comm, value, bad_rank);
  if (name.empty() || name0.empty()) {
    throw_collective(what, " differ across ranks: rank ", bad_rank, " has ",
                     name.empty() ? "nothing" : "\"" + name + "\"", " at position ", index,
                     " but rank 0 has ", name0.empty() ? "nothing" : "\"" + name0 + "\"");
  }
  if (name != name0) {
    throw_collective(what, " differ across ranks: rank ", bad_rank, " has \"", name,
                     "\" at position ", index, " but rank 0 has \"", name0, "\"");
  }
  if (show_values) {
    throw_collective(what, " differ across ranks: rank ", bad_rank, " has ", name, "=", value,
                     " but rank 0 has ", name, "=", value0);
  }
  throw_collective(what, " differ across ranks: rank ", bad_rank, "'s \"", name,
                   "\" is not rank 0's");
}

}  // namespace octet
