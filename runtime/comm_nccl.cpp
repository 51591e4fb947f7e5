// The NCCL communicator. An all-reduce is a reduce-scatter followed by an all-gather, as on MPI:
// each element is reduced once, on its part's rank, and copied to the others, so every rank
// holds the same bits whatever algorithm NCCL picks (ncclAllReduce's tree algorithm promises
// no such thing).
#include "runtime/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "runtime/cuda.h"
#include "runtime/error.h"
#include "runtime/memory.h"

#define OCTET_NCCL_CHECK(call)                                                                   \
  do {                                                                                           \
    const ncclResult_t octet_nccl_rc = (call);                                                   \
    OCTET_CHECK(octet_nccl_rc == ncclSuccess, #call,                                             \
                " failed: ", ncclGetErrorString(octet_nccl_rc), " (", ncclGetLastError(nullptr), \
                ")");                                                                            \
  } while (0)

namespace octet {
namespace {

ncclDataType_t nccl_type(const Tensor& t, const char* what) {
  switch (t.dtype()) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      OCTET_FAIL(what, ": ", t, " cannot be reduced (f32, i32 or i64 tensors)");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  OCTET_FAIL("unknown ReduceOp ", static_cast<int>(op));
}

uint8_t* bytes_of(const Tensor& t) { return static_cast<uint8_t*>(const_cast<void*>(t.data())); }

// One ncclComm_t, shared by a communicator and its duplicates.
struct NcclHandle {
  ncclComm_t comm = nullptr;
  ~NcclHandle() {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> host, Device device)
      : host_(std::move(host)), device_(device), handle_(std::make_shared<NcclHandle>()) {
    OCTET_CHECK(host_ != nullptr, "make_nccl_communicator: null host communicator");
    OCTET_CHECK(device_.is_cuda(), "make_nccl_communicator: ", device_, " is not a CUDA device");
    require_device(device_);
    ncclUniqueId id;
    if (host_->rank() == 0) OCTET_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = Tensor::from_bytes(&id, {static_cast<int64_t>(sizeof(id))}, DType::kU8);
    host_->broadcast(bytes, 0);
    std::memcpy(&id, bytes.data(), sizeof(id));
    cuda::DeviceGuard guard(device_);
    OCTET_NCCL_CHECK(ncclCommInitRank(&handle_->comm, host_->size(), id, host_->rank()));
    comm_ = handle_->comm;
  }
  // A duplicate: NCCL queues every collective on the stream when it is called, so collectives
  // are matched in program order on any number of handles of one ncclComm_t.
  NcclCommunicator(const NcclCommunicator& other, std::shared_ptr<int64_t> sent)
      : Communicator(std::move(sent)),
        host_(other.host_),
        device_(other.device_),
        handle_(other.handle_),
        comm_(other.comm_) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string_view backend() const override { return "nccl"; }
  std::shared_ptr<Communicator> duplicate() override {
    return std::make_shared<NcclCommunicator>(*this, sent_counter());
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    if (on_host(t, "all_reduce")) return host_->all_reduce(t, op);
    const ncclDataType_t type = nccl_type(t, "all_reduce");
    const int n = size();
    const int64_t part = (t.numel() + n - 1) / n;
    const size_t es = t.element_size();
    cuda::DeviceGuard guard(device_);
    Tensor buffer = t;
    if (part * n != t.numel()) {
      MemTagScope tag(MemTag::kWorkspace);
      buffer = Tensor::zeros({part * n}, t.dtype(), device_);
      Tensor head = buffer.slice(0, t.numel());
      head.copy_bytes_from(t.reshape({t.numel()}));
    }
    // In place: this rank's part of the buffer receives the reduction, then every part is
    // gathered around it.
    uint8_t* mine = bytes_of(buffer) + static_cast<size_t>(rank() * part) * es;
    OCTET_NCCL_CHECK(ncclReduceScatter(buffer.data(), mine, static_cast<size_t>(part), type,
                                       nccl_op(op), comm_, stream()));
    OCTET_NCCL_CHECK(
        ncclAllGather(mine, buffer.data(), static_cast<size_t>(part), type, comm_, stream()));
    if (!buffer.shares_storage(t)) t.copy_bytes_from(buffer.slice(0, t.numel()));
    count_sent(2 * part * static_cast<int64_t>(es) * (n - 1));
    t.bump_version();
  }

  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    if (on_host(in, "reduce_scatter")) return host_->reduce_scatter(in, out, op);
    OCTET_CHECK(
        out.device() == device_ && in.dtype() == out.dtype() && in.numel() == out.numel() * size(),
        "reduce_scatter: ", in, " into ", out, ": the input must hold ", size(),
        " x the output's elements, of the same dtype and device");
    cuda::DeviceGuard guard(device_);
    OCTET_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                                       nccl_type(in, "reduce_scatter"), nccl_op(op), comm_,
                                       stream()));
    count_sent(static_cast<int64_t>(out.nbytes()) * (size() - 1));
    out.bump_version();
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (on_host(in, "all_gather")) return host_->all_gather(in, out);
    OCTET_CHECK(
        out.device() == device_ && in.dtype() == out.dtype() && out.numel() == in.numel() * size(),
        "all_gather: ", in, " into ", out, ": the output must hold ", size(),
        " x the input's elements, of the same dtype and device");
    cuda::DeviceGuard guard(device_);
    OCTET_NCCL_CHECK(ncclAllGather(in.data(), out.data(), in.nbytes(), ncclUint8, comm_, stream()));
    count_sent(static_cast<int64_t>(in.nbytes()) * (size() - 1));
    out.bump_version();
  }

  void broadcast(Tensor& t, int root) override {
    if (on_host(t, "broadcast")) return host_->broadcast(t, root);
    cuda::DeviceGuard guard(device_);
    OCTET_NCCL_CHECK(
        ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclUint8, root, comm_, stream()));
    if (rank() == root) count_sent(static_cast<int64_t>(t.nbytes()) * (size() - 1));
    t.bump_version();
  }

  void barrier() override {
    cuda::synchronize(device_);
    host_->barrier();
  }

  void all_reduce(std::span<double> values, ReduceOp op) override { host_->all_reduce(values, op); }

  void abort(int code) override {
    ncclCommAbort(comm_);
    handle_->comm = nullptr;
    host_->abort(code);
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(cuda::stream(device_)); }

  // Host tensors go to the host communicator; a tensor on another device is an error.
  bool on_host(const Tensor& t, const char* what) const {
    OCTET_CHECK(t.defined(), what, ": undefined tensor");
    if (t.device().is_cpu()) return true;
    OCTET_CHECK(t.device() == device_, what, ": ", t, " is on ", t.device(),
                " but this NCCL communicator runs on ", device_);
    return false;
  }

  std::shared_ptr<Communicator> host_;
  Device device_;
  std::shared_ptr<NcclHandle> handle_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> host,
                                                     Device device) {
  return std::make_shared<NcclCommunicator>(std::move(host), device);
}

}  // namespace octet
