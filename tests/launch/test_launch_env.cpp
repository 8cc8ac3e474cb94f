// The launch environment (parallel/launch_env.h): each launcher's variables as mpirun, a hostfile
// launch and srun set them, the precedence between them, garbage values, and the agreement check
// with MPI's world; and the GPU a node-local rank takes (kernels/dispatch.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kernels/dispatch.h"
#include "parallel/launch_env.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::error_of;
using Vars = std::map<std::string, std::string>;

LaunchEnv parse(const Vars& vars) {
  return parse_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string parse_error(const Vars& vars) {
  return error_of([&] { parse(vars); });
}

// What srun sets for task `rank` of a step of `world` tasks, `per_node` tasks on each node.
Vars srun_task(int rank, int world, int per_node) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", std::to_string(world)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(world)},
          {"SLURM_LOCALID", std::to_string(rank % per_node)},
          {"SLURM_NODEID", std::to_string(rank / per_node)},
          {"SLURM_STEP_TASKS_PER_NODE", std::to_string(per_node) + "(x" + std::to_string(world / per_node) + ")"}};
}

// What OpenMPI's mpirun sets for rank `rank`, `per_node` ranks on each node of a hostfile.
Vars mpirun_rank(int rank, int world, int per_node) {
  return {{"OMPI_COMM_WORLD_SIZE", std::to_string(world)},
          {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % per_node)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(per_node)},
          {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(rank % per_node)},
          {"PMIX_RANK", std::to_string(rank)}};
}

TEST(LaunchEnv, PlainProcessIsOneRankWithoutMpi) {
  const LaunchEnv e = parse({{"HOME", "/root"}});
  EXPECT_EQ(e.launcher, Launcher::None);
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.local_rank, -1);
  EXPECT_FALSE(wants_mpi(e));
}

TEST(LaunchEnv, OpenMpiHostfileRanksArePerNode) {
  // Rank 5 of 8 on two nodes of 4: the second node's second rank.
  const LaunchEnv e = parse(mpirun_rank(5, 8, 4));
  EXPECT_EQ(e.launcher, Launcher::OpenMpi);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.local_rank_var, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_TRUE(wants_mpi(e));
  EXPECT_EQ(describe_launch(e), "openmpi: rank 5 of 8, local rank 1 of 4");
}

TEST(LaunchEnv, SlurmTaskReadsTheStep) {
  const LaunchEnv e = parse(srun_task(6, 8, 4));
  EXPECT_EQ(e.launcher, Launcher::Slurm);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.node, 1);
  EXPECT_EQ(e.world_var, "SLURM_STEP_NUM_TASKS");
  EXPECT_TRUE(wants_mpi(e));
  EXPECT_EQ(describe_launch(e), "slurm: rank 6 of 8, local rank 2 of 4 on node 1");
}

TEST(LaunchEnv, SlurmUnevenTasksPerNode) {
  // 2(x2),1: nodes 0 and 1 hold 2 tasks, node 2 holds 1 (task 4).
  Vars v = srun_task(4, 5, 2);
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x2),1";
  v["SLURM_LOCALID"] = "0";
  const LaunchEnv e = parse(v);
  EXPECT_EQ(e.node, 2);
  EXPECT_EQ(e.local_size, 1);
  v["SLURM_NODEID"] = "1";
  EXPECT_EQ(parse(v).local_size, 2);
}

TEST(LaunchEnv, SingleSrunTaskRunsWithoutMpiUnlessPmiIsThere) {
  Vars v = srun_task(0, 1, 1);
  EXPECT_EQ(parse(v).launcher, Launcher::Slurm);
  EXPECT_FALSE(wants_mpi(parse(v)));
  v["PMIX_RANK"] = "0";  // srun --mpi=pmix
  EXPECT_TRUE(wants_mpi(parse(v)));
}

TEST(LaunchEnv, BatchScriptIsNotASrunTask) {
  // sbatch --ntasks=8 runs the script once, with the allocation's SLURM_NTASKS but no step variables.
  const LaunchEnv e = parse({{"SLURM_JOB_ID", "4242"}, {"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"},
                             {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}});
  EXPECT_EQ(e.launcher, Launcher::None);
  EXPECT_FALSE(wants_mpi(e));
}

