// Pipeline parallelism: the stage split (global layer names, embedding / head ownership, the tied
// embedding copy), the stage forward/backward API, and the 1F1B schedule under mpirun -np 2 and -np 4
// (ctest: mpi_pp_np2, mpi_pp_np4), whose summed loss and every parameter gradient must equal the
// single-process forward_backward over the same micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/language_model.h"
#include "objectives/masked_diffusion.h"
#include "objectives/next_token.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "pipeline_test_util.h"
#include "train/pipeline_schedule.h"

using namespace megadlm;
using megadlm::test::fake_pipeline;

namespace {

enum class Kind { Gpt, Dlm };

// 4 layers (so pp 2 and pp 4 both divide them), awkward widths; GPT-2 style for GPT, LLaMA style for
// the DLM. T x C x 4 bytes = 7.5 KB per activation: above OpenMPI's shared-memory eager limit, so the
// schedule's blocking sends really wait for their receives.
TransformerConfig tiny(Kind kind, bool tied) {
  TransformerConfig c;
  c.num_layers = 4;
  c.hidden_size = 40;
  c.num_attention_heads = 4;
  c.num_query_groups = kind == Kind::Gpt ? 4 : 2;
  c.kv_channels = 10;
  c.ffn_hidden_size = 72;
  c.vocab_size = 53;
  c.max_position_embeddings = 32;
  if (kind == Kind::Dlm) {
    c.normalization = NormKind::RMSNorm;
    c.activation = Activation::SwiGLU;
    c.add_bias_linear = false;
    c.position_embedding = PositionEmbedding::Rope;
    c.attention_mask = MaskType::None;
  }
  c.untie_embeddings_and_output_weights = !tied;
  return c;
}

ModelSpec spec_of(Kind kind, const TransformerConfig& c) {
  return kind == Kind::Gpt ? gpt_model_spec(c) : decoder_model_spec(c, difflm_layer_spec(c, MaskType::None, 0));
}

constexpr int64_t kB = 2, kT = 24;
constexpr uint64_t kSeed = 77;

// Micro-batch m of a global batch of M: samples 1000 + m*B ... , tokens from the test RNG keyed by
// sample index (ids 1 .. V-2: 0 is the end-of-document token, V-1 the mask token).
void prepare(Kind kind, const TransformerConfig& c, int64_t m, int64_t M, MicroBatch& out) {
  SampleBatch s;
  s.B = kB;
  s.T = kT;
  s.first_sample = 1000 + static_cast<uint64_t>(m * kB);
  s.tokens.resize(kB * (kT + 1));
  for (int64_t b = 0; b < kB; ++b) {
    CounterRng rng(kSeed + s.first_sample + b, RngPurpose::Test);
    for (int64_t t = 0; t <= kT; ++t)
      s.tokens[b * (kT + 1) + t] = 1 + static_cast<int32_t>(rng.uniform(t, 0, 0) * (c.vocab_size - 2));
  }
  s.tokens[5] = 0;  // one document boundary
  const float weight = 1.0f / static_cast<float>(M);
  if (kind == Kind::Gpt) {
    NextTokenOptions o;
    o.eod = 0;
    NextToken(o).prepare(s, weight, out);
  } else {
    DiffusionOptions o;
    o.seed = 4242;
    o.mask_token = static_cast<int32_t>(c.vocab_size - 1);
    o.eod = 0;
    o.loss = DiffusionLoss::LLaDA;
    o.varilen_prob = 0;
    o.global_batch_size = M * kB;
    MaskedDiffusion(o).prepare(s, weight, out);
  }
}

// The single-process reference: forward_backward over the M micro-batches.
double reference_step(LanguageModel& full, Kind kind, int64_t M) {
  full.params().zero_grads();
  double loss = 0;
  MicroBatch pb;
  for (int64_t m = 0; m < M; ++m) {
    prepare(kind, full.config(), m, M, pb);
    loss += full.forward_backward(pb, 1.0f);
  }
  return loss;
}

std::vector<std::string> names(const LanguageModel& m) {
  std::vector<std::string> out;
  for (const ParamInfo& p : m.params().infos()) out.push_back(p.name);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

// ---- one process -------------------------------------------------------------------------------

TEST(PipelineStages, LayersSplitEvenlyWithGlobalNames) {
  const TransformerConfig c = tiny(Kind::Gpt, true);
  for (int pp : {1, 2, 4}) {
    for (int r = 0; r < pp; ++r) {
      LanguageModel m(c, spec_of(Kind::Gpt, c), fake_pipeline(pp, r));
      const LayerRange range = m.layers();
      EXPECT_EQ(range.begin, r * 4 / pp);
      EXPECT_EQ(range.end, (r + 1) * 4 / pp);
      const std::vector<std::string> n = names(m);
      for (int64_t l = 0; l < 4; ++l)
        EXPECT_EQ(has(n, "layers." + std::to_string(l) + ".input_layernorm.weight"), l >= range.begin && l < range.end)
            << "pp " << pp << " stage " << r << " layer " << l;
      EXPECT_EQ(has(n, "embed_positions.weight"), r == 0);
      EXPECT_EQ(has(n, "norm.weight"), r == pp - 1);
      // Tied: the last stage keeps its own copy of the word embeddings for the output layer.
      EXPECT_EQ(has(n, "embed_tokens.weight"), r == 0 || r == pp - 1);
      EXPECT_EQ(m.shared_embedding_id() >= 0, pp > 1 && (r == 0 || r == pp - 1));
      EXPECT_FALSE(has(n, "lm_head.weight"));
    }
  }
  const TransformerConfig u = tiny(Kind::Gpt, false);
  LanguageModel last(u, spec_of(Kind::Gpt, u), fake_pipeline(2, 1));
  EXPECT_TRUE(has(names(last), "lm_head.weight"));
  EXPECT_FALSE(has(names(last), "embed_tokens.weight"));
  EXPECT_EQ(last.shared_embedding_id(), -1);
}

TEST(PipelineStages, LayersNotDivisibleByStagesNameBothFlags) {
  TransformerConfig c = tiny(Kind::Gpt, true);
  c.num_layers = 6;
  try {
    LanguageModel m(c, spec_of(Kind::Gpt, c), fake_pipeline(4, 0));
    FAIL() << "6 layers on 4 stages were accepted";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--num-layers 6"), std::string::npos) << w;
    EXPECT_NE(w.find("--pipeline-model-parallel-size 4"), std::string::npos) << w;
  }
}

// The stage API in one process: stages of a pp-4 split chained by hand (forward down, backward up,
// each non-last stage recomputing its forward before its backward as the schedule does) give the
// whole model's loss and gradients, and every stage starts from the whole model's weights.
TEST(PipelineStages, ChainedStagesEqualTheWholeModel) {
  for (Kind kind : {Kind::Gpt, Kind::Dlm}) {
    for (bool tied : {true, false}) {
      const TransformerConfig c = tiny(kind, tied);
      LanguageModel full(c, spec_of(kind, c), ParallelContext::single());
      full.params().init(kSeed);
      const int64_t M = 3;
      const double ref = reference_step(full, kind, M);
      const int pp = 4;
      std::vector<std::unique_ptr<LanguageModel>> st;
      for (int r = 0; r < pp; ++r) {
        st.push_back(std::make_unique<LanguageModel>(c, spec_of(kind, c), fake_pipeline(pp, r)));
        st.back()->params().init(kSeed);
      }
      double loss = 0;
      MicroBatch pb;
      for (int64_t m = 0; m < M; ++m) {
        prepare(kind, c, m, M, pb);
        loss += test::chain_stages(st, pb);
      }
      EXPECT_EQ(loss, ref) << "kind " << static_cast<int>(kind) << " tied " << tied;
      test::expect_stages_match(st, full.params());
    }
  }
}

TEST(PipelineStages, OneStageScheduleIsThePlainLoop) {
  const TransformerConfig c = tiny(Kind::Dlm, true);
  LanguageModel full(c, spec_of(Kind::Dlm, c), ParallelContext::single());
  LanguageModel pipe(c, spec_of(Kind::Dlm, c), ParallelContext::single());
  full.params().init(kSeed);
  pipe.params().init(kSeed);
  const int64_t M = 3;
  const double ref = reference_step(full, Kind::Dlm, M);
  const double loss = pipeline_1f1b_step(
      pipe, ParallelContext::single(), M, [&](int64_t m, MicroBatch& pb) { prepare(Kind::Dlm, c, m, M, pb); }, 1.0f);
  EXPECT_EQ(loss, ref);
  for (int64_t i = 0; i < full.params().numel(); ++i) ASSERT_EQ(pipe.params().grads()[i], full.params().grads()[i]) << i;
}

// ---- several ranks (mpirun -np 2 / -np 4: ctest mpi_pp_np2, mpi_pp_np4) ----------------------

class PipelineMpi : public test::PipelineWorld {
 protected:
  // The pipeline step against the single-process reference, on every rank for its own stage.
  void check(Kind kind, bool tied, int64_t M) {
    SCOPED_TRACE(std::string(kind == Kind::Gpt ? "gpt" : "dlm") + (tied ? " tied" : " untied") + " M " +
                 std::to_string(M) + " pp " + std::to_string(ctx.pp.size) + " stage " + std::to_string(ctx.pp.rank));
    const TransformerConfig c = tiny(kind, tied);
    LanguageModel full(c, spec_of(kind, c), ParallelContext::single());
    full.params().init(kSeed);
    const double ref = reference_step(full, kind, M);
    LanguageModel stage(c, spec_of(kind, c), ctx);
    stage.params().init(kSeed);
    stage.params().grads()[0] = NAN;  // poisoned: the step must start from zeroed gradients
    stage.params().zero_grads();
    int64_t prepared = 0;
    const double loss = pipeline_1f1b_step(
        stage, ctx, M,
        [&](int64_t m, MicroBatch& pb) {
          EXPECT_EQ(m, prepared++) << "micro-batches must be prepared in order";
          prepare(kind, c, m, M, pb);
        },
        1.0f);
    EXPECT_EQ(prepared, M);
    EXPECT_LE(std::fabs(loss - ref) / std::fabs(ref), 1e-6) << loss << " vs " << ref;
    // Every parameter of this stage against the whole model's, by name.
    std::string worst_name;
    EXPECT_LE(test::worst_gradient(stage.params(), full.params(), &worst_name), 1e-5) << "worst gradient: " << worst_name;
    double sq = 0;
    for (int64_t i = 0; i < stage.params().numel(); ++i) sq += stage.params().grads()[i] * stage.params().grads()[i];
    EXPECT_GT(sq, 0.0) << "this stage received no gradient";
    // Together the stages hold every parameter once (the tied copy on the last stage aside).
    double owned = stage.params().count() - ((ctx.is_last_stage() && stage.shared_embedding_id() >= 0) ? 1 : 0);
    ctx.pp.communicator().all_reduce_sum(&owned, 1);
    EXPECT_EQ(owned, full.params().count());
  }
};

TEST_F(PipelineMpi, GptTiedFewerMicroBatchesThanStages) { check(Kind::Gpt, true, ctx.pp.size - 1); }
TEST_F(PipelineMpi, GptTiedMoreMicroBatchesThanStages) { check(Kind::Gpt, true, ctx.pp.size + 3); }
TEST_F(PipelineMpi, GptUntiedMoreMicroBatchesThanStages) { check(Kind::Gpt, false, ctx.pp.size + 2); }
TEST_F(PipelineMpi, DlmTiedFewerMicroBatchesThanStages) { check(Kind::Dlm, true, std::max(1, ctx.pp.size - 2)); }
TEST_F(PipelineMpi, DlmUntiedFewerMicroBatchesThanStages) { check(Kind::Dlm, false, ctx.pp.size - 1); }
TEST_F(PipelineMpi, DlmUntiedMoreMicroBatchesThanStages) { check(Kind::Dlm, false, ctx.pp.size + 3); }
TEST_F(PipelineMpi, DlmTiedMoreMicroBatchesThanStages) { check(Kind::Dlm, true, 2 * ctx.pp.size + 1); }

TEST_F(PipelineMpi, ForwardOnlyLossMatchesOnEveryStage) {
  const TransformerConfig c = tiny(Kind::Dlm, true);
  LanguageModel full(c, spec_of(Kind::Dlm, c), ParallelContext::single());
  LanguageModel stage(c, spec_of(Kind::Dlm, c), ctx);
  full.params().init(kSeed);
  stage.params().init(kSeed);
  MicroBatch pb;
  prepare(Kind::Dlm, c, 3, 4, pb);
  EXPECT_EQ(pipeline_forward_loss(stage, ctx, pb), full.forward_loss(pb));
}

TEST_F(PipelineMpi, EmbeddingGroupIsTheFirstAndTheLastStage) {
  const bool end = ctx.is_first_stage() || ctx.is_last_stage();
  EXPECT_EQ(ctx.embd.size, end ? 2 : 1);
  EXPECT_EQ(ctx.embd.rank, ctx.is_last_stage() ? 1 : 0);
  if (!end) return;
  double v = 1.0 + ctx.pp.rank;  // stage 0 and stage pp-1 exchange: 1 + pp
  ctx.embd.communicator().all_reduce_sum(&v, 1);
  EXPECT_EQ(v, 1.0 + ctx.pp.size);
}
