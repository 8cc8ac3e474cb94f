// Mixture-of-Experts: router, dispatcher, experts and the MoE layer.
//  - finite-difference gradients of the whole layer (router, aux and z losses included) for every
//    router kind and score function;
//  - one expert with top-1 is the dense MLP with the same weights;
//  - grouped and looped expert GEMMs agree;
//  - capacity dropping follows each policy (checked against a naive reimplementation), padding;
//  - the aux / seq-aux / z losses and their gradients match a PyTorch fixture
//    (tools/reference/moe_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "models/config_json.h"
#include "models/language_model.h"
#include "nn/mlp.h"
#include "nn/moe/moe_counts.h"
#include "nn/moe/moe_layer.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

const ParallelContext kSingle = ParallelContext::single();

TransformerConfig base_config(int64_t C, int64_t F, int64_t E, int64_t k) {
  TransformerConfig cfg;
  cfg.hidden_size = C;
  cfg.ffn_hidden_size = F;
  cfg.num_layers = 2;
  cfg.add_bias_linear = true;
  cfg.moe.num_experts = E;
  cfg.moe.topk = k;
  cfg.moe.ffn_hidden_size = F;
  return cfg;
}

// Every parameter ~ U(-a, a) keyed by name (router weights larger so the routing is decisive).
void randomize(ParamStore& store, uint64_t seed) {
  for (const ParamInfo& p : store.infos()) {
    const std::vector<float> r = random_vector(p.shape.numel(), seed ^ fnv1a64(p.name));
    const bool router = p.name.find("router") != std::string::npos;
    const float a = router ? 1.0f : p.init == Init::Zeros ? 0.2f : 0.4f;
    float* w = store.values() + p.offset;
    for (size_t i = 0; i < r.size(); ++i) w[i] = a * r[i];
  }
}

struct Harness {
  TransformerConfig cfg;
  ParamStore store;
  Arena arena;
  std::unique_ptr<MoELayer> layer;
  int64_t B = 0, T = 0;
  Harness(const TransformerConfig& c, int64_t b, int64_t t, uint64_t seed = 7) : cfg(c), B(b), T(t) {
    layer = std::make_unique<MoELayer>(store, kSingle, "mlp", cfg, cfg.activation, 0.02f);
    store.finalize();
    randomize(store, seed);
  }
  // loss = <y, R> + aux + z; with dx also the backward (dx written, parameter gradients accumulated).
  double run(const std::vector<float>& x, const std::vector<float>& R, std::vector<float>* dx) {
    const int64_t N = B * T, C = cfg.hidden_size;
    Tensor xt = Tensor::borrow(const_cast<float*>(x.data()), {N, C}, DType::F32);
    const BatchInfo info{B, T, nullptr, nullptr};
    Tensor y = layer->forward(arena, xt, info);
    double loss = layer->last_routing().aux_loss + layer->last_routing().z_loss;
    for (int64_t i = 0; i < N * C; ++i) loss += static_cast<double>(y.data<float>()[i]) * R[i];
    if (dx) {
      Tensor dy = Tensor::borrow(const_cast<float*>(R.data()), {N, C}, DType::F32);
      Tensor d = Tensor::borrow(dx->data(), {N, C}, DType::F32);
      d.fill_(NAN);  // poisoned: the backward must write every element
      layer->backward(arena, dy, d);
    }
    arena.reset();
    return loss;
  }
};

constexpr double kStep = 3e-3;
constexpr double kTol = 3e-2;

// max |analytic - numeric| relative to the largest gradient, over up to `samples` probes.
double fd_error(float* v, const float* analytic, int64_t n, const std::function<double()>& loss, int samples) {
  double scale = 1e-4, err = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::fmax(scale, std::fabs(analytic[i]));
  const int64_t stride = std::max<int64_t>(1, n / samples);
  for (int64_t i = 0; i < n; i += stride) {
    const float saved = v[i];
    v[i] = static_cast<float>(saved + kStep);
    const double up = loss();
    v[i] = static_cast<float>(saved - kStep);
    const double down = loss();
    v[i] = saved;
    const double step = static_cast<double>(static_cast<float>(saved + kStep)) - static_cast<float>(saved - kStep);
    const double e = std::fabs((up - down) / step - analytic[i]);
    if (!(e <= err)) err = e;
  }
  return err / scale;
}

