// GPU training-step benchmark of a diffusion LM (masked-diffusion objective, bidirectional attention) on
// the CUDA backend: a Qwen3-like decoder stack (RMSNorm, QK-norm, RoPE, GQA, SwiGLU, tied embeddings) in
// bf16 with fp32 master weights, fp32 gradients and AdamW over one flat buffer. Everything runs on the
// device through kernels/cuda/ops.h; the host only draws the masking and launches work.
//
// Per layer: one packed q|k|v product and one pass for QK-norm + RoPE (qkv_norm_rope_*), cuDNN attention,
// the two output projections adding the residual stream in their epilogues (GemmArgs::D), RMSNorm,
// SwiGLU. The weight-gradient products write the gradients (beta 0), so the gradient buffer is never
// cleared as a whole; only the norm weights' spans, whose backward accumulates.
//
// It prints the bf16 cuBLASLt GEMM rate measured in the same process (the MFU denominator), the step
// time split into forward / backward / optimizer, tokens/s, model TFLOP/s and MFU, and the time of one
// layer's attention forward + backward through each implementation (cuDNN when compiled in, cuBLASLt,
// flash) for diagnosis. Env MEGADLM_ATTENTION=auto|cudnn|gemm|flash picks the one the steps use.
//
//   bench_dlm_step [--layers 28] [--hidden 2048] [--heads 16] [--kv-heads 8] [--head-dim 128] [--ffn 6144]
//                  [--vocab 151936] [--seq 2048] [--batch 4] [--steps 5] [--warmup 2] [--gemm-size 8192]
//                  [--profile 1]   (one more step after the timed ones, each op timed by events, summed by name)
//                  [--head-all-rows 1]
//
// The output layer runs on the rows with a loss (the masked tokens, about half), as the framework's does
// (nn/lm_head.cpp): the other rows' logits have no gradient, so the loss and every gradient are the same.
// --head-all-rows 1 runs it on every token instead, as the PyTorch peer does. MFU counts the products
// that run: the head's share for the rows it runs on.
//
// Legend: B batch, T sequence, C hidden, H heads, K kv heads, D head dim, F ffn, V vocab, N = B*T.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/ops.h"

namespace mc = megadlm::cuda;
using megadlm::bf16_t;
using megadlm::DType;

namespace {

struct Config {
  int64_t L = 28, C = 2048, H = 16, K = 8, D = 128, F = 6144, V = 151936, T = 2048, B = 4;
  int steps = 5, warmup = 2;
  bool profile = false;
  bool head_all_rows = false;  // --head-all-rows 1: the output layer on every token, as the PyTorch peer does
  int64_t gemm_size = 8192;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    MEGADLM_CHECK(i + 1 < argc, "bench_dlm_step: flag ", a, " needs a value");
    const int64_t v = std::atoll(argv[++i]);
    MEGADLM_CHECK(v > 0 || a == "--profile" || a == "--head-all-rows", "bench_dlm_step: ", a, " must be positive, got ", argv[i]);
    if (a == "--layers") c.L = v;
    else if (a == "--hidden") c.C = v;
    else if (a == "--heads") c.H = v;
    else if (a == "--kv-heads") c.K = v;
    else if (a == "--head-dim") c.D = v;
    else if (a == "--ffn") c.F = v;
    else if (a == "--vocab") c.V = v;
    else if (a == "--seq") c.T = v;
    else if (a == "--batch") c.B = v;
    else if (a == "--steps") c.steps = static_cast<int>(v);
    else if (a == "--warmup") c.warmup = static_cast<int>(v);
    else if (a == "--gemm-size") c.gemm_size = v;
    else if (a == "--profile") c.profile = v != 0;
    else if (a == "--head-all-rows") c.head_all_rows = v != 0;
    else megadlm::fail("bench_dlm_step: unknown flag ", a);
  }
  MEGADLM_CHECK(c.H % c.K == 0, "bench_dlm_step: --heads ", c.H, " not divisible by --kv-heads ", c.K);
  return c;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) megadlm::fail(what, ": ", cudaGetErrorString(e));
}

