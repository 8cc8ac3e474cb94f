// T5 under `mpirun -np 2` (tp = 2) against one rank on the same full weights and batch: the whole
// T5Model, v1.0 (ReLU, tied output scaled by d_model^-0.5) and v1.1 (gated GELU, untied lm_head), on a
// padded batch: the gathered logits, the loss and every parameter's gradient (the heads' columns of
// q/k/v, o's rows, the relative bias table's columns, the feed-forward's split, the vocab-parallel
// embedding and output matrix). And what tp does not build: heads that do not divide, sequence
// parallelism. Without mpirun it skips; ctest runs it as mpi_tp_np2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "models/t5_model.h"
#include "models/t5_model_fixture.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

TEST(TensorParallelT5, WholeModelMatchesOneRank) {
  MEGADLM_REQUIRE_TP2(tp, false);
  for (bool v11 : {false, true}) {
    SCOPED_TRACE(v11 ? "v1.1: gated GELU, untied" : "v1.0: ReLU, tied and scaled");
    const TransformerConfig cfg = t5_config(v11);
    const T5Options opt = t5_options(cfg, v11);
    T5Model f(cfg, opt, ParallelContext::single()), t(cfg, opt, *tp);
    ASSERT_EQ(t.tied(), !v11);
    randomize(f.params(), 61, 0.3f);
    copy_shards(f.params(), t.params());
    const T5Batch b = t5_batch();
    const int64_t rows = b.B * b.T;
    const Tensor zf = f.forward_logits(b);
    const std::vector<float> want(zf.data<float>(), zf.data<float>() + zf.numel());
    const Tensor zt = t.forward_logits(b);
    ASSERT_EQ(zt.numel(), rows * cfg.vocab_size);
    const double logits_error = world_max(rows_error(ParallelContext::single(), zt.data<float>(), want, rows));
    EXPECT_LT(logits_error, 1e-5);
    const double lf = f.forward_backward(b, 0.5f), lt = t.forward_backward(b, 0.5f);
    const double loss_error = world_max(std::fabs(lt - lf) / std::fabs(lf));
    EXPECT_LT(loss_error, 1e-6) << lt << " vs " << lf;
    std::string worst;
    const double gradient_error = world_max(grad_error(f.params(), t.params(), &worst));
    EXPECT_LT(gradient_error, 1e-5) << worst;
    if (tp->tp.rank == 0)
      std::printf("t5 %s tp2 vs one rank: logits %.2e, loss %.2e, gradients %.2e (worst %s)\n", v11 ? "v1.1" : "v1.0",
                  logits_error, loss_error, gradient_error, worst.c_str());
  }
}

TEST(TensorParallelT5, RefusesWhatTpDoesNotBuild) {
  MEGADLM_REQUIRE_TP2(tp, false);
  TransformerConfig cfg = t5_config(false);
  cfg.num_attention_heads = cfg.num_query_groups = 3;  // inner size 18 divides by 2, the heads do not
  try {
    T5Model m(cfg, t5_options(cfg, false), *tp);
    FAIL() << "3 heads over 2 tensor-parallel ranks were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-attention-heads 3 is not divisible by --tensor-model-parallel-size 2"),
              std::string::npos)
        << e.what();
  }
  cfg = t5_config(false);
  MEGADLM_REQUIRE_TP2(sp, true);
  try {
    T5Model m(cfg, t5_options(cfg, false), *sp);
    FAIL() << "sequence parallelism was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sequence-parallel"), std::string::npos) << e.what();
  }
}

}  // namespace