void check_layer_gradients(const std::string& what, TransformerConfig cfg, int64_t B, int64_t T) {
  SCOPED_TRACE(what);
  Harness h(cfg, B, T);
  const int64_t N = B * T, C = cfg.hidden_size;
  std::vector<float> x = random_vector(N * C, 11, -1.5f, 1.5f);
  const std::vector<float> R = random_vector(N * C, 12);
  std::vector<float> dx(N * C);
  h.store.zero_grads();
  h.run(x, R, &dx);
  for (float v : dx) ASSERT_TRUE(std::isfinite(v)) << "dx not fully written";
  const std::vector<float> grads(h.store.grads(), h.store.grads() + h.store.numel());
  auto loss = [&] { return h.run(x, R, nullptr); };
  EXPECT_LT(fd_error(x.data(), dx.data(), N * C, loss, 48), kTol) << "dx";
  int checked = 0;
  for (const ParamInfo& p : h.store.infos()) {
    // the router, expert 0 and 1, the shared expert
    if (p.name.find("experts.2") != std::string::npos || p.name.find("experts.3") != std::string::npos) continue;
    const double e = fd_error(h.store.values() + p.offset, grads.data() + p.offset, p.shape.numel(), loss, 16);
    EXPECT_LT(e, kTol) << p.name;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace

TEST(MoE, GradientsTopKSoftmax) {
  TransformerConfig cfg = base_config(8, 12, 4, 2);
  cfg.moe.aux_loss_coeff = 0.3f;
  cfg.moe.z_loss_coeff = 0.1f;
  check_layer_gradients("topk softmax aux", cfg, 2, 5);
  cfg.moe.pre_softmax = true;
  check_layer_gradients("topk pre-softmax aux", cfg, 2, 5);
  cfg.moe.pre_softmax = false;
  cfg.moe.load_balancing = MoELoadBalancing::SeqAuxLoss;
  cfg.moe.shared_expert_size = 6;
  cfg.activation = Activation::SwiGLU;
  check_layer_gradients("topk softmax seq-aux swiglu shared", cfg, 2, 5);
}

TEST(MoE, GradientsTopKSigmoid) {
  TransformerConfig cfg = base_config(8, 12, 4, 2);
  cfg.moe.score_function = MoEScoreFunction::Sigmoid;
  cfg.moe.aux_loss_coeff = 0.3f;
  cfg.moe.z_loss_coeff = 0.1f;
  check_layer_gradients("topk sigmoid k=2", cfg, 2, 5);
  cfg.moe.topk = 1;
  cfg.moe.grouped_gemm = true;
  check_layer_gradients("topk sigmoid k=1 grouped", cfg, 2, 5);
}

TEST(MoE, GradientsExpertChoice) {
  TransformerConfig cfg = base_config(8, 12, 4, 2);
  cfg.moe.router_type = MoERouterType::ExpertChoice;
  cfg.moe.load_balancing = MoELoadBalancing::None;
  cfg.moe.z_loss_coeff = 0.1f;
  check_layer_gradients("expert choice softmax", cfg, 2, 5);
  cfg.moe.score_function = MoEScoreFunction::Sigmoid;
  cfg.moe.grouped_gemm = true;
  check_layer_gradients("expert choice sigmoid grouped", cfg, 2, 5);
}

TEST(MoE, GradientsWithCapacityDropping) {
  // Dropped assignments get no gradient; kept ones keep theirs (probs policy, padded).
  TransformerConfig cfg = base_config(8, 12, 4, 2);
  cfg.moe.capacity_factor = 0.75f;
  cfg.moe.pad_to_capacity = true;
  cfg.moe.aux_loss_coeff = 0.3f;
  cfg.moe.grouped_gemm = true;
  check_layer_gradients("capacity 0.75 padded", cfg, 2, 5);
}

TEST(MoE, OneExpertTop1EqualsDenseMLP) {
  for (Activation act : {Activation::Gelu, Activation::SwiGLU}) {
    for (bool grouped : {false, true}) {
      TransformerConfig cfg = base_config(16, 24, 1, 1);
      cfg.activation = act;
      cfg.moe.grouped_gemm = grouped;
      const int64_t N = 13, C = 16;
      Harness h(cfg, 1, N);
      ParamStore ds;
      MLP mlp(ds, kSingle, "mlp", cfg, cfg.activation, 24, 0.02f);
      ds.finalize();
      for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        Tensor src = h.store.value(h.store.find(std::string("mlp.experts.0.") + p));
        ds.value(ds.find(std::string("mlp.") + p)).copy_from(src);
      }
      const std::vector<float> x = random_vector(N * C, 3), R = random_vector(N * C, 4);
      std::vector<float> dx(N * C);
      h.store.zero_grads();
      h.run(x, R, &dx);
      // dense
      Arena arena;
      Tensor xt = Tensor::borrow(const_cast<float*>(x.data()), {N, C}, DType::F32);
      Tensor y = mlp.forward(arena, xt);
      Tensor y_moe = h.layer->forward(h.arena, xt, BatchInfo{1, N, nullptr, nullptr});
      for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(y.data<float>()[i], y_moe.data<float>()[i], 1e-6) << i;
      h.arena.reset();
      Tensor dy = Tensor::borrow(const_cast<float*>(R.data()), {N, C}, DType::F32);
      Tensor ddx = arena.tensor({N, C});
      mlp.backward(arena, dy, ddx);
      for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(dx[i], ddx.data<float>()[i], 1e-5) << "dx " << i;
      for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        Tensor a = h.store.grad(h.store.find(std::string("mlp.experts.0.") + p));
        Tensor b = ds.grad(ds.find(std::string("mlp.") + p));
        for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-5) << p << " " << i;
      }
      // the router's only probability is 1 whatever its logit: no gradient reaches it
      Tensor gr = h.store.grad(h.store.find("mlp.router.weight"));
      for (int64_t i = 0; i < gr.numel(); ++i) EXPECT_NEAR(gr.data<float>()[i], 0.0f, 1e-6);
    }
  }
}

