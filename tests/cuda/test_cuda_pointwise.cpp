// CUDA pointwise, norm, RoPE, embedding, cross-entropy, optimizer, cast and MoE kernels against the CPU
// kernels (kernels/cpu/*), on fresh random inputs, fp32 and bf16, aligned (16-byte packs) and awkward
// (scalar path) sizes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "cuda/cuda_test_util.h"
#include "kernels/backend.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/rope.h"

#ifndef MEGADLM_HAVE_CUDA
MEGADLM_CUDA_NOT_BUILT_TEST(CudaPointwise)
#else

namespace megadlm::test {
namespace {

template <typename T>
class CudaOps : public CudaTest {};
using Precisions = ::testing::Types<float, bf16_t>;
TYPED_TEST_SUITE(CudaOps, Precisions);

// Sizes: multiples of 8 take the 16-byte path, the others the scalar one.
constexpr int64_t kSizes[] = {4096 + 24, 3001};

TYPED_TEST(CudaOps, GeluSiluForwardBackward) {
  using T = TypeParam;
  for (int64_t n : kSizes) {
    const auto x = Act<T>::seen(this->rand(n, -4.0f, 4.0f)), g = Act<T>::seen(this->rand(n));
    auto dx = Act<T>::up(x), dg = Act<T>::up(g);
    auto out = Act<T>::poison(n);
    std::vector<float> ref(n);
    cuda::gelu_forward(out.get(), dx.get(), n);
    cpu::gelu_forward(ref.data(), x.data(), n);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "gelu forward n=" << n;
    cuda::gelu_backward(out.get(), dx.get(), dg.get(), n);
    cpu::gelu_backward(ref.data(), x.data(), g.data(), n);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "gelu backward n=" << n;
    cuda::silu_forward(out.get(), dx.get(), n);
    cpu::silu_forward(ref.data(), x.data(), n);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "silu forward n=" << n;
    cuda::silu_backward(out.get(), dx.get(), dg.get(), n);
    cpu::silu_backward(ref.data(), x.data(), g.data(), n);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "silu backward n=" << n;
  }
}

TYPED_TEST(CudaOps, SwigluForwardBackward) {
  using T = TypeParam;
  for (auto [N, F] : {std::pair<int64_t, int64_t>{37, 264}, {29, 77}}) {
    const auto gu = Act<T>::seen(this->rand(N * 2 * F, -3.0f, 3.0f)), d = Act<T>::seen(this->rand(N * F));
    auto dgu = Act<T>::up(gu), dd = Act<T>::up(d);
    auto out = Act<T>::poison(N * F), dgrad = Act<T>::poison(N * 2 * F);
    std::vector<float> ref(N * F), ref_grad(N * 2 * F);
    cuda::swiglu_forward(out.get(), dgu.get(), N, F);
    cpu::swiglu_forward(ref.data(), gu.data(), N, F);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "N=" << N << " F=" << F;
    cuda::swiglu_backward(dgrad.get(), dgu.get(), dd.get(), N, F);
    cpu::swiglu_backward(ref_grad.data(), gu.data(), d.data(), N, F);
    EXPECT_LT(rel_err(Act<T>::down(dgrad), ref_grad), Act<T>::tol()) << "N=" << N << " F=" << F;
  }
}

TYPED_TEST(CudaOps, BiasResidualScale) {
  using T = TypeParam;
  const int64_t N = 53, C = 200;
  const auto x = Act<T>::seen(this->rand(N * C)), y = Act<T>::seen(this->rand(N * C)), bias = this->rand(C);
  auto dx = Act<T>::up(x), dy = Act<T>::up(y);
  auto dbias = to_device(bias);
  // bias add (in place)
  cuda::bias_add_forward(dx.get(), dbias.get(), N, C);
  std::vector<float> ref = x;
  cpu::bias_add_forward(ref.data(), bias.data(), N, C);
  EXPECT_LT(rel_err(Act<T>::down(dx), ref), Act<T>::tol());
  // bias backward accumulates into an existing gradient
  const auto db0 = this->rand(C);
  auto ddb = to_device(db0);
  std::vector<float> ref_db = db0;
  cuda::bias_backward(ddb.get(), dy.get(), N, C);
  cpu::bias_backward(ref_db.data(), y.data(), N, C);
  EXPECT_LT(rel_err(to_host(ddb), ref_db), 1e-5);
  // residual add and scale
  auto out = Act<T>::poison(N * C);
  dx = Act<T>::up(x);
  cuda::residual_add(out.get(), dx.get(), dy.get(), N * C);
  cpu::residual_add(ref.data(), x.data(), y.data(), N * C);
  EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol());
  cuda::scale_inplace(out.get(), 0.37f, N * C);
  cpu::scale_inplace(ref.data(), 0.37f, N * C);
  EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol());
}

