// The NCCL communicator on one rank (bootstrapped through a SelfCommunicator): the plumbing of every
// collective on device buffers. Multi-GPU runs use the same code under mpirun (docs/cuda.md).
#include "cuda/cuda_test_util.h"

#if !defined(MEGADLM_HAVE_CUDA)
MEGADLM_CUDA_NOT_BUILT_TEST(CudaNccl)
#elif !defined(MEGADLM_HAVE_NCCL)
TEST(CudaNccl, NotBuilt) { GTEST_SKIP() << "this CUDA build found no NCCL (set NCCL_ROOT): NCCL tests skipped"; }
#else
#include "kernels/cuda/nccl_communicator.h"

namespace megadlm::test {
namespace {

class CudaNccl : public CudaTest {};

TEST_F(CudaNccl, SingleRankCollectivesAreIdentities) {
  SelfCommunicator boot("boot");
  auto comm = cuda::make_nccl_communicator(boot, "dp");
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->name(), "dp");
  EXPECT_FALSE(cuda::nccl_version().empty());
  const int64_t n = 1031;
  const auto x = rand(n);
  auto d = to_device(x);
  comm->all_reduce_sum(d.get(), n);
  EXPECT_EQ(to_host(d), x);
  comm->all_reduce_max(d.get(), n);
  EXPECT_EQ(to_host(d), x);
  CommRequest req = comm->all_reduce_sum_async(d.get(), n);
  EXPECT_TRUE(req.pending());
  comm->wait(req);
  EXPECT_FALSE(req.pending());
  EXPECT_EQ(to_host(d), x);
  auto out = poisoned(n);
  comm->all_gather(d.get(), out.get(), n);
  EXPECT_EQ(to_host(out), x);
  auto out2 = poisoned(n);
  comm->reduce_scatter_sum(d.get(), out2.get(), n);
  EXPECT_EQ(to_host(out2), x);
  auto out3 = poisoned(n);
  const int64_t counts[1] = {n};
  comm->all_to_all_v(d.get(), counts, out3.get(), counts);
  EXPECT_EQ(to_host(out3), x);
  comm->broadcast(d.get(), n * 4, 0);
  comm->barrier();
  EXPECT_EQ(to_host(d), x);
  EXPECT_GT(comm->stats().calls, 0);
}

}  // namespace
}  // namespace megadlm::test
#endif