TEST(MoE, GroupedAndLoopedAgree) {
  struct Case { MoERouterType rt; float cap; bool pad; };
  for (const Case c : {Case{MoERouterType::TopK, 0.0f, false}, Case{MoERouterType::TopK, 1.0f, true},
                       Case{MoERouterType::ExpertChoice, 1.0f, false}}) {
    TransformerConfig cfg = base_config(24, 40, 8, 2);
    cfg.activation = Activation::SwiGLU;
    cfg.moe.router_type = c.rt;
    cfg.moe.capacity_factor = c.cap;
    cfg.moe.pad_to_capacity = c.pad;
    cfg.moe.aux_loss_coeff = c.rt == MoERouterType::TopK ? 0.01f : 0.0f;
    cfg.moe.shared_expert_size = 16;
    const int64_t B = 3, T = 17, N = B * T, C = 24;
    Harness looped(cfg, B, T), grouped(cfg, B, T);
    grouped.layer->set_grouped_gemm(true);
    const std::vector<float> x = random_vector(N * C, 21), R = random_vector(N * C, 22);
    std::vector<float> dx1(N * C), dx2(N * C);
    looped.store.zero_grads();
    grouped.store.zero_grads();
    const double l1 = looped.run(x, R, &dx1), l2 = grouped.run(x, R, &dx2);
    EXPECT_NEAR(l1, l2, 1e-5 * std::fabs(l1) + 1e-6);
    for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(dx1[i], dx2[i], 1e-5) << i;
    for (int64_t i = 0; i < looped.store.numel(); ++i)
      ASSERT_NEAR(looped.store.grads()[i], grouped.store.grads()[i], 1e-5) << i;
  }
}

// Naive reference of token-choice routing with capacity: which (token, expert) pairs are kept.
std::set<std::pair<int, int>> naive_kept(const std::vector<float>& logits, int64_t N, int64_t E, int64_t k,
                                         int64_t cap, MoEDropPolicy policy) {
  std::map<int, std::vector<std::pair<double, int>>> per_expert;  // expert -> (prob, token)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[n * E + a] > logits[n * E + b]; });
    double s = 0;
    for (int i = 0; i < k; ++i) s += std::exp(static_cast<double>(logits[n * E + order[i]]));
    for (int i = 0; i < k; ++i)
      per_expert[order[i]].push_back({std::exp(static_cast<double>(logits[n * E + order[i]])) / s, static_cast<int>(n)});
  }
  std::set<std::pair<int, int>> kept;
  for (auto& [e, v] : per_expert) {
    if (policy == MoEDropPolicy::Probs)
      std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (int64_t i = 0; i < std::min<int64_t>(cap, static_cast<int64_t>(v.size())); ++i) kept.insert({v[i].second, e});
  }
  return kept;
}

