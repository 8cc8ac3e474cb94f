#pragma once
// Helpers for the tensor-parallel tests: the tp-2 context under `mpirun -np 2` (the tests skip
// otherwise; ctest runs them as mpi_tp_np2), the same full weights in a single-rank and a sharded
// ParamStore, and gradient comparison through ParamInfo's shard description.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/parameters.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tp_mappings.h"
#include "test_util.h"

namespace megadlm::test {

// The tp = 2 context (sequence parallel or not) when this process is one of two MPI ranks, else null.
inline const ParallelContext* tp2_context(bool sp) {
  if (!launched_by_mpi()) return nullptr;
  init_distributed(nullptr, nullptr);
  if (world_size() != 2) return nullptr;
  static const ParallelContext ctx = make_parallel_context(ParallelLayout{2, 1, 1, 1});
  static const ParallelContext sp_ctx = [] {
    ParallelContext c = ctx;
    c.sequence_parallel = true;
    return c;
  }();
  return sp ? &sp_ctx : &ctx;
}

#define MEGADLM_REQUIRE_TP2(var, sp)                             \
  const ParallelContext* var = ::megadlm::test::tp2_context(sp); \
  if (!var) GTEST_SKIP() << "needs mpirun -np 2 (ctest runs it as mpi_tp_np2)"

// Every parameter gets random values keyed by its name (norm weights near 1, the rest in
// [-scale, scale)), so biases and norms are exercised too, not just their zero / one init.
inline void randomize(ParamStore& s, uint64_t seed, float scale) {
  for (const ParamInfo& p : s.infos()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    const std::vector<float> r = random_vector(p.shape.numel(), seed ^ fnv1a64(p.name), -1.0f, 1.0f);
    float* v = s.values() + p.offset;
    for (size_t i = 0; i < r.size(); ++i) v[i] = norm ? 1.0f + 0.2f * r[i] : scale * r[i];
  }
}

// Copies each parameter of the single-rank store into the shard store through ParamInfo: local
// element i is element global_index(i) of the full tensor (which has the single-rank layout).
inline void copy_shards(const ParamStore& full, ParamStore& shard) {
  for (const ParamInfo& p : shard.infos()) {
    const int fid = full.find(p.name);
    ASSERT_GE(fid, 0) << p.name;
    const ParamInfo& f = full.info(fid);
    ASSERT_EQ(f.shape.numel(), p.full_shape.numel()) << p.name;
    for (int64_t i = 0; i < p.shape.numel(); ++i) shard.values()[p.offset + i] = full.values()[f.offset + p.global_index(i)];
  }
}

// max over parameters of max_i |g_shard[i] - g_full[global_index(i)]| / scale, the worst name; the
// scale is max |g_full| of the tensor, floored at 1e-2 of the largest gradient of any tensor (some
// gradients vanish in exact arithmetic, e.g. the key bias's: softmax ignores a per-row shift).
inline double grad_error(const ParamStore& full, const ParamStore& shard, std::string* worst = nullptr) {
  double err = 0, global = 0;
  for (int64_t i = 0; i < full.numel(); ++i) global = std::max(global, std::fabs(static_cast<double>(full.grads()[i])));
  for (const ParamInfo& p : shard.infos()) {
    const ParamInfo& f = full.info(full.find(p.name));
    const float* gf = full.grads() + f.offset;
    double scale = 1e-2 * global, e = 0;
    for (int64_t i = 0; i < f.shape.numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(gf[i])));
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      const double d = std::fabs(static_cast<double>(shard.grads()[p.offset + i]) - gf[p.global_index(i)]);
      if (!(d <= e)) e = d;  // NaN propagates
    }
    e /= scale > 1e-20 ? scale : 1.0;
    if (!(e <= err)) {
      err = e;
      if (worst) *worst = p.name;
    }
  }
  return err;
}

// This rank's rows [r*N/tp, (r+1)*N/tp) of a row-major [N, C] array under sequence parallelism; all otherwise.
inline std::vector<float> local_rows_of(const ParallelContext& ctx, const std::vector<float>& full, int64_t N) {
  const int64_t n = local_rows(ctx, N), C = static_cast<int64_t>(full.size()) / N;
  const int64_t first = sequence_parallel(ctx) ? ctx.tp.rank * n : 0;
  return std::vector<float>(full.begin() + first * C, full.begin() + (first + n) * C);
}

// max |a - ref| / max |ref| for a's rows against the matching rows of the full reference.
inline double rows_error(const ParallelContext& ctx, const float* a, const std::vector<float>& full_ref, int64_t N) {
  const std::vector<float> ref = local_rows_of(ctx, full_ref, N);
  double scale = 0, e = 0;
  for (float r : full_ref) scale = std::max(scale, std::fabs(static_cast<double>(r)));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(d <= e)) e = d;
  }
  return e / (scale > 1e-20 ? scale : 1.0);
}

// The largest value of x over the world (so both ranks report and assert the same number).
inline double world_max(double x) {
  float v = static_cast<float>(std::isnan(x) ? INFINITY : x);
  world_communicator()->all_reduce_max(&v, 1);
  return v;
}

}  // namespace megadlm::test
