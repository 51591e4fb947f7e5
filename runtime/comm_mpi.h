// The MPI communicator (host tensors), built when CMake finds MPI: what world_communicator()
// returns in a process that mpirun started with others. Internal to runtime/: callers use
// runtime/comm.h.
#pragma once

#include <memory>

#include "runtime/comm.h"

namespace octet::detail {

#if OCTET_WITH_MPI
// Initialises MPI unless the program did (finalising it at exit only then) and returns a
// communicator over a duplicate of MPI_COMM_WORLD, whose errors are returned, not fatal.
std::shared_ptr<Communicator> mpi_world_communicator();
#endif

}  // namespace octet::detail