TEST(MoE, CapacityDroppingFollowsPolicy) {
  for (MoEDropPolicy policy : {MoEDropPolicy::Probs, MoEDropPolicy::Position}) {
    for (bool pad : {false, true}) {
      TransformerConfig cfg = base_config(8, 8, 4, 2);
      cfg.moe.capacity_factor = 0.6;
      cfg.moe.drop_policy = policy;
      cfg.moe.pad_to_capacity = pad;
      const int64_t N = 20, C = 8, E = 4, k = 2;
      Harness h(cfg, 1, N, 99);
      const std::vector<float> x = random_vector(N * C, 5, -2.0f, 2.0f), R = random_vector(N * C, 6);
      h.run(x, R, nullptr);
      const MoERouting& r = h.layer->last_routing();
      const int64_t cap = static_cast<int64_t>(std::ceil(N * k / static_cast<double>(E) * 0.6));  // 6
      EXPECT_EQ(r.capacity, cap);
      // logits in double from the router weight
      const float* W = h.store.value(h.store.find("mlp.router.weight")).data<float>();
      std::vector<float> logits(N * E);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t e = 0; e < E; ++e) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x[n * C + c]) * W[e * C + c];
          logits[n * E + e] = static_cast<float>(s);
        }
      const auto want = naive_kept(logits, N, E, k, cap, policy);
      std::set<std::pair<int, int>> got;
      int64_t pads = 0;
      for (int64_t e = 0; e < E; ++e) {
        int last = -1;
        for (int64_t row = r.offsets[e]; row < r.offsets[e + 1]; ++row) {
          if (r.token[row] < 0) {
            ++pads;
            EXPECT_EQ(r.weight[row], 0.0f);
            continue;
          }
          EXPECT_GT(r.token[row], last) << "rows of an expert are in token order";
          last = r.token[row];
          got.insert({r.token[row], static_cast<int>(e)});
        }
        EXPECT_LE(r.tokens_per_expert[e], cap);
        if (pad) {
          EXPECT_EQ(r.offsets[e + 1] - r.offsets[e], cap);
        }
      }
      EXPECT_EQ(got, want);
      EXPECT_EQ(r.dropped, N * k - static_cast<int64_t>(want.size()));
      EXPECT_GT(r.dropped, 0) << "the test should exercise dropping";
      if (!pad) {
        EXPECT_EQ(pads, 0);
      }
    }
  }
}

TEST(MoE, ExpertChoiceTakesTopTokensPerExpert) {
  TransformerConfig cfg = base_config(8, 8, 4, 2);
  cfg.moe.router_type = MoERouterType::ExpertChoice;
  cfg.moe.load_balancing = MoELoadBalancing::None;
  const int64_t N = 15, C = 8, E = 4;
  Harness h(cfg, 1, N, 3);
  const std::vector<float> x = random_vector(N * C, 8, -2.0f, 2.0f), R = random_vector(N * C, 9);
  h.run(x, R, nullptr);
  const MoERouting& r = h.layer->last_routing();
  const int64_t cap = (N * 2 + E - 1) / E;  // ceil(15 * 2 / 4) = 8
  ASSERT_EQ(r.capacity, cap);
  const float* W = h.store.value(h.store.find("mlp.router.weight")).data<float>();
  int64_t untouched = 0;
  std::vector<int> taken(N, 0);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<std::pair<double, int>> s;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> l(E);
      double m = -1e300, z = 0;
      for (int64_t f = 0; f < E; ++f) {
        l[f] = 0;
        for (int64_t c = 0; c < C; ++c) l[f] += static_cast<double>(x[n * C + c]) * W[f * C + c];
        m = std::max(m, l[f]);
      }
      for (int64_t f = 0; f < E; ++f) z += std::exp(l[f] - m);
      s.push_back({std::exp(l[e] - m) / z, static_cast<int>(n)});
    }
    std::stable_sort(s.begin(), s.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::set<int> want, got;
    for (int64_t i = 0; i < cap; ++i) want.insert(s[i].second);
    for (int64_t row = r.offsets[e]; row < r.offsets[e + 1]; ++row) {
      got.insert(r.token[row]);
      ++taken[r.token[row]];
      const auto it = std::find_if(s.begin(), s.end(), [&](auto& p) { return p.second == r.token[row]; });
      EXPECT_NEAR(r.weight[row], it->first, 1e-5);
    }
    EXPECT_EQ(got, want) << "expert " << e;
  }
  for (int64_t n = 0; n < N; ++n) untouched += taken[n] == 0;
  EXPECT_EQ(r.dropped, untouched);
}

