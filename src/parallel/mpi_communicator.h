#pragma once
// The MPI runtime and a Communicator over an MPI communicator (OpenMPI on CPUs).
//
// MPI is initialised only when the process was started by a launcher (mpirun / mpiexec / srun with
// PMI): a plain `./pretrain_difflm ...` runs as one rank without touching MPI, so the single-process
// tools work on machines where MPI is not set up.
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/launch_env.h"

namespace megadlm {

// This process's launch environment (parallel/launch_env.h), read once; throws Error on a variable
// that is set to garbage.
const LaunchEnv& launch_environment();

// True when the launcher's environment says MPI should start (wants_mpi: mpirun / mpiexec, srun of
// several tasks or with PMI).
bool launched_by_mpi();

// Initialises MPI once (thread level FUNNELED: only the main thread communicates) when
// launched_by_mpi(); registers MPI_Finalize at exit. Then checks that MPI's world and rank are the
// launcher's (check_mpi_agrees: an Error naming both, e.g. srun without --mpi) and finds the ranks'
// nodes (collective). Idempotent. Returns the world size.
int init_distributed(int* argc, char*** argv);
bool distributed_initialized();
int world_size();
int world_rank();
// This rank's index among the ranks on its node, for picking its GPU: the launcher's variable when it
// sets one (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK), else MPI's
// (MPI_COMM_TYPE_SHARED); 0 without MPI.
int local_rank();

// Where the ranks run as MPI sees them (MPI_COMM_TYPE_SHARED: the ranks sharing memory form a node;
// nodes numbered in the order of their lowest world rank). One node of one rank without MPI.
struct NodePlacement {
  int local_rank = 0;
  int local_size = 1;
  int node = 0;
  int nodes = 1;
};
const NodePlacement& node_placement();

// For the log: "openmpi: rank 0 of 4, local rank 0 of 2; 2 nodes" ("" for a plain single process).
std::string describe_ranks();
// Aborts every rank (after a fatal error on one rank, the others would otherwise wait forever).
[[noreturn]] void abort_distributed(int code);

// The world communicator (SelfCommunicator when MPI is not initialised).
std::shared_ptr<Communicator> world_communicator();
// Splits the world: ranks with the same color form a group, ordered by key. Collective over the world.
std::shared_ptr<Communicator> split_world(int color, int key, const std::string& name);

}  // namespace megadlm
