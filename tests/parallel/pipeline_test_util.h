#pragma once
// What the pipeline tests share (test_pp.cpp for the decoders, test_pp_bert.cpp for BERT): a context
// that places a model on a stage without communicating, and the comparison of a stage's parameters
// with the whole model's, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/parameters.h"
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

}  // namespace megadlm::test