TEST(MoE, RouterLossesMatchPyTorchReference) {
  std::ifstream in(std::string(MEGADLM_SOURCE_DIR) + "/tests/moe/fixtures/moe_reference.json");
  ASSERT_TRUE(in) << "fixture missing: run tools/reference/moe_reference.py";
  const nlohmann::json j = nlohmann::json::parse(in);
  const int64_t B = j["B"], T = j["T"], C = j["C"], E = j["E"], k = j["topk"], N = B * T;
  const std::vector<float> x = j["x"].get<std::vector<float>>();
  const std::vector<float> w = j["router_weight"].get<std::vector<float>>();
  for (const auto& c : j["cases"]) {
    SCOPED_TRACE(c["score_function"].get<std::string>() + (c["pre_softmax"].get<bool>() ? " pre" : "") + " " +
                 c["load_balancing"].get<std::string>());
    TransformerConfig cfg = base_config(C, 8, E, k);
    cfg.moe.score_function = c["score_function"] == "softmax" ? MoEScoreFunction::Softmax : MoEScoreFunction::Sigmoid;
    cfg.moe.pre_softmax = c["pre_softmax"];
    cfg.moe.load_balancing = c["load_balancing"] == "aux_loss" ? MoELoadBalancing::AuxLoss : MoELoadBalancing::SeqAuxLoss;
    cfg.moe.aux_loss_coeff = j["aux_loss_coeff"];
    cfg.moe.z_loss_coeff = j["z_loss_coeff"];
    Harness h(cfg, B, T);
    std::copy(w.begin(), w.end(), h.store.value(h.store.find("mlp.router.weight")).data<float>());
    const std::vector<float> zero(N * C, 0.0f);
    std::vector<float> dx(N * C);
    h.store.zero_grads();
    h.run(x, zero, &dx);  // dy = 0: only the aux and z losses send gradients
    const MoERouting& r = h.layer->last_routing();
    EXPECT_NEAR(r.aux_loss, c["aux_loss"].get<double>(), 1e-5 * std::fabs(c["aux_loss"].get<double>()));
    EXPECT_NEAR(r.z_loss, c["z_loss"].get<double>(), 1e-5 * std::fabs(c["z_loss"].get<double>()));
    // routing: rows of expert e carry the tokens whose top-k contains e, with the reference prob
    const std::vector<int> top = c["top"].get<std::vector<int>>();
    const std::vector<double> probs = c["probs"].get<std::vector<double>>();
    int64_t rows = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < k; ++i) {
        const int e = top[n * k + i];
        bool found = false;
        for (int64_t row = r.offsets[e]; row < r.offsets[e + 1]; ++row)
          if (r.token[row] == n) {
            found = true;
            EXPECT_NEAR(r.weight[row], probs[n * k + i], 1e-5);
          }
        EXPECT_TRUE(found) << "token " << n << " expert " << e;
        ++rows;
      }
    EXPECT_EQ(r.rows(), rows);
    const std::vector<double> gx = c["grad_x"].get<std::vector<double>>();
    const std::vector<double> gw = c["grad_w"].get<std::vector<double>>();
    EXPECT_LT(megadlm::test::max_rel_error(dx, gx), 1e-4);
    const Tensor g = h.store.grad(h.store.find("mlp.router.weight"));
    EXPECT_LT(megadlm::test::max_rel_error(g.data<float>(), gw.data(), E * C), 1e-4);
  }
}

TEST(MoE, StatsAccumulateOnBackwardOnly) {
  TransformerConfig cfg = base_config(8, 8, 4, 2);
  cfg.moe.aux_loss_coeff = 0.01f;
  Harness h(cfg, 2, 5);
  const std::vector<float> x = random_vector(80, 1), R = random_vector(80, 2);
  std::vector<float> dx(80);
  h.run(x, R, nullptr);  // forward only (evaluation): not counted
  EXPECT_EQ(h.layer->stats().micro_batches, 0);
  h.run(x, R, &dx);
  h.run(x, R, &dx);
  const MoEStats s = h.layer->take_stats();
  EXPECT_EQ(s.micro_batches, 2);
  double total = 0;
  for (double t : s.tokens_per_expert) total += t;
  EXPECT_EQ(total, 2.0 * 10 * 2);
  EXPECT_NEAR(s.aux_loss, 2 * h.layer->last_routing().aux_loss, 1e-12);
  EXPECT_EQ(h.layer->stats().micro_batches, 0);
}