// LayerNorm / RMSNorm, with and without the fused residual, forward and backward.
TYPED_TEST(CudaOps, NormsForwardBackward) {
  using T = TypeParam;
  for (bool rms : {false, true})
    for (bool fused : {false, true})
      // 256, 128, 2048 and 64 take the row-group fast path (norm.cu), 2056 and 99 the general one; 20000 rows
      // of 64 make each group of the fast backward walk several rows.
      for (auto [N, C] : {std::pair<int64_t, int64_t>{41, 256}, {23, 2056}, {17, 99}, {300, 128}, {64, 2048},
                          {20000, 64}}) {
        SCOPED_TRACE(::testing::Message() << (rms ? "rmsnorm" : "layernorm") << (fused ? "+residual" : "") << " N=" << N
                                          << " C=" << C);
        const auto inp = Act<T>::seen(this->rand(N * C, -2.0f, 3.0f)), res = Act<T>::seen(this->rand(N * C));
        const auto w = this->rand(C, 0.5f, 1.5f), bias = this->rand(C), dout = Act<T>::seen(this->rand(N * C));
        // The CPU sees x = inp + residual, rounded as the device stores the residual stream.
        std::vector<float> x = inp;
        if (fused)
          for (int64_t i = 0; i < N * C; ++i) x[i] = inp[i] + res[i];
        x = Act<T>::seen(x);
        auto d_inp = Act<T>::up(inp), d_res = Act<T>::up(res), d_dout = Act<T>::up(dout);
        auto d_w = to_device(w), d_b = to_device(bias);
        auto out = Act<T>::poison(N * C), sum = Act<T>::poison(N * C);
        auto mean = poisoned(N), rstd = poisoned(N);
        std::vector<float> ref(N * C), ref_mean(N), ref_rstd(N);
        if (rms) {
          cuda::rmsnorm_forward(out.get(), rstd.get(), d_inp.get(), d_w.get(), N, C, 1e-5f, fused ? d_res.get() : nullptr,
                                fused ? sum.get() : nullptr);
          cpu::rmsnorm_forward(ref.data(), ref_rstd.data(), x.data(), w.data(), N, C, 1e-5f);
        } else {
          cuda::layernorm_forward(out.get(), mean.get(), rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, 1e-5f,
                                  fused ? d_res.get() : nullptr, fused ? sum.get() : nullptr);
          cpu::layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), x.data(), w.data(), bias.data(), N, C,
                                 1e-5f);
          EXPECT_LT(rel_err(to_host(mean), ref_mean), 1e-5);
        }
        EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol());
        EXPECT_LT(rel_err(to_host(rstd), ref_rstd), 1e-5);
        if (fused) {
          EXPECT_LT(rel_err(Act<T>::down(sum), x), 1e-6);
        }

        // Backward from the saved statistics; weight gradients accumulate onto random values.
        const auto dw0 = this->rand(C), db0 = this->rand(C);
        auto d_dw = to_device(dw0), d_db = to_device(db0);
        std::vector<float> ref_dx(N * C), ref_dw = dw0, ref_db = db0;
        auto d_x = fused ? std::move(sum) : Act<T>::up(x);
        auto dx = Act<T>::poison(N * C);
        if (rms) {
          cuda::rmsnorm_backward(dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(), rstd.get(), N, C,
                                 fused ? d_res.get() : nullptr);
          cpu::rmsnorm_backward(ref_dx.data(), ref_dw.data(), dout.data(), x.data(), w.data(), ref_rstd.data(), N, C);
        } else {
          cuda::layernorm_backward(dx.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(), mean.get(),
                                   rstd.get(), N, C, fused ? d_res.get() : nullptr);
          cpu::layernorm_backward(ref_dx.data(), ref_dw.data(), ref_db.data(), dout.data(), x.data(), w.data(),
                                  ref_mean.data(), ref_rstd.data(), N, C);
          EXPECT_LT(rel_err(to_host(d_db), ref_db), 1e-5);
        }
        // The fused residual's gradient passes straight through (here `res` plays dresidual).
        if (fused)
          for (int64_t i = 0; i < N * C; ++i) ref_dx[i] += res[i];
        EXPECT_LT(rel_err(Act<T>::down(dx), ref_dx), 4 * Act<T>::tol());
        EXPECT_LT(rel_err(to_host(d_dw), ref_dw), (std::is_same_v<T, float> ? 1e-5 : 1e-3));
      }
}

TYPED_TEST(CudaOps, RopeForwardBackward) {
  using T = TypeParam;
  for (auto [N, H, D] : {std::tuple<int64_t, int64_t, int64_t>{37, 3, 64}, {19, 2, 22}}) {
    const int64_t P = 97;
    std::vector<float> cs(P * D / 2), sn(P * D / 2);
    cpu::rope_tables(cs.data(), sn.data(), P, D, 10000.0);
    std::vector<int32_t> pos(N);
    const auto u = this->rand(N, 0.0f, static_cast<float>(P));
    for (int64_t i = 0; i < N; ++i) pos[i] = std::min<int32_t>(P - 1, static_cast<int32_t>(u[i]));
    const auto x = Act<T>::seen(this->rand(N * H * D));
    auto dx = Act<T>::up(x), out = Act<T>::poison(N * H * D);
    auto dcs = to_device(cs), dsn = to_device(sn);
    auto dpos = to_device(pos);
    std::vector<float> ref(N * H * D);
    cuda::rope_forward(out.get(), dx.get(), dpos.get(), dcs.get(), dsn.get(), N, H, D);
    cpu::rope_forward(ref.data(), x.data(), pos.data(), cs.data(), sn.data(), N, H, D);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "D=" << D;
    cuda::rope_backward(out.get(), dx.get(), dpos.get(), dcs.get(), dsn.get(), N, H, D);
    cpu::rope_backward(ref.data(), x.data(), pos.data(), cs.data(), sn.data(), N, H, D);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol()) << "D=" << D;
  }
}