// Wall time of a sequence of device work, by events on the default stream.
struct Timer {
  cudaEvent_t a, b;
  Timer() {
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { check(cudaEventRecord(a), "cudaEventRecord"); }
  double stop_ms() {
    check(cudaEventRecord(b), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms;
  }
};

// ---- per-op profile (--profile 1): one extra step with events around every op, summed by name ----------
struct OpProfile {
  struct Mark {
    const char* name;
    double flops;
    cudaEvent_t a, b;
  };
  bool on = false;
  std::vector<Mark> marks;
  template <typename F> void run(const char* name, double flops, F&& f) {
    if (!on) return f();
    Mark m{name, flops, nullptr, nullptr};
    check(cudaEventCreate(&m.a), "cudaEventCreate"), check(cudaEventCreate(&m.b), "cudaEventCreate");
    check(cudaEventRecord(m.a), "cudaEventRecord");
    f();
    check(cudaEventRecord(m.b), "cudaEventRecord");
    marks.push_back(m);
  }
  // Sorted by total time: calls, ms per step, share of the profiled step, TFLOP/s where FLOPs are known.
  void report() {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    struct Row {
      std::string name;
      int calls = 0;
      double ms = 0, flops = 0;
    };
    std::vector<Row> rows;
    double total = 0;
    for (const Mark& m : marks) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, m.a, m.b), "cudaEventElapsedTime");
      cudaEventDestroy(m.a), cudaEventDestroy(m.b);
      auto r = std::find_if(rows.begin(), rows.end(), [&](const Row& x) { return x.name == m.name; });
      if (r == rows.end()) r = rows.insert(rows.end(), Row{m.name});
      r->calls += 1, r->ms += ms, r->flops += m.flops, total += ms;
    }
    marks.clear();
    std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.ms > y.ms; });
    std::printf("profile of one step (events around each op, summed by name; all ops: %.1f ms):\n", total);
    for (const Row& r : rows) {
      std::printf("  %-26s %4d calls %8.2f ms %5.1f%%", r.name.c_str(), r.calls, r.ms, 100.0 * r.ms / total);
      if (r.flops > 0) std::printf("  %6.1f TFLOP/s", r.flops / (r.ms * 1e-3) / 1e12);
      std::printf("\n");
    }
  }
};
OpProfile prof;
#define OP(name, ...) prof.run(name, 0.0, [&] { __VA_ARGS__; })

// ---- GEMM helpers: row-major Linear layers on bf16 activations --------------------------------------------
// y [M,N] (bf16) = x [M,K] @ W^T (+ residual [M,N], added in the product's epilogue), W [N,K] bf16.
void linear_fwd(const char* name, bf16_t* y, const bf16_t* x, const bf16_t* W, int64_t M, int64_t N, int64_t K,
                const bf16_t* residual = nullptr) {
  mc::GemmArgs g;
  g.trans_b = true, g.M = M, g.N = N, g.K = K;
  g.a_type = g.b_type = g.c_type = DType::BF16;
  g.A = x, g.lda = K, g.B = W, g.ldb = K, g.C = y, g.ldc = N;
  if (residual) g.C = const_cast<bf16_t*>(residual), g.D = y, g.beta = 1.0f;  // C is only read
  prof.run(name, 2.0 * M * N * K, [&] { mc::gemm(g); });
}
// dx [M,K] (bf16) (+)= dy [M,N] @ W [N,K]
void linear_dx(const char* name, bf16_t* dx, const bf16_t* dy, const bf16_t* W, int64_t M, int64_t N, int64_t K,
               bool accumulate) {
  mc::GemmArgs g;
  g.M = M, g.N = K, g.K = N, g.beta = accumulate ? 1.0f : 0.0f;
  g.a_type = g.b_type = g.c_type = DType::BF16;
  g.A = dy, g.lda = N, g.B = W, g.ldb = K, g.C = dx, g.ldc = K;
  prof.run(name, 2.0 * M * N * K, [&] { mc::gemm(g); });
}
// dW [N,K] (fp32) = dy^T [N,M] @ x [M,K]: written, not accumulated (beta 0, nothing read), since each
// weight's gradient is made once per step (one micro-batch); that is what zeroes the gradient buffer.
void linear_dw(const char* name, float* dW, const bf16_t* dy, const bf16_t* x, int64_t M, int64_t N, int64_t K) {
  mc::GemmArgs g;
  g.trans_a = true, g.M = N, g.N = K, g.K = M, g.beta = 0.0f;
  g.a_type = g.b_type = DType::BF16, g.c_type = DType::F32;
  g.A = dy, g.lda = N, g.B = x, g.ldb = K, g.C = dW, g.ldc = K;
  prof.run(name, 2.0 * M * N * K, [&] { mc::gemm(g); });
}

