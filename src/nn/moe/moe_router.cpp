#include "nn/moe/moe_router.h"

#include <algorithm>
#include <cmath>

#include "kernels/backend.h"

namespace megadlm {

// Below this many elements a loop runs on one thread: an OpenMP fork/join costs more than the work.
static constexpr int64_t kMinParallelWork = 1 << 14;

const char* moe_router_type_name(MoERouterType t) { return t == MoERouterType::TopK ? "topk" : "expert_choice"; }
const char* moe_score_function_name(MoEScoreFunction s) { return s == MoEScoreFunction::Softmax ? "softmax" : "sigmoid"; }
const char* moe_load_balancing_name(MoELoadBalancing l) {
  return l == MoELoadBalancing::AuxLoss ? "aux_loss" : l == MoELoadBalancing::SeqAuxLoss ? "seq_aux_loss" : "none";
}
const char* moe_drop_policy_name(MoEDropPolicy p) { return p == MoEDropPolicy::Probs ? "probs" : "position"; }

MoERouter::MoERouter(ParamStore& store, const std::string& name, const MoEConfig& cfg, int64_t hidden, float init_std)
    : store_(&store), cfg_(cfg), C_(hidden), E_(cfg.num_experts), k_(cfg.topk) {
  MEGADLM_CHECK(E_ >= 1, name, ": --num-experts must be positive, got ", E_);
  MEGADLM_CHECK(k_ >= 1 && k_ <= E_, name, ": --moe-router-topk ", k_, " must be in [1, --num-experts ", E_, "]");
  w_ = store.add(name + ".weight", {E_, C_}, Init::Normal, init_std, /*weight_decay=*/true);
}

// Expert capacity as Megatron's get_capacity: ceil(tokens / E * capacity_factor).
static int64_t expert_capacity(int64_t tokens, int64_t E, double factor) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(tokens) / static_cast<double>(E) * factor));
}

void MoERouter::set_context_parallel(const ParallelGroup& cp) {
  MEGADLM_CHECK(cp.size == 1 || (cfg_.router_type == MoERouterType::TopK && cfg_.capacity_factor <= 0),
                "MoERouter: context parallelism needs token choice without a capacity");
  cp_ = cp;
}

void MoERouter::sum_over_cp(double* v, int64_t n) const {
  if (cp_.size > 1) cp_.communicator().all_reduce_sum(v, n);
}

