#include "parallel/layout.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace megadlm {

int data_parallel_size(const ParallelLayout& l, int world) {
  MEGADLM_CHECK(l.tp >= 1, "--tensor-model-parallel-size must be at least 1, got ", l.tp);
  MEGADLM_CHECK(l.pp >= 1, "--pipeline-model-parallel-size must be at least 1, got ", l.pp);
  MEGADLM_CHECK(l.cp >= 1, "--context-parallel-size must be at least 1, got ", l.cp);
  MEGADLM_CHECK(l.ep >= 1, "--expert-model-parallel-size must be at least 1, got ", l.ep);
  const int model = l.tp * l.pp * l.cp;
  MEGADLM_CHECK(world % model == 0, "the world size ", world, " is not divisible by --tensor-model-parallel-size ", l.tp,
                " x --pipeline-model-parallel-size ", l.pp, " x --context-parallel-size ", l.cp, " = ", model);
  const int dp = world / model;
  MEGADLM_CHECK(dp % l.ep == 0, "--expert-model-parallel-size ", l.ep, " does not divide the data-parallel size ", dp,
                " (world ", world, " / tp ", l.tp, " / pp ", l.pp, " / cp ", l.cp, ")");
  return dp;
}

RankCoords rank_coords(const ParallelLayout& l, int world, int r) {
  RankCoords c;
  c.dp_size = data_parallel_size(l, world);
  MEGADLM_CHECK(r >= 0 && r < world, "rank ", r, " outside a world of ", world);
  c.tp = r % l.tp;
  r /= l.tp;
  c.cp = r % l.cp;
  r /= l.cp;
  c.dp = r % c.dp_size;
  c.pp = r / c.dp_size;
  c.ep = c.dp % l.ep;
  c.edp = c.dp / l.ep;
  return c;
}

int world_rank_of(const ParallelLayout& l, int world, int tp, int cp, int dp, int pp) {
  const int dp_size = data_parallel_size(l, world);
  return tp + l.tp * (cp + l.cp * (dp + dp_size * pp));
}

ParallelContext make_parallel_context(const ParallelLayout& l) {
  const int world = world_size();
  const int rank = world_rank();
  const RankCoords c = rank_coords(l, world, rank);
  ParallelContext ctx;
  ctx.world_size = world;
  ctx.world_rank = rank;
  ctx.world = {world, rank, world_communicator(), nullptr};
  // Each split is collective over the world: every rank makes every split, in the same order. The
  // color names the group (the coordinates that stay fixed), the key orders ranks within it.
  const int dpn = c.dp_size;
  auto group = [&](int size, int coord, int color, const char* name) {
    ParallelGroup g{size, coord, nullptr, nullptr};
    std::shared_ptr<Communicator> comm = split_world(color, coord, name);
    if (size > 1) g.comm = comm;
    MEGADLM_CHECK(comm->size() == size && comm->rank() == coord, "group ", name, ": MPI made a group of ",
                  comm->size(), " with rank ", comm->rank(), ", expected ", size, " / ", coord);
    return g;
  };
  ctx.tp = group(l.tp, c.tp, (c.pp * dpn + c.dp) * l.cp + c.cp, "tp");
  ctx.cp = group(l.cp, c.cp, (c.pp * dpn + c.dp) * l.tp + c.tp, "cp");
  ctx.dp = group(dpn, c.dp, (c.pp * l.cp + c.cp) * l.tp + c.tp, "dp");
  ctx.pp = group(l.pp, c.pp, (c.dp * l.cp + c.cp) * l.tp + c.tp, "pp");
  ctx.ep = group(l.ep, c.ep, ((c.pp * (dpn / l.ep) + c.edp) * l.cp + c.cp) * l.tp + c.tp, "ep");
  ctx.edp = group(dpn / l.ep, c.edp, ((c.pp * l.ep + c.ep) * l.cp + c.cp) * l.tp + c.tp, "edp");
  // The embedding group: the first and the last stage of each pipeline (one rank when pp = 1); every
  // other stage is a group of its own (colors from `world` up cannot clash with the members').
  const bool in_embd = c.pp == 0 || c.pp == l.pp - 1;
  ctx.embd = group(in_embd ? std::min(l.pp, 2) : 1, c.pp == 0 ? 0 : in_embd ? 1 : 0,
                   in_embd ? (c.dp * l.cp + c.cp) * l.tp + c.tp : world + rank, "embd");
  return ctx;
}

std::string describe(const ParallelLayout& l, int world) {
  return "tp=" + std::to_string(l.tp) + " pp=" + std::to_string(l.pp) + " cp=" + std::to_string(l.cp) +
         " dp=" + std::to_string(data_parallel_size(l, world)) + " ep=" + std::to_string(l.ep);
}

}  // namespace megadlm
