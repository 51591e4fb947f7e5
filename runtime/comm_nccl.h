// The NCCL communicator: device tensors of one CUDA device per rank go through NCCL on octet's
// stream of that device; host tensors (and host numbers) go through the host communicator it is
// made over, whose broadcast also hands NCCL's unique id from rank 0 to the others. Built in
// CUDA builds that find NCCL (OCTET_WITH_NCCL); elsewhere making one is an error that says so.
#pragma once

#include <memory>

#include "runtime/comm.h"
#include "runtime/device.h"

namespace octet {

// Collective over every rank of `host` (one rank: a one-GPU NCCL communicator), each rank on
// its own `device`. Device collectives are queued on the device's stream and ordered with
// octet's kernels there; they do not overlap them (one stream).
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> host,
                                                     Device device);

}  // namespace octet