void MoERouter::forward(Arena& arena, const Tensor& x, int64_t B, int64_t T, MoERouting& r) {
  const int64_t N = x.numel() / C_;
  MEGADLM_CHECK(x.numel() == N * C_ && N == B * T, "MoERouter: input ", x.shape().str(), " is not [B*T=", B * T,
                ", ", C_, "]");
  N_ = N, B_ = B, T_ = T;
  Ng_ = N * cp_.size, Tg_ = T * cp_.size;
  x_ = x;
  const int64_t E = E_;
  logits_.resize(static_cast<size_t>(N * E));
  scores_.resize(static_cast<size_t>(N * E));
  lse_.resize(static_cast<size_t>(N));
  // The logits are made where x is; the routing is made from them on the host (on a device: one
  // download of [N, E]).
  const Backend& be = backend_of(x);
  const float* W = store_->value(w_).data<float>();
  if (be.device() == Device::CPU) {
    be.gemm(false, true, N, E, C_, 1.0f, x.data<float>(), C_, W, C_, 0.0f, logits_.data(), E);
  } else {
    const size_t mark = arena.mark();
    Tensor lg = arena.tensor({N, E});
    be.gemm(false, true, N, E, C_, 1.0f, x.data<float>(), C_, W, C_, 0.0f, lg.data<float>(), E);
    be.copy_to_host(logits_.data(), lg.data<float>(), sizeof(float) * logits_.size());
    arena.release(mark);
  }
  const float* lg = logits_.data();
  float* sc = scores_.data();
  float* lse = lse_.data();
  const bool sigmoid = cfg_.score_function == MoEScoreFunction::Sigmoid;
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = lg + n * E;
    float* s = sc + n * E;
    float m = l[0];
    for (int64_t e = 1; e < E; ++e) m = std::max(m, l[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(l[e] - m));
    lse[n] = m + static_cast<float>(std::log(sum));
    for (int64_t e = 0; e < E; ++e)
      s[e] = sigmoid ? static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(l[e]))))
                     : static_cast<float>(std::exp(static_cast<double>(l[e] - m)) / sum);
  }
  // z loss (ST-MoE): coeff * mean_n lse_n^2, the mean over the whole sequences' tokens.
  double z = 0;
  for (int64_t n = 0; n < N; ++n) z += static_cast<double>(lse[n]) * lse[n];
  r.z_loss = cfg_.z_loss_coeff > 0 ? cfg_.z_loss_coeff * z / static_cast<double>(Ng_) : 0.0;
  r.N = N, r.E = E;
  r.aux_loss = 0;
  if (cfg_.router_type == MoERouterType::TopK) route_token_choice(r);
  else route_expert_choice(r);
  if (cp_.size > 1) {
    // This rank's shares of the losses and of the loads, summed into the whole sequences'.
    reduce_.assign(static_cast<size_t>(E + 2), 0.0);
    for (int64_t e = 0; e < E; ++e) reduce_[e] = static_cast<double>(r.tokens_per_expert[e]);
    reduce_[E] = r.aux_loss;
    reduce_[E + 1] = r.z_loss;
    sum_over_cp(reduce_.data(), E + 2);
    for (int64_t e = 0; e < E; ++e) r.tokens_per_expert[e] = static_cast<int64_t>(reduce_[e]);
    r.aux_loss = reduce_[E];
    r.z_loss = reduce_[E + 1];
    r.assignments *= cp_.size;
  }
}