// Parameters live in one flat fp32 buffer (master), its bf16 mirror and one flat fp32 gradient buffer;
// a Param is an offset into all three.
struct Param {
  int64_t off = 0, n = 0;
};
struct Layer {
  Param norms, ln1, ln2, qn, kn;  // the norm weights side by side (`norms`), then the matrices
  Param wq, wk, wv, wqkv, wo, w1, w2;  // wqkv: wq, wk, wv back to back, one [H*D + 2*K*D, C] matrix
};

struct Model {
  Config c;
  std::vector<Layer> layers;
  Param wte, lnf;
  int64_t total = 0;
  Param add(int64_t n) {
    Param p{total, n};
    total += (n + 7) / 8 * 8;  // 32-byte aligned offsets keep every tensor 16-byte aligned in bf16 too
    return p;
  }
  explicit Model(const Config& cfg) : c(cfg) {
    wte = add(c.V * c.C);
    for (int64_t l = 0; l < c.L; ++l) {
      Layer y;
      y.ln1 = add(c.C), y.ln2 = add(c.C), y.qn = add(c.D), y.kn = add(c.D);
      y.norms = Param{y.ln1.off, total - y.ln1.off};
      y.wq = add(c.H * c.D * c.C), y.wk = add(c.K * c.D * c.C), y.wv = add(c.K * c.D * c.C);
      y.wqkv = Param{y.wq.off, total - y.wq.off};  // sizes are multiples of 8: no padding between them
      y.wo = add(c.C * c.H * c.D), y.w1 = add(2 * c.F * c.C), y.w2 = add(c.C * c.F);
      layers.push_back(y);
    }
    lnf = add(c.C);
  }
};

// Saved activations of one layer (bf16 unless noted).
struct Acts {
  mc::DeviceBuffer<bf16_t> s, h1, qkv, v, q, k, o, s_mid, h2, gu, a;
  mc::DeviceBuffer<float> rstd1, rstd_q, rstd_k, lse, rstd2;
  Acts(const Config& c) {
    const int64_t N = c.B * c.T;
    s = mc::DeviceBuffer<bf16_t>(N * c.C), h1 = mc::DeviceBuffer<bf16_t>(N * c.C);
    qkv = mc::DeviceBuffer<bf16_t>(N * (c.H + 2 * c.K) * c.D);
    v = mc::DeviceBuffer<bf16_t>(N * c.K * c.D), q = mc::DeviceBuffer<bf16_t>(N * c.H * c.D);
    k = mc::DeviceBuffer<bf16_t>(N * c.K * c.D), o = mc::DeviceBuffer<bf16_t>(N * c.H * c.D);
    s_mid = mc::DeviceBuffer<bf16_t>(N * c.C), h2 = mc::DeviceBuffer<bf16_t>(N * c.C);
    gu = mc::DeviceBuffer<bf16_t>(N * 2 * c.F), a = mc::DeviceBuffer<bf16_t>(N * c.F);
    rstd1 = mc::DeviceBuffer<float>(N), rstd_q = mc::DeviceBuffer<float>(N * c.H), rstd_k = mc::DeviceBuffer<float>(N * c.K);
    lse = mc::DeviceBuffer<float>(c.B * c.H * c.T), rstd2 = mc::DeviceBuffer<float>(N);
  }
};

// Uniform(-a, a) initial weights: one random chunk drawn on the host (an odd length, so tensors do not
// repeat it in step) and tiled over the flat buffer. Drawing 1.7 B values on the host would take longer
// than the benchmark; the bench is about speed, not about the initialisation.
void init_params(float* master, bf16_t* mirror, const Model& m) {
  std::mt19937_64 rng(1234);
  const int64_t chunk = (1 << 24) + 13;
  std::vector<float> host(chunk);
  const float a = 0.02f * std::sqrt(3.0f);
  std::uniform_real_distribution<float> u(-a, a);
  for (auto& x : host) x = u(rng);
  for (int64_t off = 0; off < m.total; off += chunk) {
    const int64_t n = std::min(chunk, m.total - off);
    mc::copy_to_device(master + off, host.data(), n * sizeof(float));
  }
  // Norm weights start at one.
  std::vector<float> ones(std::max(m.c.C, m.c.D), 1.0f);
  auto set_ones = [&](const Param& p) { mc::copy_to_device(master + p.off, ones.data(), p.n * sizeof(float)); };
  for (const Layer& y : m.layers) set_ones(y.ln1), set_ones(y.ln2), set_ones(y.qn), set_ones(y.kn);
  set_ones(m.lnf);
  mc::cast_f32_to_bf16(mirror, master, m.total);
}

