// Cross-attention (nn/cross_attention.h): the forward against a double-precision reference written
// from the definition, and every gradient (parameters, the queries' input, the memory) against finite
// differences, for multi-head and grouped-query attention.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "grad_check.h"
#include "nn/cross_attention.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;
using test::random_vector;

constexpr int64_t kB = 2, kT = 3, kS = 5;  // 2 sequences of 3 query rows and 5 memory rows
// The modules keep a pointer to their context: it outlives them.
const ParallelContext kSingle = ParallelContext::single();

TransformerConfig config(int64_t kv_groups) {
  TransformerConfig c;
  c.hidden_size = 12;
  c.num_attention_heads = 4;
  c.num_query_groups = kv_groups;
  c.kv_channels = 3;
  c.add_bias_linear = true;
  return c;
}

// y [N, C] in double from the definition: per sequence b and head h, softmax(q k^T / sqrt(D)) v over the
// memory rows of b, then the output projection.
std::vector<double> reference(const ParamStore& s, const TransformerConfig& c, const std::vector<float>& x,
                              const std::vector<float>& mem) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, K = c.num_query_groups, D = c.kv_channels;
  auto linear = [&](const std::string& name, const std::vector<float>& in, int64_t rows, int64_t out_f, int64_t in_f) {
    const float* w = s.value(s.find(name + ".weight")).data<float>();
    const float* b = s.value(s.find(name + ".bias")).data<float>();
    std::vector<double> y(static_cast<size_t>(rows * out_f));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out_f; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in_f; ++i) acc += static_cast<double>(w[o * in_f + i]) * in[r * in_f + i];
        y[r * out_f + o] = acc;
      }
    return y;
  };
  const std::vector<double> q = linear("attn.q_proj", x, kB * kT, H * D, C);
  const std::vector<double> k = linear("attn.k_proj", mem, kB * kS, K * D, C);
  const std::vector<double> v = linear("attn.v_proj", mem, kB * kS, K * D, C);
  std::vector<float> o(static_cast<size_t>(kB * kT * H * D));
  std::vector<double> od(o.size());
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / K);
      for (int64_t t = 0; t < kT; ++t) {
        std::vector<double> p(kS);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < kS; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += q[(b * kT + t) * H * D + h * D + d] * k[(b * kS + j) * K * D + g * D + d];
          p[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::fmax(mx, p[j]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < kS; ++j) acc += p[j] / sum * v[(b * kS + j) * K * D + g * D + d];
          od[(b * kT + t) * H * D + h * D + d] = acc;
        }
      }
    }
  // The output projection in double on the double attention output.
  const float* wo = s.value(s.find("attn.o_proj.weight")).data<float>();
  const float* bo = s.value(s.find("attn.o_proj.bias")).data<float>();
  std::vector<double> y(static_cast<size_t>(kB * kT * C));
  for (int64_t r = 0; r < kB * kT; ++r)
    for (int64_t oc = 0; oc < C; ++oc) {
      double acc = bo[oc];
      for (int64_t i = 0; i < H * D; ++i) acc += static_cast<double>(wo[oc * H * D + i]) * od[r * H * D + i];
      y[r * C + oc] = acc;
    }
  return y;
}

BatchInfo batch_with(const float* memory, float* memory_grad) {
  BatchInfo b{kB, kT, nullptr, nullptr};
  b.memory = memory;
  b.memory_grad = memory_grad;
  b.memory_T = kS;
  return b;
}

// The module of GetParam() KV groups, its parameters drawn from `seed`.
class CrossAttentionTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void build(uint64_t seed) {
    cfg = config(GetParam());
    attn = std::make_unique<CrossAttention>(store, kSingle, "attn", cfg, 0.02f);
    store.finalize();
    randomize(store, seed);
  }
  TransformerConfig cfg;
  ParamStore store;
  std::unique_ptr<CrossAttention> attn;
  Arena arena;
};

TEST_P(CrossAttentionTest, ForwardMatchesDoubleReference) {
  build(61);
  const int64_t C = cfg.hidden_size;
  const std::vector<float> x = random_vector(kB * kT * C, 62), mem = random_vector(kB * kS * C, 63);
  Tensor xt = Tensor::empty({kB * kT, C}, DType::F32);
  std::copy(x.begin(), x.end(), xt.data<float>());
  const Tensor y = attn->forward(arena, xt, batch_with(mem.data(), nullptr));
  const std::vector<float> got(y.data<float>(), y.data<float>() + y.numel());
  EXPECT_LT(test::max_rel_error(got, reference(store, cfg, x, mem)), 1e-5);
}

TEST_P(CrossAttentionTest, GradientsOfParametersAndQueries) {
  build(64);
  const int64_t C = cfg.hidden_size, N = kB * kT;
  const std::vector<float> mem = random_vector(kB * kS * C, 65);
  std::vector<float> dmem(mem.size());
  check_gradients("CrossAttention (queries)", store, arena, random_vector(N * C, 66), {N, C},
                  sum_times_random(N * C, 67,
                                   [&](Arena& a, const Tensor& x) {
                                     return attn->forward(a, x, batch_with(mem.data(), dmem.data()));
                                   },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { attn->backward(a, dy, dx); }));
}

// The memory as the input: its gradient is what backward adds to BatchInfo::memory_grad.
TEST_P(CrossAttentionTest, GradientOfTheMemory) {
  build(68);
  const int64_t C = cfg.hidden_size, N = kB * kT, M = kB * kS;
  const std::vector<float> x = random_vector(N * C, 69);
  check_gradients("CrossAttention (memory)", store, arena, random_vector(M * C, 70), {M, C},
                  [&](Arena& a, const Tensor& mem, Tensor* dmem) {
                    Tensor xt = a.tensor({N, C});
                    std::copy(x.begin(), x.end(), xt.data<float>());
                    if (dmem) dmem->fill_(0.0f);  // backward adds to it
                    Tensor y = attn->forward(a, xt, batch_with(mem.data<float>(), dmem ? dmem->data<float>() : nullptr));
                    const std::vector<float> R = random_vector(N * C, 71);
                    double l = 0.0;
                    for (int64_t i = 0; i < N * C; ++i) l += static_cast<double>(y.data<float>()[i]) * R[i];
                    if (dmem) {
                      Tensor dy = a.tensor({N, C}), dx = a.tensor({N, C});
                      std::copy(R.begin(), R.end(), dy.data<float>());
                      attn->backward(a, dy, dx);
                    }
                    return l;
                  });
}

TEST(CrossAttention, RefusesAMissingMemory) {
  ParamStore store;
  CrossAttention attn(store, kSingle, "layers.0.cross_attn", config(4), 0.02f);
  store.finalize();
  Arena arena;
  Tensor x = Tensor::zeros({kB * kT, 12}, DType::F32);
  try {
    attn.forward(arena, x, BatchInfo{kB, kT, nullptr, nullptr});
    FAIL() << "a forward without memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.cross_attn"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, CrossAttentionTest, ::testing::Values(4, 2),  // multi-head, grouped-query
                         [](const auto& info) { return info.param == 4 ? std::string("MultiHead") : std::string("GroupedQuery"); });

}  // namespace
}  // namespace megadlm
