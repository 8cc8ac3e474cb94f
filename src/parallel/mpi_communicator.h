#pragma once
// The MPI runtime and a Communicator over an MPI communicator (OpenMPI on CPUs).
//
// MPI is initialised only when the process was started by a launcher (mpirun / mpiexec / srun with
// PMI): a plain `./pretrain_difflm ...` runs as one rank without touching MPI, so the single-process
// tools work on machines where MPI is not set up.
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace megadlm {

// True when environment variables of an MPI or Slurm launcher say this process is one of several ranks.
bool launched_by_mpi();

// Initialises MPI once (thread level FUNNELED: only the main thread communicates) when
// launched_by_mpi(); registers MPI_Finalize at exit. Idempotent. Returns the world size.
int init_distributed(int* argc, char*** argv);
bool distributed_initialized();
int world_size();
int world_rank();
// This rank's index among the ranks on its node (MPI_COMM_TYPE_SHARED), for picking its GPU; 0 without MPI.
int local_rank();
// Aborts every rank (after a fatal error on one rank, the others would otherwise wait forever).
[[noreturn]] void abort_distributed(int code);

// The world communicator (SelfCommunicator when MPI is not initialised).
std::shared_ptr<Communicator> world_communicator();
// Splits the world: ranks with the same color form a group, ordered by key. Collective over the world.
std::shared_ptr<Communicator> split_world(int color, int key, const std::string& name);

}  // namespace megadlm