// The packed q|k|v path (qkv_norm_rope.cu) against rmsnorm then rope on the CPU, forward and backward.
// 600 tokens x 8 head rows of 128 make the backward's groups walk several rows.
TYPED_TEST(CudaOps, QkvNormRopeForwardBackward) {
  using T = TypeParam;
  for (auto [N, D] : {std::pair<int64_t, int64_t>{37, 64}, {600, 128}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " D=" << D);
    const int64_t H = 4, K = 2, R = H + 2 * K, P = 97;
    const float eps = 1e-6f;
    std::vector<float> cs(P * D / 2), sn(P * D / 2);
    cpu::rope_tables(cs.data(), sn.data(), P, D, 10000.0);
    std::vector<int32_t> pos(N);
    const auto u = this->rand(N, 0.0f, static_cast<float>(P));
    for (int64_t i = 0; i < N; ++i) pos[i] = std::min<int32_t>(P - 1, static_cast<int32_t>(u[i]));
    const auto qkv = Act<T>::seen(this->rand(N * R * D, -2.0f, 2.0f));
    const auto wq = this->rand(D, 0.5f, 1.5f), wk = this->rand(D, 0.5f, 1.5f);
    // The CPU side: the three head kinds split out of each token's row.
    std::vector<float> q_raw(N * H * D), k_raw(N * K * D), v(N * K * D);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < R; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const float x = qkv[(n * R + h) * D + d];
          if (h < H) q_raw[(n * H + h) * D + d] = x;
          else if (h < H + K) k_raw[(n * K + h - H) * D + d] = x;
          else v[(n * K + h - H - K) * D + d] = x;
        }
    std::vector<float> qn(q_raw.size()), kn(k_raw.size()), q_ref(q_raw.size()), k_ref(k_raw.size());
    std::vector<float> rq_ref(N * H), rk_ref(N * K);
    cpu::rmsnorm_forward(qn.data(), rq_ref.data(), q_raw.data(), wq.data(), N * H, D, eps);
    cpu::rmsnorm_forward(kn.data(), rk_ref.data(), k_raw.data(), wk.data(), N * K, D, eps);
    cpu::rope_forward(q_ref.data(), qn.data(), pos.data(), cs.data(), sn.data(), N, H, D);
    cpu::rope_forward(k_ref.data(), kn.data(), pos.data(), cs.data(), sn.data(), N, K, D);

    auto d_qkv = Act<T>::up(qkv), dq = Act<T>::poison(N * H * D), dk = Act<T>::poison(N * K * D);
    auto dv = Act<T>::poison(N * K * D);
    auto rq = poisoned(N * H), rk = poisoned(N * K);
    auto d_wq = to_device(wq), d_wk = to_device(wk), dcs = to_device(cs), dsn = to_device(sn);
    auto dpos = to_device(pos);
    cuda::qkv_norm_rope_forward(dq.get(), dk.get(), dv.get(), rq.get(), rk.get(), d_qkv.get(), d_wq.get(), d_wk.get(),
                                dpos.get(), dcs.get(), dsn.get(), N, H, K, D, eps);
    EXPECT_LT(rel_err(Act<T>::down(dq), q_ref), Act<T>::tol());
    EXPECT_LT(rel_err(Act<T>::down(dk), k_ref), Act<T>::tol());
    EXPECT_EQ(Act<T>::down(dv), v) << "v is a copy";
    EXPECT_LT(rel_err(to_host(rq), rq_ref), 1e-5);
    EXPECT_LT(rel_err(to_host(rk), rk_ref), 1e-5);

    // Backward: rope's inverse, then RMSNorm's backward (weights accumulate onto random values).
    const auto gq = Act<T>::seen(this->rand(N * H * D)), gk = Act<T>::seen(this->rand(N * K * D));
    const auto gv = Act<T>::seen(this->rand(N * K * D));
    const auto dwq0 = this->rand(D), dwk0 = this->rand(D);
    std::vector<float> zq(gq.size()), zk(gk.size()), xq(gq.size()), xk(gk.size()), ref_dwq = dwq0, ref_dwk = dwk0;
    cpu::rope_backward(zq.data(), gq.data(), pos.data(), cs.data(), sn.data(), N, H, D);
    cpu::rope_backward(zk.data(), gk.data(), pos.data(), cs.data(), sn.data(), N, K, D);
    cpu::rmsnorm_backward(xq.data(), ref_dwq.data(), zq.data(), q_raw.data(), wq.data(), rq_ref.data(), N * H, D);
    cpu::rmsnorm_backward(xk.data(), ref_dwk.data(), zk.data(), k_raw.data(), wk.data(), rk_ref.data(), N * K, D);
    std::vector<float> ref_dqkv(N * R * D);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < R; ++h)
        for (int64_t d = 0; d < D; ++d)
          ref_dqkv[(n * R + h) * D + d] = h < H       ? xq[(n * H + h) * D + d]
                                          : h < H + K ? xk[(n * K + h - H) * D + d]
                                                      : gv[(n * K + h - H - K) * D + d];
    auto d_gq = Act<T>::up(gq), d_gk = Act<T>::up(gk), d_gv = Act<T>::up(gv), dqkv = Act<T>::poison(N * R * D);
    auto d_dwq = to_device(dwq0), d_dwk = to_device(dwk0);
    cuda::qkv_norm_rope_backward(dqkv.get(), d_dwq.get(), d_dwk.get(), d_gq.get(), d_gk.get(), d_gv.get(), d_qkv.get(),
                                 d_wq.get(), d_wk.get(), rq.get(), rk.get(), dpos.get(), dcs.get(), dsn.get(), N, H,
                                 K, D);
    EXPECT_LT(rel_err(Act<T>::down(dqkv), ref_dqkv), 4 * Act<T>::tol());
    const double tol_w = std::is_same_v<T, float> ? 1e-5 : 1e-3;
    EXPECT_LT(rel_err(to_host(d_dwq), ref_dwq), tol_w);
    EXPECT_LT(rel_err(to_host(d_dwk), ref_dwk), tol_w);
  }
  // A head dim the lane groups cannot cover is refused by name.
  auto buf = Act<T>::poison(64 * 10);
  auto r = poisoned(64);
  EXPECT_NE(test::error_of([&] {
              cuda::qkv_norm_rope_forward(buf.get(), buf.get(), buf.get(), r.get(), r.get(), buf.get(), r.get(),
                                          r.get(), nullptr, r.get(), r.get(), 1, 1, 1, 40, 1e-6f);
            }).find("head dim 40"),
            std::string::npos);
}

