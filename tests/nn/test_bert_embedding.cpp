// BERT's embedding: the token-type table and the LayerNorm of the sum, the forward against a naive
// double reference, the gradients by finite differences, the token types' checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "grad_check.h"
#include "nn/embedding.h"
#include "nn/bert_reference.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

using test::layernorm;
using test::param;

// ---- the embedding ------------------------------------------------------------------------------------

struct Ids {
  int64_t B = 2, T = 3;
  std::vector<int32_t> tokens{1, 12, 5, 5, 0, 7}, positions{0, 1, 2, 0, 1, 2}, types{0, 0, 1, 1, 0, 1};
  BatchInfo info() const { return BatchInfo{B, T, positions.data(), nullptr}; }
};

TEST(BertEmbedding, TokenTypesAndLayerNormMatchANaiveSum) {
  const TransformerConfig cfg = test::small_bert_config();
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  Embedding emb(store, ctx, cfg, EmbeddingSpec{true, 2, false, true});
  store.finalize();
  randomize(store, 3);
  EXPECT_EQ(store.info(store.find("embed_token_types.weight")).shape, (Shape{2, 8}));
  ASSERT_GE(store.find("embed_norm.bias"), 0);
  const Ids ids;
  Arena arena;
  const Tensor y = emb.forward(arena, ids.tokens.data(), ids.info(), ids.types.data());
  const float *wte = param(store, "embed_tokens.weight"), *wpe = param(store, "embed_positions.weight"),
              *wtt = param(store, "embed_token_types.weight");
  for (int64_t n = 0; n < 6; ++n) {
    std::vector<double> sum(8);
    for (int64_t c = 0; c < 8; ++c)
      sum[c] = static_cast<double>(wte[ids.tokens[n] * 8 + c]) + wpe[ids.positions[n] * 8 + c] +
               wtt[ids.types[n] * 8 + c];
    const std::vector<double> want =
        layernorm(sum, param(store, "embed_norm.weight"), param(store, "embed_norm.bias"), cfg.norm_epsilon);
    for (int64_t c = 0; c < 8; ++c) EXPECT_NEAR(y.data<float>()[n * 8 + c], want[c], 1e-5) << n << "," << c;
  }
}

TEST(BertEmbedding, GradientsMatchFiniteDifferences) {
  const TransformerConfig cfg = test::small_bert_config();
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  Embedding emb(store, ctx, cfg, EmbeddingSpec{true, 2, false, true});
  store.finalize();
  randomize(store, 4);
  const Ids ids;
  Arena arena;
  check_gradients("embedding with token types and LayerNorm", store, arena, {}, {0},
                  sum_times_random(6 * 8, 5, [&](Arena& a, const Tensor&) {
                    return emb.forward(a, ids.tokens.data(), ids.info(), ids.types.data());
                  }, [&](Arena&, const Tensor& dy, Tensor&) { emb.backward(dy); }));
}

TEST(BertEmbedding, TokenTypesAreCheckedByName) {
  const TransformerConfig cfg = test::small_bert_config();
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  Embedding emb(store, ctx, cfg, EmbeddingSpec{true, 2, false, true});
  store.finalize();
  Ids ids;
  Arena arena;
  EXPECT_NE(test::error_of([&] { emb.forward(arena, ids.tokens.data(), ids.info()); })
                .find("has a token-type table but no token types were given"),
            std::string::npos);
  ids.types[4] = 2;
  EXPECT_NE(test::error_of([&] { emb.forward(arena, ids.tokens.data(), ids.info(), ids.types.data()); })
                .find("token type 2 at position 4 is outside [0, 2)"),
            std::string::npos);
  ParamStore plain_store;
  Embedding plain(plain_store, ctx, cfg, EmbeddingSpec{});
  plain_store.finalize();
  EXPECT_NE(test::error_of([&] { plain.forward(arena, ids.tokens.data(), ids.info(), ids.types.data()); })
                .find("no token-type table"),
            std::string::npos);
}

}  // namespace
}  // namespace megadlm