void MoERouter::route_token_choice(MoERouting& r) {
  const int64_t N = N_, E = E_, k = k_;
  const float* lg = logits_.data();
  const float* sc = scores_.data();
  sel_.resize(static_cast<size_t>(N * k));
  probs_.resize(static_cast<size_t>(N * k));
  const bool sigmoid = cfg_.score_function == MoEScoreFunction::Sigmoid;
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = lg + n * E;
    const float* s = sc + n * E;
    int32_t* sel = sel_.data() + n * k;
    float* p = probs_.data() + n * k;
    // Top-k by logit (every score function is monotone in it); ties go to the lower expert index.
    for (int64_t i = 0; i < k; ++i) {
      int32_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t j = 0; j < i; ++j) taken |= sel[j] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = static_cast<int32_t>(e);
      }
      sel[i] = best;
    }
    if (sigmoid) {
      double S = 0;
      for (int64_t i = 0; i < k; ++i) S += s[sel[i]];
      for (int64_t i = 0; i < k; ++i) p[i] = k > 1 ? static_cast<float>(s[sel[i]] / (S + 1e-20)) : s[sel[i]];
    } else if (cfg_.pre_softmax) {
      for (int64_t i = 0; i < k; ++i) p[i] = s[sel[i]];
    } else {  // softmax over the k selected logits; sel[0] holds the largest
      double S = 0;
      for (int64_t i = 0; i < k; ++i) S += std::exp(static_cast<double>(l[sel[i]] - l[sel[0]]));
      for (int64_t i = 0; i < k; ++i) p[i] = static_cast<float>(std::exp(static_cast<double>(l[sel[i]] - l[sel[0]])) / S);
    }
  }

  // Load-balancing loss on the top-k counts before dropping (Megatron's tokens_per_expert) and the
  // scores over all experts (softmax, or sigmoid normalised per token).
  const bool seq = cfg_.load_balancing == MoELoadBalancing::SeqAuxLoss;
  const int64_t groups = seq ? B_ : 1;
  counts_.assign(static_cast<size_t>(groups * E), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < k; ++i) ++counts_[(seq ? n / T_ : 0) * E + sel_[n * k + i]];
  if (cp_.size > 1) {
    // The counts of the whole sequences: each cp rank holds chunks of every sequence.
    reduce_.assign(counts_.begin(), counts_.end());
    sum_over_cp(reduce_.data(), static_cast<int64_t>(reduce_.size()));
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] = static_cast<int64_t>(reduce_[i]);
  }
  if (cfg_.load_balancing != MoELoadBalancing::None && cfg_.aux_loss_coeff > 0) {
    // aux:  coeff E / (k N^2)   sum_e count_e sum_n score_ne                   (Switch, Megatron)
    // seq:  coeff E / (k T^2 B) sum_b sum_e count_be sum_{t in b} score_bte    (Megatron's seq_aux_loss)
    // N and T count the whole sequences; the sum over n runs over this rank's tokens.
    const double Tg = seq ? static_cast<double>(Tg_) : static_cast<double>(Ng_);
    const double c = cfg_.aux_loss_coeff * static_cast<double>(E) / (static_cast<double>(k) * Tg * Tg * groups);
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* s = sc + n * E;
      double norm = 1.0;
      if (sigmoid) {
        double S = 0;
        for (int64_t e = 0; e < E; ++e) S += s[e];
        norm = 1.0 / (S + 1e-20);
      }
      const int64_t* cnt = counts_.data() + (seq ? n / T_ : 0) * E;
      for (int64_t e = 0; e < E; ++e) acc += static_cast<double>(cnt[e]) * s[e] * norm;
    }
    r.aux_loss = c * acc;
  }

  // Capacity: each expert keeps at most `cap` of its tokens, by probability or by position.
  const bool limited = cfg_.capacity_factor > 0;
  const int64_t cap = limited ? expert_capacity(N * k, E, cfg_.capacity_factor) : 0;
  const bool drop = limited && cap < N;
  const int64_t pad_rows = cfg_.pad_to_capacity ? std::min(cap, N) : 0;
  r.capacity = limited ? cap : 0;
  r.assignments = N * k;
  r.dropped = 0;
  r.offsets.assign(static_cast<size_t>(E + 1), 0);
  r.tokens_per_expert.assign(static_cast<size_t>(E), 0);
  r.token.clear(), r.weight.clear(), r.source.clear();
  for (int64_t e = 0; e < E; ++e) {
    cand_.clear();  // sources j = n k + i routed to e, in token order
    for (int64_t j = 0; j < N * k; ++j)
      if (sel_[j] == e) cand_.push_back(static_cast<int32_t>(j));
    int64_t keep = static_cast<int64_t>(cand_.size());
    if (drop && keep > cap) {
      if (cfg_.drop_policy == MoEDropPolicy::Probs) {
        // The cap most probable tokens (ties: earlier token), then back to token order.
        std::stable_sort(cand_.begin(), cand_.end(), [&](int32_t a, int32_t b) { return probs_[a] > probs_[b]; });
        std::sort(cand_.begin(), cand_.begin() + cap);
      }
      r.dropped += keep - cap;
      keep = cap;
    }
    for (int64_t i = 0; i < keep; ++i) {
      const int32_t j = cand_[i];
      r.token.push_back(static_cast<int32_t>(j / k));
      r.weight.push_back(probs_[j]);
      r.source.push_back(j);
    }
    for (int64_t i = keep; i < pad_rows; ++i) {
      r.token.push_back(-1);
      r.weight.push_back(0.0f);
      r.source.push_back(-1);
    }
    r.tokens_per_expert[e] = keep;
    r.offsets[e + 1] = static_cast<int64_t>(r.token.size());
  }
}