TYPED_TEST(CudaOps, EmbeddingForwardBackward) {
  using T = TypeParam;
  // The second shape spans three blocks of the token-table backward (1024 rows each) and two tiles of
  // 4096 tokens, with repeated tokens.
  for (auto [N, C, V] : {std::tuple<int64_t, int64_t, int64_t>{77, 132, 50}, {5000, 96, 2500}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " V=" << V);
    const int64_t vocab_start = 20, P = 64;
    std::vector<int32_t> tok(N), pos(N);
    const auto u = this->rand(2 * N, 0.0f, 1.0f);
    for (int64_t i = 0; i < N; ++i) {
      tok[i] = static_cast<int32_t>(u[i] * (vocab_start + V + 10));  // some outside this shard
      pos[i] = static_cast<int32_t>(u[N + i] * (P - 1));
    }
    const auto wte = this->rand(V * C), wpe = this->rand(P * C), dout = Act<T>::seen(this->rand(N * C));
    auto dtok = to_device(tok), dpos = to_device(pos);
    auto dwte_t = to_device(wte), dwpe_t = to_device(wpe);
    auto out = Act<T>::poison(N * C);
    std::vector<float> ref(N * C);
    cuda::embedding_forward(out.get(), dtok.get(), dwte_t.get(), vocab_start, V, dpos.get(), dwpe_t.get(), N, C);
    cpu::embedding_forward(ref.data(), tok.data(), wte.data(), vocab_start, V, pos.data(), wpe.data(), N, C);
    EXPECT_LT(rel_err(Act<T>::down(out), ref), Act<T>::tol());
    const auto g0 = this->rand(V * C), gp0 = this->rand(P * C);
    auto dg = to_device(g0), dgp = to_device(gp0);
    auto ddout = Act<T>::up(dout);
    std::vector<float> ref_g = g0, ref_gp = gp0;
    cuda::embedding_backward(dg.get(), dgp.get(), ddout.get(), dtok.get(), vocab_start, V, dpos.get(), N, C);
    cpu::embedding_backward(ref_g.data(), ref_gp.data(), dout.data(), tok.data(), vocab_start, V, pos.data(), N, C);
    EXPECT_LT(rel_err(to_host(dg), ref_g), 1e-5);
    EXPECT_LT(rel_err(to_host(dgp), ref_gp), 1e-5);
  }
}

