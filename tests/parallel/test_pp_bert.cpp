// BERT as pipeline stages (models/bert_model.h): the split (the embedding on the first stage, the
// layers under their global names, the final norm and both heads with a copy of the tied word
// embeddings on the last), the stage API chained by hand in one process, and the 1F1B schedule and the
// forward-only pass under mpirun -np 2 and -np 4 (ctest: mpi_pp_np2, mpi_pp_np4), against the whole
// model's losses and gradients on padded micro-batches with both heads' labels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/bert_model.h"
#include "models/bert_model_fixture.h"
#include "models/bert_spec.h"
#include "pipeline_test_util.h"
#include "test_util.h"
#include "train/pipeline_schedule.h"

using namespace megadlm;
using megadlm::test::fake_pipeline;
using megadlm::test::rel_diff;

namespace {

constexpr uint64_t kSeed = 31;

// 4 layers (pp 2 and pp 4 both divide them) of the tests' small BERT.
TransformerConfig config() {
  TransformerConfig c = test::bert_config();
  c.num_layers = 4;
  return c;
}

ModelSpec spec(const TransformerConfig& c, bool pre_norm) {
  BertOptions o;
  o.pre_norm = pre_norm;
  return bert_model_spec(c, o);
}

// Micro-batch m: the fixture's padded batch with its tokens shifted by m (ids stay in the vocabulary)
// and its binary labels flipped on odd m; MLM weights 0.5 on odd m.
BertBatch batch(int64_t m, const TransformerConfig& c) {
  BertBatch b = test::padded_batch();
  for (int32_t& t : b.tokens) t = static_cast<int32_t>((t + m) % c.vocab_size);
  if (m % 2 == 1) {
    for (int32_t& l : b.binary_labels) l = 1 - l;
    b.mlm_weights.assign(b.tokens.size(), 0.5f);
  }
  return b;
}

// The single process's step: forward_backward over the M micro-batches; the sum of their losses.
double reference_step(BertModel& full, int64_t M) {
  full.params().zero_grads();
  double loss = 0;
  for (int64_t m = 0; m < M; ++m) {
    const BertLosses l = full.forward_backward(batch(m, full.config()), 1.0f);
    loss += l.mlm + l.binary;
  }
  return loss;
}

bool has(const BertModel& m, const std::string& name) { return m.params().find(name) >= 0; }

}  // namespace

// ---- one process -------------------------------------------------------------------------------

TEST(BertPipelineStages, SplitPutsTheEmbeddingFirstAndTheHeadsLast) {
  const TransformerConfig c = config();
  for (int pp : {1, 2, 4}) {
    for (int r = 0; r < pp; ++r) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " stage " + std::to_string(r));
      BertModel m(c, spec(c, true), fake_pipeline(pp, r));
      EXPECT_EQ(m.layers().begin, r * 4 / pp);
      EXPECT_EQ(m.layers().end, (r + 1) * 4 / pp);
      for (int64_t l = 0; l < 4; ++l)
        EXPECT_EQ(has(m, "layers." + std::to_string(l) + ".input_layernorm.weight"),
                  l >= m.layers().begin && l < m.layers().end)
            << "layer " << l;
      EXPECT_EQ(has(m, "embed_positions.weight"), r == 0);
      EXPECT_EQ(has(m, "embed_token_types.weight"), r == 0);
      EXPECT_EQ(has(m, "norm.weight"), r == pp - 1);
      EXPECT_EQ(has(m, "mlm_head.bias"), r == pp - 1);
      EXPECT_EQ(has(m, "binary_head.weight"), r == pp - 1);
      // The MLM decoder is tied: the last stage keeps its own copy of the word embeddings.
      EXPECT_EQ(has(m, "embed_tokens.weight"), r == 0 || r == pp - 1);
      EXPECT_EQ(m.shared_embedding_id() >= 0, pp > 1 && (r == 0 || r == pp - 1));
      EXPECT_EQ(m.is_first_stage(), r == 0);
      EXPECT_EQ(m.is_last_stage(), r == pp - 1);
    }
  }
  TransformerConfig six = c;
  six.num_layers = 6;
  const std::string e = test::error_of([&] { BertModel m(six, spec(six, true), fake_pipeline(4, 1)); });
  EXPECT_NE(e.find("--num-layers 6 is not divisible by --pipeline-model-parallel-size 4"), std::string::npos) << e;
}