void MoERouter::route_expert_choice(MoERouting& r) {
  // Each expert takes its cap highest-scoring tokens (Zhou et al. 2022), cap = ceil(N k / E * factor);
  // the combine weight is the token's score for that expert. Loads are equal by construction, so no
  // load-balancing loss applies.
  const int64_t N = N_, E = E_;
  const float* sc = scores_.data();
  const double factor = cfg_.capacity_factor > 0 ? cfg_.capacity_factor : 1.0;
  const int64_t cap = std::min(N, std::max<int64_t>(1, expert_capacity(N * k_, E, factor)));
  r.capacity = cap;
  r.assignments = N;
  r.offsets.assign(static_cast<size_t>(E + 1), 0);
  r.tokens_per_expert.assign(static_cast<size_t>(E), cap);
  r.token.resize(static_cast<size_t>(E * cap));
  r.weight.resize(static_cast<size_t>(E * cap));
  r.source.resize(static_cast<size_t>(E * cap));
  counts_.assign(static_cast<size_t>(N), 0);  // experts per token, for the dropped fraction
  for (int64_t e = 0; e < E; ++e) {
    cand_.resize(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) cand_[n] = static_cast<int32_t>(n);
    std::stable_sort(cand_.begin(), cand_.end(), [&](int32_t a, int32_t b) { return sc[a * E + e] > sc[b * E + e]; });
    std::sort(cand_.begin(), cand_.begin() + cap);
    for (int64_t i = 0; i < cap; ++i) {
      const int32_t n = cand_[i];
      const int64_t row = e * cap + i;
      r.token[row] = n;
      r.weight[row] = sc[n * E + e];
      r.source[row] = static_cast<int32_t>(n * E + e);
      ++counts_[n];
    }
    r.offsets[e + 1] = (e + 1) * cap;
  }
  r.dropped = 0;
  for (int64_t n = 0; n < N; ++n) r.dropped += counts_[n] == 0;
}