TYPED_TEST(CudaOps, CrossEntropyForwardBackward) {
  using T = TypeParam;
  for (int64_t V : {int64_t{1000}, int64_t{9001}}) {
    const int64_t N = 21;
    const auto logits = Act<T>::seen(this->rand(N * V, -6.0f, 6.0f)), w = this->rand(N, 0.2f, 2.0f);
    const auto u = this->rand(N, 0.0f, 1.0f);
    std::vector<int32_t> tgt(N);
    for (int64_t i = 0; i < N; ++i) tgt[i] = i % 5 == 3 ? -100 : static_cast<int32_t>(u[i] * (V - 1));
    auto dl = Act<T>::up(logits);
    auto dt = to_device(tgt);
    auto dw = to_device(w);
    auto losses = poisoned(N);
    auto grad = Act<T>::poison(N * V);
    std::vector<float> ref_loss(N), ref_grad(N * V);
    cuda::cross_entropy_forward_backward(losses.get(), grad.get(), dl.get(), dt.get(), dw.get(), -100, 0.25f, N, V);
    const double ref_sum = cpu::cross_entropy_forward_backward(ref_loss.data(), ref_grad.data(), logits.data(), tgt.data(),
                                                               w.data(), -100, 0.25f, N, V);
    EXPECT_LT(rel_err(to_host(losses), ref_loss), 1e-5) << "V=" << V;
    EXPECT_LT(rel_err(Act<T>::down(grad), ref_grad), Act<T>::tol()) << "V=" << V;
    // The device-side loss sum.
    cuda::DeviceBuffer<double> total(1);
    cuda::sum(total.get(), losses.get(), N);
    EXPECT_NEAR(to_host(total)[0], ref_sum, 1e-5 * std::fabs(ref_sum) + 1e-6);
    // In place (dlogits aliases logits), no weights.
    cuda::cross_entropy_forward_backward(losses.get(), dl.get(), dl.get(), dt.get(), static_cast<const float*>(nullptr),
                                         -100, 1.0f, N, V);
    cpu::cross_entropy_forward_backward(ref_loss.data(), ref_grad.data(), logits.data(), tgt.data(), nullptr, -100, 1.0f,
                                        N, V);
    EXPECT_LT(rel_err(Act<T>::down(dl), ref_grad), Act<T>::tol()) << "in place, V=" << V;
    EXPECT_LT(rel_err(to_host(losses), ref_loss), 1e-5) << "in place, V=" << V;
  }
}

// The vocab-parallel pieces on two shards of one vocabulary, the tp reductions done on the host in
// between (max of the row maxima, sum of the stats), give the single-rank loss and gradient of the whole
// vocabulary; also in place (the exponentials and the gradient over the logits), and with the loss alone.
class CudaVocabParallel : public CudaTest {};

TEST_F(CudaVocabParallel, ShardPiecesMatchTheWholeVocabulary) {
  const int64_t N = 19, V = 2 * 4608, Vl = V / 2;
  const auto logits = rand(N * V, -6.0f, 6.0f), w = rand(N, 0.2f, 2.0f), u = rand(N, 0.0f, 1.0f);
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = i % 5 == 3 ? -100 : static_cast<int32_t>(u[i] * (V - 1));
  std::vector<float> ref_loss(N), ref_grad(N * V);
  const double ref_sum = cpu::cross_entropy_forward_backward(ref_loss.data(), ref_grad.data(), logits.data(),
                                                             tgt.data(), w.data(), -100, 0.5f, N, V);
  auto dt = to_device(tgt);
  auto dw = to_device(w);
  for (const bool in_place : {false, true}) {
    // Shard s holds columns [s*Vl, (s+1)*Vl) of every row.
    std::vector<cuda::DeviceBuffer<float>> shard, grad, row_max;
    std::vector<float> max_all(N, -INFINITY);
    for (int s = 0; s < 2; ++s) {
      std::vector<float> cols(N * Vl);
      for (int64_t n = 0; n < N; ++n)
        std::copy(logits.begin() + n * V + s * Vl, logits.begin() + n * V + (s + 1) * Vl, cols.begin() + n * Vl);
      shard.push_back(to_device(cols));
      grad.push_back(poisoned(N * Vl));
      row_max.push_back(poisoned(N));
      cuda::cross_entropy_shard_max(row_max[s].get(), shard[s].get(), dt.get(), -100, N, Vl);
      const auto m = to_host(row_max[s]);
      for (int64_t n = 0; n < N; ++n) max_all[n] = std::max(max_all[n], m[n]);
    }
    auto dmax = to_device(max_all);
    std::vector<double> stats_all(2 * N, 0.0);
    std::vector<cuda::DeviceBuffer<double>> stats;
    for (int s = 0; s < 2; ++s) {
      stats.push_back(to_device(std::vector<double>(2 * N, NAN)));
      float* e = in_place ? shard[s].get() : grad[s].get();
      cuda::cross_entropy_shard_sumexp(stats[s].get(), e, shard[s].get(), dmax.get(), dt.get(), -100, s * Vl, V, N, Vl);
      const auto st = to_host(stats[s]);
      for (int64_t i = 0; i < 2 * N; ++i) stats_all[i] += st[i];
    }
    auto dstats = to_device(stats_all);
    for (int s = 0; s < 2; ++s) {
      auto losses = poisoned(N);
      float* d = in_place ? shard[s].get() : grad[s].get();
      cuda::cross_entropy_shard_finish(losses.get(), d, dstats.get(), dmax.get(), dt.get(), dw.get(), -100, 0.5f,
                                       s * Vl, V, N, Vl);
      EXPECT_LT(rel_err(to_host(losses), ref_loss), 1e-5) << "shard " << s << (in_place ? ", in place" : "");
      const auto g = to_host(in_place ? shard[s] : grad[s]);
      std::vector<float> ref(N * Vl);
      for (int64_t n = 0; n < N; ++n)
        std::copy(ref_grad.begin() + n * V + s * Vl, ref_grad.begin() + n * V + (s + 1) * Vl, ref.begin() + n * Vl);
      EXPECT_LT(rel_err(g, ref), kTolF32) << "shard " << s << (in_place ? ", in place" : "");
      cuda::DeviceBuffer<double> total(1);
      cuda::sum(total.get(), losses.get(), N);
      EXPECT_NEAR(to_host(total)[0], ref_sum, 1e-5 * std::fabs(ref_sum));
      // The loss alone: no exponentials kept, no gradient.
      auto alone = poisoned(N);
      cuda::cross_entropy_shard_finish(alone.get(), nullptr, dstats.get(), dmax.get(), dt.get(), dw.get(), -100, 1.0f,
                                       s * Vl, V, N, Vl);
      EXPECT_EQ(to_host(alone), to_host(losses));
    }
  }
}

