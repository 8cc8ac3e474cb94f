#pragma once
// What the pipeline tests share (test_pp.cpp for the decoders, test_pp_bert.cpp for BERT): the
// fixture of the multi-rank tests, a context that places a model on a stage without communicating, stages chained by hand in one process, and the
// comparison of a stage's parameters with the whole model's, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/parameters.h"
#include "models/micro_batch.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "parallel/parallel_context.h"

namespace megadlm::test {

// max |a - b| / max |b| over one parameter.
inline double rel_diff(const Tensor& a, const Tensor& b) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    scale = std::fmax(scale, std::fabs(b.data<float>()[i]));
    const double e = std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
    if (!(e <= err)) err = e;
  }
  return err / (scale > 0 ? scale : 1.0);
}

// A fixture for tests under mpirun -np 2 / -np 4 (ctest mpi_pp_np2, mpi_pp_np4): every rank a
// pipeline stage of `ctx`; skipped otherwise.
class PipelineWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun -np 2 or -np 4 (ctest: mpi_pp_np2, mpi_pp_np4)";
    init_distributed(nullptr, nullptr);
    if (world_size() != 2 && world_size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks, got " << world_size();
    ParallelLayout l;
    l.pp = world_size();
    ctx = make_parallel_context(l);
  }
  ParallelContext ctx;
};

// Stage `rank` of `pp`, for construction only: no communicator.
inline ParallelContext fake_pipeline(int pp, int rank) {
  ParallelContext ctx;
  ctx.pp = ParallelGroup{pp, rank, nullptr, nullptr};
  return ctx;
}

// The largest rel_diff of a stage's gradients against the whole model's parameters of the same names
// (worst_name: which); fails the test for a name the whole model lacks.
inline double worst_gradient(const ParamStore& stage, const ParamStore& full, std::string* worst_name) {
  double worst = 0;
  for (int id = 0; id < stage.count(); ++id) {
    const std::string& name = stage.info(id).name;
    const int fid = full.find(name);
    EXPECT_GE(fid, 0) << name;
    if (fid < 0) continue;
    const double e = rel_diff(stage.grad(id), full.grad(fid));
    if (!(e <= worst)) {
      worst = e;
      *worst_name = name;
    }
  }
  return worst;
}

// One micro-batch through stages (LanguageModel or BertModel, pp of them) chained by hand: forwards
// down, each output handed to the next stage and the activations released; the last stage's backward;
// then each earlier stage recomputing its forward before its backward, as the schedule does, its
// input gradient handed up. Returns the last stage's loss.
template <typename Stage>
double chain_stages(std::vector<std::unique_ptr<Stage>>& st, const MicroBatch& mb) {
  const int pp = static_cast<int>(st.size());
  const int64_t n = st[0]->activation_floats(mb);
  std::vector<std::vector<float>> inputs(pp);
  for (int r = 0; r + 1 < pp; ++r) {
    Tensor out = st[r]->forward_stage(mb, r == 0 ? nullptr : inputs[r].data());
    inputs[r + 1].assign(out.data<float>(), out.data<float>() + n);
    st[r]->release_activations();
  }
  std::vector<float> grad(n, NAN), next(n, NAN);
  const double loss = st[pp - 1]->backward_stage(mb, st[pp - 1]->forward_stage(mb, inputs[pp - 1].data()), nullptr,
                                                 1.0f, grad.data());
  for (int r = pp - 2; r >= 0; --r) {
    Tensor out = st[r]->forward_stage(mb, r == 0 ? nullptr : inputs[r].data());
    EXPECT_EQ(st[r]->backward_stage(mb, out, grad.data(), 1.0f, r == 0 ? nullptr : next.data()), 0.0);
    std::swap(grad, next);
  }
  return loss;
}

// After chain_stages: every stage's weights are the whole model's of the same name (the same init),
// and its gradients within 1e-5 of them, the tied copies' gradients summed first as the embedding
// group does; together the stages hold every parameter once (the last stage's copy aside).
template <typename Stage>
void expect_stages_match(std::vector<std::unique_ptr<Stage>>& st, const ParamStore& full) {
  const int pp = static_cast<int>(st.size());
  const int first_copy = st[0]->shared_embedding_id(), last_copy = st[pp - 1]->shared_embedding_id();
  if (first_copy >= 0) {
    Tensor g0 = st[0]->params().grad(first_copy), g1 = st[pp - 1]->params().grad(last_copy);
    for (int64_t i = 0; i < g0.numel(); ++i) g0.data<float>()[i] += g1.data<float>()[i];
  }
  int64_t seen = 0;
  for (int r = 0; r < pp; ++r) {
    const ParamStore& ps = st[r]->params();
    for (int id = 0; id < ps.count(); ++id) {
      const int fid = full.find(ps.info(id).name);
      ASSERT_GE(fid, 0) << ps.info(id).name;
      EXPECT_EQ(rel_diff(ps.value(id), full.value(fid)), 0.0) << ps.info(id).name << ": init differs";
      if (r == pp - 1 && id == last_copy) continue;  // checked on stage 0
      EXPECT_LE(rel_diff(ps.grad(id), full.grad(fid)), 1e-5) << ps.info(id).name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, full.count());
}

}  // namespace megadlm::test
