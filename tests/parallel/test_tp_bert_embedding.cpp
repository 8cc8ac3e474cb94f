// BERT's embedding (token types and the LayerNorm of the sum) under `mpirun -np 2` (tp = 2), with and
// without sequence parallelism, against the single-rank module on the same full weights and inputs:
// the output rows and every parameter gradient (the word embedding's shard, the replicated position
// and token-type tables, the LayerNorm). Without mpirun it skips; ctest runs it as mpi_tp_np2.
#include <gtest/gtest.h>

#include <vector>

#include "nn/embedding.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(TensorParallelBert, EmbeddingWithTokenTypesAndLayerNorm) {
  const int64_t B = 2, T = 6, N = B * T;
  TransformerConfig cfg;
  cfg.hidden_size = 8;
  cfg.vocab_size = 20;
  cfg.max_position_embeddings = T;
  std::vector<int32_t> tokens(N), pos(N), types(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size);  // ids in both halves
    pos[i] = static_cast<int32_t>(i % T);
    types[i] = static_cast<int32_t>((i / 3) % 2);
  }
  const BatchInfo batch{B, T, pos.data(), nullptr};
  const EmbeddingSpec spec{true, 2, false, true};
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    const ParallelContext single;
    ParamStore fs, ts;
    Embedding ef(fs, single, cfg, spec), et(ts, *tp, cfg, spec);
    fs.finalize();
    ts.finalize();
    randomize(fs, 40, 1.0f);
    copy_shards(fs, ts);
    Arena arena_f, arena_t;
    const std::vector<float> yf = copy_of(ef.forward(arena_f, tokens.data(), batch, types.data()));
    const Tensor yt = et.forward(arena_t, tokens.data(), batch, types.data());
    ASSERT_EQ(yt.numel(), local_rows(*tp, N) * cfg.hidden_size);
    EXPECT_LT(world_max(rows_error(*tp, yt.data<float>(), yf, N)), 1e-5);
    std::vector<float> dy = random_vector(N * cfg.hidden_size, 41);
    ef.backward(Tensor::borrow(dy.data(), {N, cfg.hidden_size}, DType::F32));
    std::vector<float> dyl = local_rows_of(*tp, dy, N);
    et.backward(Tensor::borrow(dyl.data(), {local_rows(*tp, N), cfg.hidden_size}, DType::F32));
    std::string worst;
    EXPECT_LT(world_max(grad_error(fs, ts, &worst)), 1e-5) << worst;
  }
}

}  // namespace