class CudaOptim : public CudaTest {};

class CudaSoftmax : public CudaTest {};

TEST_F(CudaSoftmax, ForwardAndBackwardMatchCpu) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{7, 5}, {33, 1000}, {4, 3001}}) {
    const auto x = rand(N * V, -6.0f, 6.0f), dy = rand(N * V);
    auto dx = to_device(x), ddy = to_device(dy);
    auto out = poisoned(N * V), din = poisoned(N * V);
    std::vector<float> ref(N * V), dref(N * V);
    cuda::softmax_forward(out.get(), dx.get(), N, V);
    cpu::softmax_forward(ref.data(), x.data(), N, V);
    const auto y = to_host(out);
    EXPECT_LT(rel_err(y, ref), 1e-5) << "forward " << N << " x " << V;
    cuda::softmax_backward(din.get(), out.get(), ddy.get(), N, V);
    cpu::softmax_backward(dref.data(), ref.data(), dy.data(), N, V);
    EXPECT_LT(rel_err(to_host(din), dref), 1e-5) << "backward " << N << " x " << V;
  }
}

TEST_F(CudaOptim, AdamWMatchesCpu) {
  for (int64_t n : {int64_t{10000}, int64_t{4099}}) {
    auto p = rand(n), g = rand(n), m = rand(n, -0.1f, 0.1f), v = rand(n, 0.0f, 0.01f);
    auto dp = to_device(p), dg = to_device(g), dm = to_device(m), dv = to_device(v);
    auto dbf = poisoned_bf16(n);
    AdamWParams h;
    h.lr = 3e-3f, h.weight_decay = 0.1f, h.step = 17, h.beta2 = 0.95f;
    cuda::adamw_step(dp.get(), dg.get(), dm.get(), dv.get(), n, h, dbf.get());
    cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
    const auto got = to_host(dp);
    EXPECT_LT(rel_err(got, p), 1e-6) << "n=" << n;
    EXPECT_LT(rel_err(to_host(dm), m), 1e-6);
    EXPECT_LT(rel_err(to_host(dv), v), 1e-6);
    // The bf16 mirror is exactly the device's fp32 result rounded (comparing with the CPU's could differ by
    // one bf16 step where the two fp32 results straddle a rounding boundary).
    const auto mirror = to_host(dbf);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mirror[i].bits, f32_to_bf16(got[i])) << "bf16 mirror at " << i;
    // With zero_grad the next update is the same and leaves the gradient zero (vector packs and tail).
    h.step = 18, h.zero_grad = true;
    cuda::adamw_step(dp.get(), dg.get(), dm.get(), dv.get(), n, h);
    cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
    EXPECT_LT(rel_err(to_host(dp), p), 1e-6) << "zero_grad, n=" << n;
    EXPECT_EQ(to_host(dg), std::vector<float>(n, 0.0f)) << "zero_grad, n=" << n;
  }
}

