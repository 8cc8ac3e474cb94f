// Where MPI puts the ranks, under a real launcher. LaunchMpi.* need mpirun: ctest runs them with a
// hostfile of two "nodes" on this machine (mpi_hostfile_2nodes, scripts/hostfile_launch_test.sh, which
// sets MEGADLM_TEST_NODES); run alone they skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/mpi_communicator.h"

namespace megadlm {
namespace {

class LaunchMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun (ctest: mpi_hostfile_2nodes)";
    init_distributed(nullptr, nullptr);
    if (world_size() < 2) GTEST_SKIP() << "needs at least 2 ranks, got " << world_size();
  }
};

TEST_F(LaunchMpi, LauncherAndMpiAgreeOnRanksAndNodes) {
  const LaunchEnv& env = launch_environment();
  const NodePlacement& p = node_placement();
  const int rank = world_rank(), world = world_size();
  std::printf("[launch] %s\n", describe_ranks().c_str());
  EXPECT_EQ(env.world, world);
  EXPECT_EQ(env.rank, rank);
  // The launcher's local rank (which picks the GPU) is MPI's: per node, not per machine or per job.
  EXPECT_EQ(local_rank(), p.local_rank);
  if (env.local_size > 0) {
    EXPECT_EQ(env.local_size, p.local_size);
  }
  // Every rank sees the same node count, and the ranks of a node are the ones that say so.
  std::vector<float> counts(static_cast<size_t>(p.nodes), 0.0f);
  counts[static_cast<size_t>(p.node)] = 1.0f;
  auto comm = world_communicator();
  comm->all_reduce_sum(counts.data(), static_cast<int64_t>(counts.size()));
  EXPECT_EQ(static_cast<int>(counts[static_cast<size_t>(p.node)]), p.local_size);
  if (const char* want = std::getenv("MEGADLM_TEST_NODES")) {
    // The hostfile fills node after node (by slot): ranks 0..k-1 on the first node, and so on.
    const int n = std::atoi(want);
    ASSERT_GT(n, 0);
    EXPECT_EQ(p.nodes, n);
    const int per_node = world / n;
    EXPECT_EQ(p.node, rank / per_node);
    EXPECT_EQ(local_rank(), rank % per_node);
    EXPECT_EQ(p.local_size, per_node);
  }
}

}  // namespace
}  // namespace megadlm