// Stages of a pp-4 split chained by hand (forward down, backward up, each stage but the last
// recomputing its forward before its backward, as the schedule does) give the whole model's losses
// and gradients, post- and pre-norm; every stage starts from the whole model's weights.
TEST(BertPipelineStages, ChainedStagesEqualTheWholeModel) {
  const TransformerConfig c = config();
  const int pp = 4;
  const int64_t M = 3;
  for (bool pre_norm : {false, true}) {
    SCOPED_TRACE(pre_norm ? "pre-norm" : "post-norm");
    BertModel full(c, spec(c, pre_norm), ParallelContext::single());
    full.params().init(kSeed);
    const double ref = reference_step(full, M);
    std::vector<std::unique_ptr<BertModel>> st;
    for (int r = 0; r < pp; ++r) {
      st.push_back(std::make_unique<BertModel>(c, spec(c, pre_norm), fake_pipeline(pp, r)));
      st.back()->params().init(kSeed);
    }
    double loss = 0;
    MicroBatch mb;
    for (int64_t m = 0; m < M; ++m) {
      BertModel::micro_batch_of(batch(m, c), mb);
      loss += test::chain_stages(st, mb);
    }
    EXPECT_EQ(loss, ref);
    EXPECT_EQ(st[pp - 1]->take_stage_losses().size(), static_cast<size_t>(M));
    EXPECT_TRUE(st[0]->take_stage_losses().empty());
    test::expect_stages_match(st, full.params());
  }
}

// ---- several ranks (mpirun -np 2 / -np 4: ctest mpi_pp_np2, mpi_pp_np4) ----------------------

class PipelineMpiBert : public test::PipelineWorld {};

// The 1F1B step on every rank for its own stage: the loss (on every stage), the last stage's two
// losses per micro-batch, and every parameter's gradient (the tied copies after the embedding group's
// sum) against the whole model's.
TEST_F(PipelineMpiBert, StepMatchesTheWholeModel) {
  const TransformerConfig c = config();
  for (int64_t M : {int64_t{1}, int64_t{ctx.pp.size + 2}}) {
    SCOPED_TRACE("M " + std::to_string(M) + " stage " + std::to_string(ctx.pp.rank));
    BertModel full(c, spec(c, true), ParallelContext::single());
    full.params().init(kSeed);
    const double ref = reference_step(full, M);
    BertModel stage(c, spec(c, true), ctx);
    stage.params().init(kSeed);
    stage.params().zero_grads();
    const double loss = pipeline_1f1b_step(
        stage, ctx, M, [&](int64_t m, MicroBatch& mb) { BertModel::micro_batch_of(batch(m, c), mb); }, 1.0f);
    EXPECT_LE(std::fabs(loss - ref) / std::fabs(ref), 1e-6) << loss << " vs " << ref;
    const std::vector<BertLosses> parts = stage.take_stage_losses();
    EXPECT_EQ(parts.size(), stage.is_last_stage() ? static_cast<size_t>(M) : 0u);
    std::string worst_name;
    EXPECT_LE(test::worst_gradient(stage.params(), full.params(), &worst_name), 1e-5) << "worst gradient: " << worst_name;
  }
}

// Forward only (the evaluation's path): the last stage's losses and logits are the whole model's.
TEST_F(PipelineMpiBert, ForwardMatchesTheWholeModel) {
  const TransformerConfig c = config();
  BertModel full(c, spec(c, true), ParallelContext::single());
  BertModel stage(c, spec(c, true), ctx);
  full.params().init(kSeed);
  stage.params().init(kSeed);
  const BertBatch b = batch(1, c);
  BertModel::Logits want;
  const BertLosses ref = full.forward_loss(b, &want);
  MicroBatch mb;
  BertModel::micro_batch_of(b, mb);
  bool scored = false;
  pipeline_forward(stage, ctx, mb, [&](const Tensor& out) {
    BertModel::Logits got;
    const BertLosses l = stage.stage_losses(mb, out, &got);
    EXPECT_EQ(l.mlm, ref.mlm);
    EXPECT_EQ(l.binary, ref.binary);
    EXPECT_EQ(rel_diff(got.mlm, want.mlm), 0.0);
    EXPECT_EQ(rel_diff(got.binary, want.binary), 0.0);
    scored = true;
  });
  EXPECT_EQ(scored, stage.is_last_stage());
  EXPECT_EQ(pipeline_forward_loss(stage, ctx, mb), ref.mlm + ref.binary);  // broadcast to every stage
}