TEST_F(CudaOptim, ReductionsMatchCpu) {
  const int64_t n = 123457;
  auto x = rand(n, -3.0f, 3.0f);
  auto dx = to_device(x);
  cuda::DeviceBuffer<double> ss(1);
  cuda::DeviceBuffer<float> am(1);
  cuda::sum_squares(ss.get(), dx.get(), n);
  cuda::abs_max(am.get(), dx.get(), n);
  const double ref = cpu::sum_squares(x.data(), n);
  EXPECT_NEAR(to_host(ss)[0], ref, 1e-12 * ref);
  EXPECT_EQ(to_host(am)[0], cpu::abs_max(x.data(), n));
  // Bitwise reproducible run to run.
  cuda::DeviceBuffer<double> ss2(1);
  cuda::sum_squares(ss2.get(), dx.get(), n);
  EXPECT_EQ(to_host(ss)[0], to_host(ss2)[0]);
  // NaN propagates through abs_max.
  x[777] = std::numeric_limits<float>::quiet_NaN();
  dx = to_device(x);
  cuda::abs_max(am.get(), dx.get(), n);
  EXPECT_TRUE(std::isnan(to_host(am)[0]));
  // Through the backend (the fp8 recipe's amax, the fp16 loss scaler's overflow check).
  const Backend& be = backend_for(Device::CUDA);
  EXPECT_TRUE(std::isnan(be.abs_max(dx.get(), n)));
  EXPECT_FALSE(be.all_finite(dx.get(), n));
  x[777] = 2.5f;
  x[4242] = -3.5f;
  dx = to_device(x);
  EXPECT_EQ(be.abs_max(dx.get(), n), 3.5f);
  EXPECT_TRUE(be.all_finite(dx.get(), n));
  x[99] = std::numeric_limits<float>::infinity();
  x[100] = std::numeric_limits<float>::max();  // finite: its square overflows fp32, not double
  dx = to_device(x);
  EXPECT_FALSE(be.all_finite(dx.get(), n));
  x[99] = 0.0f;
  dx = to_device(x);
  EXPECT_TRUE(be.all_finite(dx.get(), n));
}

class CudaCast : public CudaTest {};

// Casts must agree bit for bit with core/dtype.h's scalar conversions (round to nearest even, fp8 saturating).
TEST_F(CudaCast, BitwiseEqualToCpu) {
  const int64_t n = 5003;
  auto x = rand(n, -600.0f, 600.0f);
  for (int64_t i = 0; i < 50; ++i) x[i] = x[i] * 1e-4f;  // subnormal territory of e4m3
  x[60] = std::numeric_limits<float>::quiet_NaN();
  auto dx = to_device(x);
  cuda::DeviceBuffer<bf16_t> b(n);
  cuda::cast_f32_to_bf16(b.get(), dx.get(), n);
  const auto hb = to_host(b);
  std::vector<uint16_t> rb(n);
  cpu::cast_f32_to_bf16(rb.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hb[i].bits, rb[i]) << "bf16 at " << i << " x=" << x[i];
  for (bool e4m3 : {true, false}) {
    const float scale = e4m3 ? 0.5f : 8.0f;
    cuda::DeviceBuffer<uint8_t> q(n);
    std::vector<uint8_t> rq(n);
    if (e4m3) {
      cuda::cast_f32_to_e4m3(q.get(), dx.get(), n, scale);
      cpu::cast_f32_to_e4m3(rq.data(), x.data(), n, scale);
    } else {
      cuda::cast_f32_to_e5m2(q.get(), dx.get(), n, scale);
      cpu::cast_f32_to_e5m2(rq.data(), x.data(), n, scale);
    }
    const auto hq = to_host(q);
    for (int64_t i = 0; i < n; ++i) {
      if (i == 60) continue;  // NaN encodings may differ; both are NaN (checked below)
      ASSERT_EQ(hq[i], rq[i]) << (e4m3 ? "e4m3" : "e5m2") << " at " << i << " x*scale=" << x[i] * scale;
    }
    auto back = poisoned(n);
    if (e4m3) cuda::cast_e4m3_to_f32(back.get(), q.get(), n, 1.0f / scale);
    else cuda::cast_e5m2_to_f32(back.get(), q.get(), n, 1.0f / scale);
    std::vector<float> rback(n);
    if (e4m3) cpu::cast_e4m3_to_f32(rback.data(), rq.data(), n, 1.0f / scale);
    else cpu::cast_e5m2_to_f32(rback.data(), rq.data(), n, 1.0f / scale);
    const auto hback = to_host(back);
    EXPECT_TRUE(std::isnan(hback[60]));
    for (int64_t i = 0; i < n; ++i)
      if (i != 60) {
        ASSERT_EQ(hback[i], rback[i]) << "dequantised at " << i;
      }
  }
}