TEST(MoE, ModelParameterNamesAndCounts) {
  TransformerConfig cfg;
  cfg.num_layers = 4;
  cfg.hidden_size = 16;
  cfg.num_attention_heads = 2;
  cfg.num_query_groups = 2;
  cfg.kv_channels = 8;
  cfg.ffn_hidden_size = 32;
  cfg.vocab_size = 50;
  cfg.max_position_embeddings = 16;
  cfg.moe.num_experts = 4;
  cfg.moe.topk = 2;
  cfg.moe.layer_freq = 2;
  cfg.moe.ffn_hidden_size = 8;
  cfg.moe.shared_expert_size = 12;
  LanguageModel model(cfg, decoder_model_spec(cfg, LayerSpec{}), kSingle);
  const ParamStore& p = model.params();
  EXPECT_GE(p.find("layers.0.mlp.router.weight"), 0);
  EXPECT_GE(p.find("layers.0.mlp.experts.3.fc2.weight"), 0);
  EXPECT_GE(p.find("layers.0.mlp.experts.3.fc1.bias"), 0);
  EXPECT_GE(p.find("layers.2.mlp.shared_experts.fc1.weight"), 0);
  EXPECT_EQ(p.find("layers.1.mlp.router.weight"), -1);  // layer 1 is dense
  EXPECT_GE(p.find("layers.1.mlp.fc1.weight"), 0);
  EXPECT_EQ(model.moe_layers().size(), 2u);
  int64_t total = 0;
  for (const ParamInfo& i : p.infos()) total += i.shape.numel();
  EXPECT_EQ(parameter_count(cfg), total);
  // active matrix parameters: router + 2 of 4 experts + shared
  const FfnCounts f = ffn_counts(cfg, 0);
  EXPECT_EQ(f.active_matrix, 4 * 16 + 2 * (16 * 8 * 2) + 2 * 16 * 12);
}

TEST(MoE, ConfigJsonRoundTrip) {
  TransformerConfig cfg = base_config(16, 32, 8, 2);
  MoEConfig& m = cfg.moe;
  m.layer_pattern = {1, 0};
  m.router_type = MoERouterType::ExpertChoice;
  m.score_function = MoEScoreFunction::Sigmoid;
  m.load_balancing = MoELoadBalancing::SeqAuxLoss;
  m.aux_loss_coeff = 0.25f;
  m.z_loss_coeff = 0.125f;
  m.capacity_factor = 1.5;
  m.drop_policy = MoEDropPolicy::Position;
  m.pad_to_capacity = true;
  m.ffn_hidden_size = 24;
  m.shared_expert_size = 12;
  m.grouped_gemm = true;
  const MoEConfig r = config_from_json(config_to_json(cfg), "test").moe;
  EXPECT_EQ(r.num_experts, 8);
  EXPECT_EQ(r.layer_pattern, m.layer_pattern);
  EXPECT_EQ(r.topk, 2);
  EXPECT_EQ(r.router_type, m.router_type);
  EXPECT_EQ(r.score_function, m.score_function);
  EXPECT_EQ(r.load_balancing, m.load_balancing);
  EXPECT_EQ(r.aux_loss_coeff, m.aux_loss_coeff);
  EXPECT_EQ(r.z_loss_coeff, m.z_loss_coeff);
  EXPECT_EQ(r.capacity_factor, m.capacity_factor);
  EXPECT_EQ(r.drop_policy, m.drop_policy);
  EXPECT_TRUE(r.pad_to_capacity);
  EXPECT_EQ(r.ffn_hidden_size, 24);
  EXPECT_EQ(r.shared_expert_size, 12);
  EXPECT_TRUE(r.grouped_gemm);
  TransformerConfig dense = base_config(16, 32, 0, 1);
  EXPECT_FALSE(config_to_json(dense).contains("moe"));
  EXPECT_FALSE(config_from_json(config_to_json(dense), "test").moe.enabled());
}