void MoERouter::backward(Arena& arena, const MoERouting& r, const float* dweight_in, float loss_scale, Tensor& dx) {
  const int64_t N = N_, E = E_, k = k_;
  const Backend& be = backend_of(dx);
  const int64_t P = r.rows();
  const float* dweight = dweight_in;  // where the host reads it
  if (be.device() != Device::CPU) {
    dweight_.resize(static_cast<size_t>(P));
    if (P > 0) be.copy_to_host(dweight_.data(), dweight_in, sizeof(float) * static_cast<size_t>(P));
    dweight = dweight_.data();
  }
  dl_.assign(static_cast<size_t>(N * E), 0.0f);  // d loss / d logits, made on the host
  float* dl = dl_.data();
  const float* lg = logits_.data();
  const float* sc = scores_.data();
  const float* lse = lse_.data();
  const bool sigmoid = cfg_.score_function == MoEScoreFunction::Sigmoid;

  if (cfg_.router_type == MoERouterType::ExpertChoice) {
    // dscore[n, e] = dweight of the row that took (n, e); through the score function.
    for (int64_t row = 0; row < P; ++row)
      if (r.source[row] >= 0) dl[r.source[row]] += dweight[row];
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelWork)
    for (int64_t n = 0; n < N; ++n) {
      float* d = dl + n * E;
      const float* s = sc + n * E;
      if (sigmoid) {
        for (int64_t e = 0; e < E; ++e) d[e] *= s[e] * (1.0f - s[e]);
      } else {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(s[e]) * d[e];
        for (int64_t e = 0; e < E; ++e) d[e] = s[e] * static_cast<float>(d[e] - dot);
      }
    }
  } else {
    dp_.assign(static_cast<size_t>(N * k), 0.0f);  // d loss / d probs_
    float* dp = dp_.data();
    for (int64_t row = 0; row < P; ++row)
      if (r.source[row] >= 0) dp[r.source[row]] += dweight[row];
    const bool seq = cfg_.load_balancing == MoELoadBalancing::SeqAuxLoss;
    const bool aux = cfg_.load_balancing != MoELoadBalancing::None && cfg_.aux_loss_coeff > 0;
    const double Tg = seq ? static_cast<double>(Tg_) : static_cast<double>(Ng_);
    const double groups = seq ? static_cast<double>(B_) : 1.0;
    const double aux_c =
        aux ? loss_scale * cfg_.aux_loss_coeff * static_cast<double>(E) / (static_cast<double>(k) * Tg * Tg * groups) : 0.0;
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelWork)
    for (int64_t n = 0; n < N; ++n) {
      float* d = dl + n * E;  // first d loss / d score, then d loss / d logit
      const float* l = lg + n * E;
      const float* s = sc + n * E;
      const int32_t* sel = sel_.data() + n * k;
      const float* p = probs_.data() + n * k;
      const float* g = dp + n * k;
      if (aux) {
        const int64_t* cnt = counts_.data() + (seq ? n / T_ : 0) * E;
        for (int64_t e = 0; e < E; ++e) d[e] = static_cast<float>(aux_c * static_cast<double>(cnt[e]));
      }
      double pg = 0;  // sum_i p_i dp_i
      for (int64_t i = 0; i < k; ++i) pg += static_cast<double>(p[i]) * g[i];
      if (sigmoid) {
        // Aux scores q = s / (sum s): ds_e = (dq_e - <q, dq>) / (sum s).
        double S = 0, qd = 0;
        for (int64_t e = 0; e < E; ++e) S += s[e];
        for (int64_t e = 0; e < E; ++e) qd += static_cast<double>(s[e]) * d[e];
        qd /= (S + 1e-20);
        for (int64_t e = 0; e < E; ++e) d[e] = static_cast<float>((d[e] - qd) / (S + 1e-20));
        // Selected: p_i = s_i / (sum_sel s + 1e-20) when k > 1, else p = s.
        double Ssel = 0;
        for (int64_t i = 0; i < k; ++i) Ssel += s[sel[i]];
        for (int64_t i = 0; i < k; ++i)
          d[sel[i]] += k > 1 ? static_cast<float>((g[i] - pg) / (Ssel + 1e-20)) : g[i];
        for (int64_t e = 0; e < E; ++e) d[e] *= s[e] * (1.0f - s[e]);
      } else {
        if (cfg_.pre_softmax)
          for (int64_t i = 0; i < k; ++i) d[sel[i]] += g[i];
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(s[e]) * d[e];
        for (int64_t e = 0; e < E; ++e) d[e] = s[e] * static_cast<float>(d[e] - dot);
        if (!cfg_.pre_softmax)  // softmax over the selected logits
          for (int64_t i = 0; i < k; ++i) d[sel[i]] += p[i] * static_cast<float>(g[i] - pg);
      }
      (void)l;
    }
  }
  if (cfg_.z_loss_coeff > 0) {
    // d/dl_e of coeff/N sum_n lse_n^2 = coeff/N * 2 lse_n softmax(l_n)_e.
    const double zc = loss_scale * 2.0 * cfg_.z_loss_coeff / static_cast<double>(Ng_);
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelWork)
    for (int64_t n = 0; n < N; ++n) {
      const float* l = lg + n * E;
      float* d = dl + n * E;
      for (int64_t e = 0; e < E; ++e)
        d[e] += static_cast<float>(zc * lse[n] * std::exp(static_cast<double>(l[e]) - lse[n]));
    }
  }
  // dx [N, C] += dl [N, E] @ W [E, C];  dW [E, C] += dl^T [E, N] @ x [N, C]
  const size_t mark = arena.mark();
  const float* dl_be = dl;  // where the backend reads it
  if (be.device() != Device::CPU) {
    float* d = static_cast<float*>(arena.allocate(sizeof(float) * dl_.size()));
    be.copy_to_device(d, dl, sizeof(float) * dl_.size());
    dl_be = d;
  }
  const float* W = store_->value(w_).data<float>();
  be.gemm(false, false, N, C_, E, 1.0f, dl_be, E, W, C_, 1.0f, dx.data<float>(), C_);
  be.gemm(true, false, E, C_, N, 1.0f, dl_be, E, x_.data<float>(), C_, 1.0f, store_->grad(w_).data<float>(), C_);
  arena.release(mark);
}

}  // namespace megadlm
