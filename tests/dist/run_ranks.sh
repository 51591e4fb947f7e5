#!/usr/bin/env bash
# Runs a command as N ranks under Open MPI's mpirun with what the data-parallel tests need, set
# here for this test alone (never by CI): root allowed (a CI container runs as root), more
# ranks than cores allowed, no binding to cores, one OpenMP thread per rank (two ranks on a
# two-core machine must not each spin two threads), and no single-copy transfers between
# processes (containers often forbid the ptrace access they need).
#   tests/dist/run_ranks.sh MPIRUN N COMMAND [ARGS...]
set -euo pipefail
mpirun="$1"
ranks="$2"
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$mpirun" -np "$ranks" --oversubscribe --bind-to none "$@"