double measure_gemm_tflops(int64_t n) {
  mc::DeviceBuffer<bf16_t> A(n * n), B(n * n), C(n * n);
  mc::memset_device(A.get(), 0x3c, n * n * 2);  // bf16 0x3c3c ~ 0.0115: finite inputs, no denormals
  mc::memset_device(B.get(), 0x3c, n * n * 2);
  mc::GemmArgs g;
  g.trans_b = true, g.M = g.N = g.K = n;
  g.a_type = g.b_type = g.c_type = DType::BF16;
  g.A = A.get(), g.lda = n, g.B = B.get(), g.ldb = n, g.C = C.get(), g.ldc = n;
  for (int i = 0; i < 3; ++i) mc::gemm(g);
  Timer t;
  const int reps = 20;
  t.start();
  for (int i = 0; i < reps; ++i) mc::gemm(g);
  const double ms = t.stop_ms() / reps;
  return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config c = parse(argc, argv);
  if (mc::device_count() == 0) {
    std::printf("bench_dlm_step: no CUDA device visible; nothing to measure\n");
    return 0;
  }
  const int64_t N = c.B * c.T, HD = c.H * c.D, KD = c.K * c.D;
  std::printf("device: %s (sm_%d)\n", mc::device_name().c_str(), mc::compute_capability());
  if (const char* impl = std::getenv("MEGADLM_ATTENTION")) {  // "cudnn", "flash" or "gemm" (default: auto)
    const std::string v = impl;
    MEGADLM_CHECK(v == "cudnn" || v == "flash" || v == "gemm" || v == "auto", "bench_dlm_step: MEGADLM_ATTENTION=", v,
                  " (want cudnn, flash, gemm or auto)");
    MEGADLM_CHECK(v != "cudnn" || mc::attention_cudnn_compiled(),
                  "bench_dlm_step: MEGADLM_ATTENTION=cudnn but this build has no cuDNN frontend (see docs/cuda.md)");
    mc::set_attention_impl(v == "cudnn" ? mc::AttentionImpl::Cudnn
                           : v == "flash" ? mc::AttentionImpl::Flash
                           : v == "gemm"  ? mc::AttentionImpl::Gemm
                                          : mc::AttentionImpl::Auto);
  }
  std::printf("attention: cuDNN fused SDPA %s\n", mc::attention_cudnn_compiled()
                                                      ? "compiled in (Auto uses it for bf16 causal / bidirectional)"
                                                      : "not in this build");

  const double peak = measure_gemm_tflops(c.gemm_size);
  std::printf("bf16 cuBLASLt GEMM %lldx%lldx%lld: %.1f TFLOP/s (the MFU denominator)\n", (long long)c.gemm_size,
              (long long)c.gemm_size, (long long)c.gemm_size, peak);

  Model m(c);
  const int64_t embed = c.V * c.C;
  std::printf("model: %lld layers, hidden %lld, heads %lld/%lld x %lld, ffn %lld, vocab %lld: %.3f B parameters "
              "(%.3f B without the tied embedding); batch %lld x seq %lld = %lld tokens/step, bf16\n",
              (long long)c.L, (long long)c.C, (long long)c.H, (long long)c.K, (long long)c.D, (long long)c.F,
              (long long)c.V, m.total / 1e9, (m.total - embed) / 1e9, (long long)c.B, (long long)c.T, (long long)N);

  mc::DeviceBuffer<float> master(m.total), grad(m.total), adam_m(m.total), adam_v(m.total);
  mc::DeviceBuffer<bf16_t> w(m.total);
  init_params(master.get(), w.get(), m);
  mc::memset_device(adam_m.get(), 0, m.total * 4);
  mc::memset_device(adam_v.get(), 0, m.total * 4);
  mc::memset_device(grad.get(), 0, m.total * 4);  // once: the padding between tensors is never written
  auto W = [&](const Param& p) { return w.get() + p.off; };
  auto P = [&](const Param& p) { return master.get() + p.off; };
  auto G = [&](const Param& p) { return grad.get() + p.off; };

  std::vector<Acts> acts;
  for (int64_t l = 0; l < c.L; ++l) acts.emplace_back(c);
  mc::DeviceBuffer<bf16_t> s_final(N * c.C), s_sel(N * c.C), hf(N * c.C), logits(N * c.V), ds_sel(N * c.C);
  mc::DeviceBuffer<float> rstd_f(N), losses(N);
  mc::DeviceBuffer<double> loss_sum(1);
  // Backward scratch (bf16): gradients of the residual stream and of the layer's intermediates.
  mc::DeviceBuffer<bf16_t> ds(N * c.C), ds_mid(N * c.C), dh(N * c.C), dgu(N * 2 * c.F), da(N * c.F);
  mc::DeviceBuffer<bf16_t> dq(N * HD), dk(N * KD), dv(N * KD), d_o(N * HD), dqkv(N * (HD + 2 * KD));
  // RoPE tables and positions 0..T-1 per row.
  std::vector<float> cs(c.T * c.D / 2), sn(c.T * c.D / 2);
  megadlm::cpu::rope_tables(cs.data(), sn.data(), c.T, c.D, 1e6);
  mc::DeviceBuffer<float> dcos(cs.size()), dsin(sn.size());
  dcos.upload(cs.data()), dsin.upload(sn.data());
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % c.T);
  mc::DeviceBuffer<int32_t> dpos(N), tokens(N);
  // The output layer's rows (the tokens with a loss): their indices, targets, weights, and the inverse
  // (CSR: token n's row, if any) that puts their gradients back.
  mc::DeviceBuffer<int32_t> sel(N), sel_targets(N), inv_offsets(N + 1), inv_rows(N);
  mc::DeviceBuffer<float> sel_weights(N);
  int64_t M = N;  // rows the output layer runs on this step
  dpos.upload(pos.data());

  megadlm::AttentionMask bidir;
  bidir.type = megadlm::MaskType::None;  // a diffusion LM attends both ways
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  const float eps = 1e-6f;
  const int32_t mask_id = static_cast<int32_t>(c.V - 1);

  std::mt19937_64 rng(42);
  std::vector<int32_t> h_tok(N), h_tgt(N), h_sel, h_sel_tgt, h_off(N + 1), h_rows;
  std::vector<float> h_w(N), h_sel_w;
  int64_t head_rows_total = 0;  // over the timed steps, for the FLOP count

  // One masked-diffusion batch: per sequence a ratio t ~ U(0.05, 1); each token masked with probability t;
  // loss on the masked tokens weighted 1/t, normalised by the number of tokens.
  auto draw_batch = [&]() {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.V - 2));
    for (int64_t b = 0; b < c.B; ++b) {
      const double t = 0.05 + 0.95 * u(rng);
      for (int64_t i = 0; i < c.T; ++i) {
        const int64_t n = b * c.T + i;
        const int32_t x = tok(rng);
        const bool masked = u(rng) < t;
        h_tok[n] = masked ? mask_id : x;
        h_tgt[n] = masked ? x : -100;
        h_w[n] = static_cast<float>(1.0 / t);
      }
    }
    tokens.upload(h_tok.data());
    h_sel.clear(), h_sel_tgt.clear(), h_sel_w.clear(), h_rows.clear();
    for (int64_t n = 0; n < N; ++n) {
      h_off[n] = static_cast<int32_t>(h_sel.size());
      if (c.head_all_rows || h_tgt[n] != -100) {
        h_rows.push_back(static_cast<int32_t>(h_sel.size()));
        h_sel.push_back(static_cast<int32_t>(n)), h_sel_tgt.push_back(h_tgt[n]), h_sel_w.push_back(h_w[n]);
      }
    }
    h_off[N] = static_cast<int32_t>(h_sel.size());
    M = static_cast<int64_t>(h_sel.size());
    mc::copy_to_device(sel.get(), h_sel.data(), M * 4), mc::copy_to_device(sel_targets.get(), h_sel_tgt.data(), M * 4);
    mc::copy_to_device(sel_weights.get(), h_sel_w.data(), M * 4), mc::copy_to_device(inv_rows.get(), h_rows.data(), M * 4);
    inv_offsets.upload(h_off.data());
  };

  auto forward = [&]() {
    OP("embedding fwd", mc::embedding_forward(acts[0].s.get(), tokens.get(), P(m.wte), 0, c.V, nullptr, nullptr, N, c.C));
    for (int64_t l = 0; l < c.L; ++l) {
      const Layer& y = m.layers[l];
      Acts& A = acts[l];
      OP("rmsnorm fwd", mc::rmsnorm_forward(A.h1.get(), A.rstd1.get(), A.s.get(), P(y.ln1), N, c.C, eps));
      // One packed q|k|v product, then QK-norm (per head RMSNorm over D) and RoPE into q / k, v copied out.
      linear_fwd("gemm fwd qkv", A.qkv.get(), A.h1.get(), W(y.wqkv), N, HD + 2 * KD, c.C);
      OP("qk-norm+rope fwd", mc::qkv_norm_rope_forward(A.q.get(), A.k.get(), A.v.get(), A.rstd_q.get(), A.rstd_k.get(),
                                                         A.qkv.get(), P(y.qn), P(y.kn), dpos.get(), dcos.get(),
                                                         dsin.get(), N, c.H, c.K, c.D, eps));
      prof.run("attention fwd", 4.0 * c.B * c.T * c.T * c.H * c.D, [&] {
        mc::attention_forward(A.o.get(), A.lse.get(), A.q.get(), A.k.get(), A.v.get(), c.B, c.T, c.H, c.K, c.D, bidir,
                              scale);
      });
      // The projections add the residual stream in their epilogues: s_mid = s + o Wo^T, s_{l+1} = s_mid + a W2^T.
      linear_fwd("gemm fwd o (+s)", A.s_mid.get(), A.o.get(), W(y.wo), N, c.C, HD, A.s.get());
      OP("rmsnorm fwd", mc::rmsnorm_forward(A.h2.get(), A.rstd2.get(), A.s_mid.get(), P(y.ln2), N, c.C, eps));
      linear_fwd("gemm fwd fc1", A.gu.get(), A.h2.get(), W(y.w1), N, 2 * c.F, c.C);
      OP("swiglu fwd", mc::swiglu_forward(A.a.get(), A.gu.get(), N, c.F));
      bf16_t* next = l + 1 < c.L ? acts[l + 1].s.get() : s_final.get();
      linear_fwd("gemm fwd fc2 (+s)", next, A.a.get(), W(y.w2), N, c.C, c.F, A.s_mid.get());
    }
    // The output layer on the rows with a loss: gathered, final norm, tied LM head.
    OP("gather head rows", mc::moe_permute(s_sel.get(), s_final.get(), sel.get(), nullptr, M, c.C));
    OP("rmsnorm fwd", mc::rmsnorm_forward(hf.get(), rstd_f.get(), s_sel.get(), P(m.lnf), M, c.C, eps));
    linear_fwd("gemm fwd lm head", logits.get(), hf.get(), W(m.wte), M, c.V, c.C);
  };

  auto backward = [&]() {
    // The gradient buffer is not cleared as a whole: every matrix's gradient is written by its dW product
    // (the tied embedding's first, by the LM head, then the embedding backward adds to it); only the norm
    // weights, whose backward accumulates, are zeroed: one span per layer.
    OP("zero norm grads", {
      for (const Layer& y : m.layers) mc::memset_device(G(y.norms), 0, y.norms.n * 4);
      mc::memset_device(G(m.lnf), 0, m.lnf.n * 4);
    });
    // Loss and dlogits in place (bf16), normalised by the token count.
    OP("cross-entropy fwd+bwd",
       mc::cross_entropy_forward_backward(losses.get(), logits.get(), logits.get(), sel_targets.get(),
                                          sel_weights.get(), -100, 1.0f / static_cast<float>(N), M, c.V));
    OP("loss sum", mc::sum(loss_sum.get(), losses.get(), M));
    linear_dw("gemm dw lm head", G(m.wte), logits.get(), hf.get(), M, c.V, c.C);
    linear_dx("gemm dx lm head", dh.get(), logits.get(), W(m.wte), M, c.V, c.C, false);
    OP("rmsnorm bwd", mc::rmsnorm_backward(ds_sel.get(), G(m.lnf), dh.get(), s_sel.get(), P(m.lnf), rstd_f.get(), M, c.C));
    // Back to every token: the head's rows' gradients, zero elsewhere.
    OP("scatter head rows",
       mc::moe_unpermute(ds.get(), ds_sel.get(), inv_offsets.get(), inv_rows.get(), nullptr, N, c.C));
    for (int64_t l = c.L - 1; l >= 0; --l) {
      const Layer& y = m.layers[l];
      Acts& A = acts[l];
      // ds: gradient w.r.t. s_{l+1} = s_mid + mlp.
      linear_dw("gemm dw fc2", G(y.w2), ds.get(), A.a.get(), N, c.C, c.F);
      linear_dx("gemm dx fc2", da.get(), ds.get(), W(y.w2), N, c.C, c.F, false);
      OP("swiglu bwd", mc::swiglu_backward(dgu.get(), A.gu.get(), da.get(), N, c.F));
      linear_dw("gemm dw fc1", G(y.w1), dgu.get(), A.h2.get(), N, 2 * c.F, c.C);
      linear_dx("gemm dx fc1", dh.get(), dgu.get(), W(y.w1), N, 2 * c.F, c.C, false);
      // Norm 2 backward plus the residual path: ds_mid = d(s_mid).
      OP("rmsnorm+residual bwd", mc::rmsnorm_backward(ds_mid.get(), G(y.ln2), dh.get(), A.s_mid.get(), P(y.ln2),
                                                       A.rstd2.get(), N, c.C, ds.get()));
      linear_dw("gemm dw o", G(y.wo), ds_mid.get(), A.o.get(), N, c.C, HD);
      linear_dx("gemm dx o", d_o.get(), ds_mid.get(), W(y.wo), N, c.C, HD, false);
      prof.run("attention bwd", 10.0 * c.B * c.T * c.T * c.H * c.D, [&] {
        mc::attention_backward(dq.get(), dk.get(), dv.get(), d_o.get(), A.q.get(), A.k.get(), A.v.get(), A.o.get(),
                               A.lse.get(), c.B, c.T, c.H, c.K, c.D, bidir, scale);
      });
      OP("qk-norm+rope bwd",
         mc::qkv_norm_rope_backward(dqkv.get(), G(y.qn), G(y.kn), dq.get(), dk.get(), dv.get(), A.qkv.get(), P(y.qn),
                                    P(y.kn), A.rstd_q.get(), A.rstd_k.get(), dpos.get(), dcos.get(), dsin.get(), N,
                                    c.H, c.K, c.D));
      linear_dw("gemm dw qkv", G(y.wqkv), dqkv.get(), A.h1.get(), N, HD + 2 * KD, c.C);
      linear_dx("gemm dx qkv", dh.get(), dqkv.get(), W(y.wqkv), N, HD + 2 * KD, c.C, false);
      // Norm 1 backward plus the residual path from s_mid: the gradient w.r.t. s_l.
      OP("rmsnorm+residual bwd", mc::rmsnorm_backward(ds.get(), G(y.ln1), dh.get(), A.s.get(), P(y.ln1),
                                                       A.rstd1.get(), N, c.C, ds_mid.get()));
    }
    OP("embedding bwd", mc::embedding_backward(G(m.wte), nullptr, ds.get(), tokens.get(), 0, c.V, nullptr, N, c.C));
  };

  megadlm::AdamWParams hp;
  hp.lr = 3e-4f, hp.beta2 = 0.95f, hp.weight_decay = 0.1f;
  auto optimizer = [&](int64_t step) {
    hp.step = step;
    OP("adamw", mc::adamw_step(master.get(), grad.get(), adam_m.get(), adam_v.get(), m.total, hp, w.get()));
  };

  Timer tf, tb, to;
  double f_ms = 0, b_ms = 0, o_ms = 0;
  for (int step = 1; step <= c.warmup + c.steps; ++step) {
    draw_batch();
    tf.start();
    forward();
    const double f = tf.stop_ms();
    tb.start();
    backward();
    const double b = tb.stop_ms();
    to.start();
    optimizer(step);
    const double o = to.stop_ms();
    double loss = 0;
    mc::copy_to_host(&loss, loss_sum.get(), sizeof(double));
    MEGADLM_CHECK(std::isfinite(loss), "bench_dlm_step: the loss is not finite at step ", step);
    std::printf("step %d: loss %.4f  forward %.1f ms  backward %.1f ms  adamw %.1f ms%s\n", step, loss / N, f, b, o,
                step <= c.warmup ? "  (warm-up)" : "");
    if (step > c.warmup) f_ms += f, b_ms += b, o_ms += o, head_rows_total += M;
  }
  mc::synchronize();
  const double step_ms = (f_ms + b_ms + o_ms) / c.steps;
  const double tok_s = N / (step_ms * 1e-3);
  // FLOPs of a step as run: 6 x non-embedding parameters per token, 6 x the LM head per row it runs on,
  // and attention (QK^T and PV: 4 T H D per layer forward, x3 with the backward; bidirectional).
  const double head_rows = static_cast<double>(head_rows_total) / c.steps;
  const double step_flops = 6.0 * static_cast<double>(m.total - embed) * N + 6.0 * static_cast<double>(embed) * head_rows +
                            12.0 * c.L * c.T * c.H * c.D * N;
  const double tflops = step_flops / (step_ms * 1e-3) / 1e12;
  std::printf("output layer on %.0f of %lld rows a step (%s)\n", head_rows, (long long)N,
              c.head_all_rows ? "every token: --head-all-rows" : "the tokens with a loss");
  std::printf("RESULT megadlm_cuda: %.1f ms/step (forward %.1f, backward %.1f, adamw %.1f), %.0f tokens/s, "
              "%.1f TFLOP/s run, MFU %.1f%% of the measured bf16 GEMM rate (%.1f TFLOP/s)\n",
              step_ms, f_ms / c.steps, b_ms / c.steps, o_ms / c.steps, tok_s, tflops, 100.0 * tflops / peak, peak);

  if (c.profile) {  // one more step, every op between events (they add small gaps)
    draw_batch();
    prof.on = true;
    forward(), backward(), optimizer(c.warmup + c.steps + 1);
    prof.on = false;
    prof.report();
  }

  // Diagnosis: one layer's attention forward and backward alone, through each implementation.
  std::vector<mc::AttentionImpl> impls = {mc::AttentionImpl::Gemm, mc::AttentionImpl::Flash};
  if (mc::attention_cudnn_compiled()) impls.insert(impls.begin(), mc::AttentionImpl::Cudnn);
  for (mc::AttentionImpl impl : impls) {
    mc::set_attention_impl(impl);
    Acts& A = acts[0];
    // One untimed call each way first: cuDNN builds its graphs and cuBLASLt picks algorithms on first use.
    mc::attention_forward(A.o.get(), A.lse.get(), A.q.get(), A.k.get(), A.v.get(), c.B, c.T, c.H, c.K, c.D, bidir, scale);
    mc::attention_backward(dq.get(), dk.get(), dv.get(), d_o.get(), A.q.get(), A.k.get(), A.v.get(), A.o.get(),
                           A.lse.get(), c.B, c.T, c.H, c.K, c.D, bidir, scale);
    Timer t;
    t.start();
    mc::attention_forward(A.o.get(), A.lse.get(), A.q.get(), A.k.get(), A.v.get(), c.B, c.T, c.H, c.K, c.D, bidir, scale);
    const double af = t.stop_ms();
    t.start();
    mc::attention_backward(dq.get(), dk.get(), dv.get(), d_o.get(), A.q.get(), A.k.get(), A.v.get(), A.o.get(),
                           A.lse.get(), c.B, c.T, c.H, c.K, c.D, bidir, scale);
    const double ab = t.stop_ms();
    const double fl = 4.0 * c.B * c.T * c.T * c.H * c.D;
    std::printf("attention %s (one layer): forward %.2f ms (%.1f TFLOP/s), backward %.2f ms (%.1f TFLOP/s); "
                "x%lld layers = %.0f ms per step\n",
                impl == mc::AttentionImpl::Cudnn  ? "cuDNN fused SDPA"
                : impl == mc::AttentionImpl::Gemm ? "cuBLASLt"
                                                  : "flash (CUDA cores)",
                af, fl / (af * 1e-3) / 1e12, ab,
                2.5 * fl / (ab * 1e-3) / 1e12, (long long)c.L, (af + ab) * c.L);
  }
  mc::set_attention_impl(mc::AttentionImpl::Auto);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_dlm_step: %s\n", e.what());
  return 1;
}