TEST(LaunchEnv, MpirunInsideAnAllocationIgnoresTheBatchScriptsSlurmVariables) {
  // mpirun in an sbatch script: every rank inherits the script's SLURM_PROCID=0; OpenMPI's variables win.
  Vars v = mpirun_rank(3, 4, 2);
  for (const auto& [k, val] : srun_task(0, 4, 2)) v[k] = val;
  const LaunchEnv e = parse(v);
  EXPECT_EQ(e.launcher, Launcher::OpenMpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
}

TEST(LaunchEnv, HydraAndPmixAlone) {
  const LaunchEnv h = parse({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(h.launcher, Launcher::Hydra);
  EXPECT_EQ(h.world, 4);
  EXPECT_EQ(h.rank, 2);
  EXPECT_EQ(h.local_rank, 0);
  EXPECT_EQ(h.local_size, 2);
  const LaunchEnv p = parse({{"PMIX_RANK", "3"}});
  EXPECT_EQ(p.launcher, Launcher::Pmix);
  EXPECT_EQ(p.world, 0);  // MPI says
  EXPECT_EQ(p.rank, 3);
  EXPECT_TRUE(wants_mpi(p));
}

TEST(LaunchEnv, LocalRankFallsBackToLocalRankVariable) {
  const LaunchEnv e = parse({{"PMIX_RANK", "3"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_rank_var, "LOCAL_RANK");
  // The launcher's own variable comes first.
  Vars v = mpirun_rank(1, 2, 2);
  v["LOCAL_RANK"] = "0";
  EXPECT_EQ(parse(v).local_rank, 1);
  // Without a launcher LOCAL_RANK alone does not make a distributed run.
  EXPECT_EQ(parse({{"LOCAL_RANK", "1"}}).launcher, Launcher::None);
}

TEST(LaunchEnv, GarbageValuesNameTheVariable) {
  for (const char* bad : {"abc", "", "-1", "1.5", " 2", "99999999999"}) {
    Vars v = srun_task(0, 2, 2);
    v["SLURM_PROCID"] = bad;
    const std::string err = parse_error(v);
    EXPECT_NE(err.find("SLURM_PROCID='" + std::string(bad) + "'"), std::string::npos) << bad << ": " << err;
  }
  Vars v = srun_task(0, 2, 2);
  v["SLURM_STEP_NUM_TASKS"] = "0";
  EXPECT_NE(parse_error(v).find("SLURM_STEP_NUM_TASKS='0' is not a whole number >= 1"), std::string::npos);
  v = srun_task(0, 2, 2);
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x";
  EXPECT_NE(parse_error(v).find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos);
  v = mpirun_rank(0, 2, 2);
  v["OMPI_COMM_WORLD_LOCAL_RANK"] = "one";
  EXPECT_NE(parse_error(v).find("OMPI_COMM_WORLD_LOCAL_RANK='one'"), std::string::npos);
}

TEST(LaunchEnv, ConflictingValuesNameBothVariables) {
  Vars v = srun_task(0, 2, 2);
  v["SLURM_PROCID"] = "2";  // past the step's 2 tasks
  EXPECT_NE(parse_error(v).find("SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"), std::string::npos);
  v = mpirun_rank(1, 2, 2);
  v["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  EXPECT_NE(parse_error(v).find("OMPI_COMM_WORLD_LOCAL_RANK=2 is not below this node's 2 ranks"), std::string::npos);
  v = mpirun_rank(1, 2, 2);
  v["OMPI_COMM_WORLD_LOCAL_SIZE"] = "3";
  EXPECT_NE(parse_error(v).find("3 ranks on this node but OMPI_COMM_WORLD_SIZE=2"), std::string::npos);
}

TEST(LaunchEnv, SrunWithoutMpiIsRefusedNamingSlurmAndMpi) {
  // srun without --mpi: MPI starts as a singleton, a world of one, in each of the step's tasks.
  const LaunchEnv e = parse(srun_task(1, 2, 2));
  const std::string err = error_of([&] { check_mpi_agrees(e, 1, 0); });
  EXPECT_NE(err.find("Slurm started 2 tasks (SLURM_STEP_NUM_TASKS=2, this is SLURM_PROCID=1)"), std::string::npos) << err;
  EXPECT_NE(err.find("MPI's world has 1 rank"), std::string::npos) << err;
  EXPECT_NE(err.find("srun --mpi=pmix"), std::string::npos) << err;
  EXPECT_EQ(error_of([&] { check_mpi_agrees(e, 2, 1); }), "");
  // The ranks' order differs between the launcher and MPI.
  EXPECT_NE(error_of([&] { check_mpi_agrees(e, 2, 0); }).find("rank 1 for its launcher (SLURM_PROCID=1) but rank 0"),
            std::string::npos);
}

TEST(LaunchEnv, OpenMpiWorldMismatchNamesBoth) {
  const LaunchEnv e = parse(mpirun_rank(0, 4, 2));
  const std::string err = error_of([&] { check_mpi_agrees(e, 2, 0); });
  EXPECT_NE(err.find("OMPI_COMM_WORLD_SIZE=4"), std::string::npos) << err;
  EXPECT_NE(err.find("MPI's world has 2"), std::string::npos) << err;
  // PMIx alone gives no world size: MPI's is taken.
  EXPECT_EQ(error_of([&] { check_mpi_agrees(parse({{"PMIX_RANK", "0"}}), 5, 0); }), "");
}

TEST(GpuForLocalRank, OneGpuPerLocalRankAndAClearErrorPastThem) {
  EXPECT_EQ(gpu_for_local_rank(0, 8), 0);
  EXPECT_EQ(gpu_for_local_rank(7, 8), 7);
  // A launcher that binds one GPU per task shows each rank its own GPU as device 0.
  EXPECT_EQ(gpu_for_local_rank(5, 1), 0);
  const std::string err = error_of([] { gpu_for_local_rank(2, 2); });
  EXPECT_NE(err.find("node-local rank 2 needs GPU 2 but only 2 GPUs are visible"), std::string::npos) << err;
  EXPECT_NE(err.find("--map-by ppr:2:node"), std::string::npos) << err;
}

}  // namespace
}  // namespace megadlm
