#pragma once
// What the launcher of this process says about it, read from the environment before MPI starts:
// which launcher, how many ranks it started, this process's rank, its index among the ranks of its
// node (which picks its GPU) and its node. Pure parsing over a getenv-like lookup, so the tests set
// any launcher's variables in-process; parallel/mpi_communicator.cpp reads the process's own.
//
// Launchers, first match wins:
//   OpenMPI's mpirun / mpiexec   OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE (a hostfile only
//                                changes where the ranks run; the variables stay per node). Within a
//                                Slurm allocation mpirun's ranks also inherit the batch script's SLURM_*,
//                                which describe the allocation, not them: OpenMPI's variables win.
//   Slurm's srun (one task)      SLURM_PROCID with SLURM_STEP_NUM_TASKS (srun sets the step's variables;
//                                a batch script itself has SLURM_NTASKS but none of them, and runs as one
//                                process), SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE.
//   MPICH / Intel MPI (Hydra)    PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS.
//   PMIx alone (prterun, ...)    PMIX_RANK; the world size comes from MPI.
// LOCAL_RANK (torchrun's convention) gives the local rank when the launcher's own variable is absent.
// A variable that is set but is not a number in range is an Error naming it.
#include <functional>
#include <string>

namespace megadlm {

enum class Launcher { None, OpenMpi, Slurm, Hydra, Pmix };

const char* launcher_name(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::None;
  int world = 1;        // ranks the launcher started; 0 when it does not say (MPI's world decides)
  int rank = 0;         // -1 when the launcher does not say
  int local_rank = -1;  // among the ranks of this node; -1: not in the environment (MPI_COMM_TYPE_SHARED decides)
  int local_size = -1;  // ranks on this node; -1 when unknown
  int node = -1;        // this node's index among the job's nodes; -1 when unknown
  bool pmi = false;     // a process-management interface for MPI is present (PMIx, PMI-1/2)
  // The variables the values came from, for messages ("" when the value is not from the environment).
  std::string world_var, rank_var, local_rank_var;
};

// Returns the value of an environment variable, or null when it is not set.
using EnvLookup = std::function<const char*(const char*)>;

LaunchEnv parse_launch_env(const EnvLookup& getenv);
// parse_launch_env over this process's environment.
LaunchEnv process_launch_env();

// Whether MPI should start: under a launcher of several ranks, or where a process manager for MPI is
// present. A single srun task without PMI runs without MPI, as a plain process does.
bool wants_mpi(const LaunchEnv& env);

// Throws Error, naming the launcher's variables and MPI's numbers, when MPI's world or this process's
// rank in it differ from what the launcher says (srun without --mpi: each task is a world of one).
void check_mpi_agrees(const LaunchEnv& env, int mpi_world, int mpi_rank);

// One line for the log: "slurm: rank 3 of 8, local rank 1 of 2 on node 1".
std::string describe_launch(const LaunchEnv& env);

}  // namespace megadlm