// fp16 bits and the in-place round trips of the emulated recipes, bit for bit the CPU's: fp16 normal,
// subnormal and overflow (beyond 65504: inf), bf16, and fp8 dq(q(x * scale)) / scale in both formats.
TEST_F(CudaCast, Fp16AndRoundTripsBitwiseEqualToCpu) {
  const int64_t n = 6007;
  auto x = rand(n, -70000.0f, 70000.0f);  // some beyond fp16's range
  for (int64_t i = 0; i < 200; ++i) x[i] = x[i] * 1e-9f;  // fp16 subnormals (below 6.1e-5)
  for (int64_t i = 200; i < 400; ++i) x[i] = x[i] * 1e-4f;  // fp16 normals near 1
  auto dx = to_device(x);
  cuda::DeviceBuffer<uint16_t> h(n);
  cuda::cast_f32_to_f16(h.get(), dx.get(), n);
  std::vector<uint16_t> rh(n);
  cpu::cast_f32_to_f16(rh.data(), x.data(), n);
  const auto hh = to_host(h);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hh[i], rh[i]) << "fp16 at " << i << " x=" << x[i];
  auto back = poisoned(n);
  cuda::cast_f16_to_f32(back.get(), h.get(), n);
  std::vector<float> rback(n);
  cpu::cast_f16_to_f32(rback.data(), rh.data(), n);
  EXPECT_EQ(to_host(back), rback);
  int overflowed = 0;
  for (float v : rback) overflowed += std::isinf(v);
  EXPECT_GT(overflowed, 0) << "meant to test fp16's overflow to inf";
  // In place: each round trip against the CPU's on the same values.
  for (int trip = 0; trip < 4; ++trip) {
    const float scale = trip == 2 ? 1.0f / 256 : 1.0f / 4;  // brings x * scale into e4m3's / e5m2's range
    auto d = to_device(x);
    std::vector<float> ref = x;
    switch (trip) {
      case 0: cuda::round_to_bf16(d.get(), n); cpu::round_to_bf16(ref.data(), n); break;
      case 1: cuda::round_to_f16(d.get(), n); cpu::round_to_f16(ref.data(), n); break;
      case 2: cuda::quantize_dequantize_e4m3(d.get(), n, scale); cpu::quantize_dequantize_e4m3(ref.data(), n, scale); break;
      default: cuda::quantize_dequantize_e5m2(d.get(), n, scale); cpu::quantize_dequantize_e5m2(ref.data(), n, scale);
    }
    const auto got = to_host(d);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ref[i]) << "round trip " << trip << " at " << i << " x=" << x[i];
  }
}

TYPED_TEST(CudaOps, MoePermuteUnpermute) {
  using T = TypeParam;
  const int64_t N = 31, C = 72, k = 2, P = N * k + 5;  // 5 padding rows
  // A routing: rows in random order of (token, slot) pairs plus padding.
  std::vector<int32_t> token(P, -1);
  const auto u = this->rand(P, 0.0f, 1.0f);
  std::vector<int64_t> order(N * k);
  for (int64_t i = 0; i < N * k; ++i) order[i] = i;
  for (int64_t i = N * k - 1; i > 0; --i) std::swap(order[i], order[static_cast<int64_t>(u[i] * i)]);
  for (int64_t r = 0; r < N * k; ++r) token[r + (r > 10 ? 5 : 0)] = static_cast<int32_t>(order[r] / k);
  const auto weight = this->rand(P, 0.0f, 1.0f);
  const auto x = Act<T>::seen(this->rand(N * C));
  // CSR inverse index, ascending rows.
  std::vector<int32_t> offsets(N + 1, 0), list;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < P; ++p)
      if (token[p] == n) list.push_back(static_cast<int32_t>(p));
    offsets[n + 1] = static_cast<int32_t>(list.size());
  }
  auto dx = Act<T>::up(x);
  auto dtok = to_device(token), doff = to_device(offsets), dlist = to_device(list);
  auto dw = to_device(weight);
  auto rows = Act<T>::poison(P * C);
  cuda::moe_permute(rows.get(), dx.get(), dtok.get(), static_cast<const float*>(nullptr), P, C);
  std::vector<float> ref_rows(P * C, 0.0f);
  for (int64_t p = 0; p < P; ++p)
    if (token[p] >= 0)
      for (int64_t c = 0; c < C; ++c) ref_rows[p * C + c] = x[token[p] * C + c];
  EXPECT_EQ(rel_err(Act<T>::down(rows), ref_rows), 0.0);
  // Unpermute with weights: out[n] = sum_p w_p rows[p].
  const auto y = Act<T>::seen(this->rand(P * C));
  auto dy = Act<T>::up(y);
  auto out = Act<T>::poison(N * C);
  cuda::moe_unpermute(out.get(), dy.get(), doff.get(), dlist.get(), dw.get(), N, C);
  std::vector<float> ref_out(N * C, 0.0f);
  for (int64_t p = 0; p < P; ++p)
    if (token[p] >= 0)
      for (int64_t c = 0; c < C; ++c) ref_out[token[p] * C + c] += weight[p] * y[p * C + c];
  EXPECT_LT(rel_err(Act<T>::down(out), ref_out), Act<T>::tol());
  // Router-weight gradient.
  const auto g = Act<T>::seen(this->rand(N * C));
  auto dg = Act<T>::up(g);
  auto dwg = poisoned(P);
  cuda::moe_unpermute_weight_grad(dwg.get(), dg.get(), dy.get(), dtok.get(), P, C);
  std::vector<float> ref_dw(P, 0.0f);
  for (int64_t p = 0; p < P; ++p)
    if (token[p] >= 0)
      for (int64_t c = 0; c < C; ++c) ref_dw[p] += g[token[p] * C + c] * y[p * C + c];
  EXPECT_LT(rel_err(to_host(dwg), ref_dw), 1e-5);
}

}  // namespace
}  // namespace megadlm::test

#endif  // MEGADLM_HAVE_CUDA
