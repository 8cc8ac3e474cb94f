// Rank placement in Megatron's tp-cp-dp-pp order and the errors for layouts that do not fit the world.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "core/error.h"
#include "parallel/layout.h"

using namespace megadlm;

TEST(Layout, RankOrderTensorFastestPipelineSlowest) {
  const ParallelLayout l{2, 2, 1, 1};  // tp 2, pp 2 in a world of 8: dp 2
  const int world = 8;
  EXPECT_EQ(data_parallel_size(l, world), 2);
  // Megatron's order: ranks 0,1 are one tp group; dp pairs differ by tp; pp stages by tp * dp.
  const RankCoords r5 = rank_coords(l, world, 5);
  EXPECT_EQ(r5.tp, 1);
  EXPECT_EQ(r5.dp, 0);
  EXPECT_EQ(r5.pp, 1);
  const RankCoords r2 = rank_coords(l, world, 2);
  EXPECT_EQ(r2.tp, 0);
  EXPECT_EQ(r2.dp, 1);
  EXPECT_EQ(r2.pp, 0);
}

TEST(Layout, CoordinatesAreABijection) {
  for (const ParallelLayout& l : {ParallelLayout{1, 1, 1, 1}, ParallelLayout{2, 1, 1, 2}, ParallelLayout{2, 3, 1, 1},
                                  ParallelLayout{1, 2, 2, 1}, ParallelLayout{3, 2, 1, 2}}) {
    const int world = 24;
    std::set<std::tuple<int, int, int, int>> seen;
    for (int r = 0; r < world; ++r) {
      const RankCoords c = rank_coords(l, world, r);
      EXPECT_EQ(world_rank_of(l, world, c.tp, c.cp, c.dp, c.pp), r);
      EXPECT_EQ(c.ep, c.dp % l.ep);
      EXPECT_EQ(c.edp, c.dp / l.ep);
      seen.insert({c.tp, c.cp, c.dp, c.pp});
    }
    EXPECT_EQ(static_cast<int>(seen.size()), world);
  }
}

TEST(Layout, SizesThatDoNotDivideTheWorldNameTheFlag) {
  try {
    data_parallel_size(ParallelLayout{3, 1, 1, 1}, 4);
    FAIL() << "tp 3 in a world of 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-model-parallel-size 3"), std::string::npos) << e.what();
  }
  try {
    data_parallel_size(ParallelLayout{1, 1, 1, 3}, 4);  // dp 4, ep 3
    FAIL() << "ep 3 with dp 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-model-parallel-size 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(data_parallel_size(ParallelLayout{0, 1, 1, 1}, 4), Error);
}

TEST(Layout, SingleProcessContextHasGroupsOfOne) {
  const ParallelContext ctx = make_parallel_context(ParallelLayout{});
  EXPECT_EQ(ctx.world_size, 1);
  EXPECT_EQ(ctx.tp.size, 1);
  EXPECT_EQ(ctx.dp.size, 1);
  float x[3] = {1, 2, 3};
  ctx.dp.communicator().all_reduce_sum(x, 3);  // a group of one: the identity
  EXPECT_EQ(x[2], 3.0f);
  float out[3];
  ctx.tp.communicator().all_gather(x, out, 3);
  EXPECT_EQ(out[1], 2.0f);
}

#include "core/parameters.h"

// A sharded parameter gets exactly the values of its slice of the unsharded one: init is keyed by
// the full tensor's element index, so any tensor-parallel layout starts from the same weights.
TEST(Layout, ShardedInitEqualsTheSliceOfTheFullTensor) {
  ParamStore full;
  const int fid = full.add("w", Shape{6, 5}, Init::Normal, 0.02f);
  full.finalize();
  full.init(7);
  for (int split_dim : {0, 1}) {
    const int parts = split_dim == 0 ? 3 : 5;
    for (int part = 0; part < parts; ++part) {
      ParamStore s;
      const int id = s.add_sharded("w", Shape{6, 5}, split_dim, parts, part, Init::Normal, 0.02f);
      s.finalize();
      s.init(7);
      const ParamInfo& p = s.info(id);
      const float* v = s.values() + p.offset;
      const float* f = full.values() + full.info(fid).offset;
      for (int64_t i = 0; i < p.shape.numel(); ++i) {
        const int64_t r = i / p.shape[1], c = i % p.shape[1];
        const int64_t fr = split_dim == 0 ? r + p.shard_begin : r, fc = split_dim == 1 ? c + p.shard_begin : c;
        ASSERT_EQ(v[i], f[fr * 5 + fc]) << "dim " << split_dim << " part " << part << " element " << i;
      }
    }
  }
  ParamStore bad;
  EXPECT_THROW(bad.add_sharded("w", Shape{6, 5}, 1, 2, 0, Init::Normal, 0.02f), Error);
}
