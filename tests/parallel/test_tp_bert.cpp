// BERT under `mpirun -np 2` (tp = 2), with and without sequence parallelism, against one rank on the
// same full weights and inputs: the heads (the vocab-parallel MLM decoder tied to the word embedding's
// shard with its sharded output bias, the replicated pooler and binary head) and the whole BertModel
// (losses, logits, every parameter gradient). Without mpirun it skips; ctest runs it as mpi_tp_np2.
#include <gtest/gtest.h>

#include <vector>

#include "models/bert_model_fixture.h"
#include "models/bert_model.h"
#include "models/model_spec.h"
#include "nn/bert_heads.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// Relative difference of two losses, the same on every rank.
double loss_error(double got, double want) { return world_max(std::fabs(got - want) / std::fabs(want)); }

// The word embeddings (this rank's shard, as Embedding registers them) and both heads.
struct Heads {
  ParamStore store;
  MLMHead mlm;
  PoolerBinaryHead pooler;
  Heads(const ParallelContext& ctx, const TransformerConfig& cfg) {
    const int wte = store.add_balanced_shard("embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}, 0, ctx.tp.size,
                                             ctx.tp.rank, Init::Normal, 0.02f);
    mlm = MLMHead(store, ctx, cfg, wte, true);
    pooler = PoolerBinaryHead(store, ctx, cfg);
    store.finalize();
  }
};

TEST(TensorParallelBert, HeadsMatchOneRank) {
  TransformerConfig cfg;
  cfg.hidden_size = 8;
  cfg.vocab_size = 21;  // odd: the shards differ by a row
  const int64_t B = 2, T = 4, N = B * T, C = cfg.hidden_size;
  const std::vector<float> x = random_vector(N * C, 50, -1.5f, 1.5f);
  const std::vector<int32_t> labels{3, kMlmIgnore, 12, 20, kMlmIgnore, 0, kMlmIgnore, 11};  // ids in both shards
  const std::vector<int32_t> binary{1, 0};
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    const ParallelContext single;
    Heads f(single, cfg), t(*tp, cfg);
    randomize(f.store, 51, 0.5f);
    copy_shards(f.store, t.store);
    Arena af, at;
    // Forward: the gathered logits of every row.
    std::vector<float> xl = local_rows_of(*tp, x, N);
    const Tensor xf = Tensor::borrow(const_cast<float*>(x.data()), {N, C}, DType::F32);
    const Tensor xt = Tensor::borrow(xl.data(), {local_rows(*tp, N), C}, DType::F32);
    const std::vector<float> zf = copy_of(f.mlm.logits(af, xf));
    const Tensor zt = t.mlm.logits(at, xt);
    ASSERT_EQ(zt.numel(), N * cfg.vocab_size);
    EXPECT_LT(world_max(rows_error(single, zt.data<float>(), zf, N)), 1e-5);
    // Losses and the backward: dx (this rank's rows) and every parameter gradient.
    Tensor dxf = Tensor::empty({N, C}, DType::F32), dxt = Tensor::empty({local_rows(*tp, N), C}, DType::F32);
    const double lf = f.mlm.loss(af, xf, labels.data(), nullptr, 0.5f, &dxf) +
                      f.pooler.loss(af, xf, B, T, binary.data(), 0.5f, &dxf);
    const double lt = t.mlm.loss(at, xt, labels.data(), nullptr, 0.5f, &dxt) +
                      t.pooler.loss(at, xt, B, T, binary.data(), 0.5f, &dxt);
    EXPECT_LT(loss_error(lt, lf), 1e-6) << lt << " vs " << lf;
    EXPECT_LT(world_max(rows_error(*tp, dxt.data<float>(), copy_of(dxf), N)), 1e-5);
    std::string worst;
    EXPECT_LT(world_max(grad_error(f.store, t.store, &worst)), 1e-5) << worst;
  }
}

TEST(TensorParallelBert, WholeModelMatchesOneRank) {
  const TransformerConfig cfg = test::bert_config();
  for (bool pre_norm : {false, true}) {
    for (bool sp : {false, true}) {
      MEGADLM_REQUIRE_TP2(tp, sp);
      SCOPED_TRACE(std::string(pre_norm ? "pre-norm" : "post-norm") + (sp ? ", sequence parallel" : ", tp"));
      BertOptions o;
      o.pre_norm = pre_norm;
      const ModelSpec spec = bert_model_spec(cfg, o);
      BertModel f(cfg, spec, ParallelContext::single()), t(cfg, spec, *tp);
      randomize(f.params(), 52, 0.3f);
      copy_shards(f.params(), t.params());
      const BertBatch b = test::padded_batch();
      const std::vector<float> zf = copy_of(f.forward_logits(b).mlm);
      EXPECT_LT(world_max(rows_error(ParallelContext::single(), t.forward_logits(b).mlm.data<float>(), zf, 10)), 1e-5);
      const BertLosses lf = f.forward_backward(b, 1.0f), lt = t.forward_backward(b, 1.0f);
      EXPECT_LT(loss_error(lt.mlm, lf.mlm), 1e-6) << lt.mlm << " vs " << lf.mlm;
      EXPECT_LT(loss_error(lt.binary, lf.binary), 1e-6) << lt.binary << " vs " << lf.binary;
      std::string worst;
      EXPECT_LT(world_max(grad_error(f.params(), t.params(), &worst)), 1e-5) << worst;
    }
  }
}

}  // namespace
