// Kernel throughput at GPT-2 124M shapes (B*T = 4096 tokens, C = 768, V = 50304):
//   (1) GEMM GFLOP/s, fp32 and bf16, forward and the transposed backward products;
//   (2) attention forward + backward GFLOP/s, with its ratio to the best fp32 GEMM of the same run;
//   (3) fused cross-entropy throughput in tokens/s and GB/s.
// Each measurement: warm-up calls, then repeated timed calls, the median reported.
//
// Usage: OMP_NUM_THREADS=n bench_kernels [gemm] [attention] [ce] [--quick]
// (no section named = all three; --quick drops the LM-head shapes and uses fewer repetitions).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/philox.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gemm.h"

using namespace megadlm;
using namespace megadlm::cpu;

namespace {

int g_reps = 7;

// Median seconds of `reps` timed calls after `warmup` untimed ones. Slow calls (> 1 s) are repeated
// less, so the LM-head products keep the whole run to a few minutes.
double median_seconds(const std::function<void()>& fn, int warmup = 2) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  fn();
  double first = std::chrono::duration<double>(clock::now() - t0).count();
  for (int i = 1; i < warmup && first < 1.0; ++i) fn();
  const int reps = first > 1.0 ? 3 : g_reps;
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    t0 = clock::now();
    fn();
    t[i] = std::chrono::duration<double>(clock::now() - t0).count();
  }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

std::vector<float> random_floats(int64_t n, uint64_t seed, float amp) {
  std::vector<float> v(n);
  CounterRng rng(seed, RngPurpose::Test);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = amp * (2.0f * rng.uniform(i >> 2, 0, static_cast<int>(i & 3)) - 1.0f);
  return v;
}

struct GemmShape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
  bool big;  // LM head: skipped with --quick
};

// y = x W^T with W stored [out, in]: forward is NT, the input gradient NN, the weight gradient TN.
const GemmShape kGemmShapes[] = {
    {"qkv      fwd  x W^T", false, true, 4096, 2304, 768, false},
    {"qkv      dx   dy W", false, false, 4096, 768, 2304, false},
    {"qkv      dW   dy^T x", true, false, 2304, 768, 4096, false},
    {"proj     fwd  x W^T", false, true, 4096, 768, 768, false},
    {"proj     dW   dy^T x", true, false, 768, 768, 4096, false},
    {"fc       fwd  x W^T", false, true, 4096, 3072, 768, false},
    {"fc       dx   dy W", false, false, 4096, 768, 3072, false},
    {"fc       dW   dy^T x", true, false, 3072, 768, 4096, false},
    {"fc2      fwd  x W^T", false, true, 4096, 768, 3072, false},
    {"fc2      dx   dy W", false, false, 4096, 3072, 768, false},
    {"lm head  fwd  x E^T", false, true, 4096, 50304, 768, true},
    {"lm head  dx   dy E", false, false, 4096, 768, 50304, true},
};

double bench_gemms(bool quick) {
  std::printf("\n(1) GEMM  C[M,N] = op(A) op(B), FLOPs = 2*M*N*K, median of repeated calls\n");
  std::printf("%-22s %6s %6s %6s %12s %12s\n", "product", "M", "N", "K", "fp32 GF/s", "bf16 GF/s");
  double best_fp32 = 0.0;
  for (const GemmShape& s : kGemmShapes) {
    if (quick && s.big) continue;
    const int64_t a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
    const int64_t b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
    std::vector<float> A = random_floats(a_rows * a_cols, 1, 1.0f), Bm = random_floats(b_rows * b_cols, 2, 1.0f);
    std::vector<float> C(s.M * s.N);
    const double flops = 2.0 * s.M * s.N * s.K;
    const double t32 = median_seconds([&] {
      gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols, Bm.data(), b_cols, 0.0f, C.data(), s.N);
    });
    std::vector<uint16_t> A16(A.size()), B16(Bm.size());
    for (size_t i = 0; i < A.size(); ++i) A16[i] = f32_to_bf16(A[i]);
    for (size_t i = 0; i < Bm.size(); ++i) B16[i] = f32_to_bf16(Bm[i]);
    const double t16 = median_seconds([&] {
      gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A16.data(), a_cols, B16.data(), b_cols, 0.0f, C.data(), s.N);
    });
    best_fp32 = std::max(best_fp32, flops / t32 * 1e-9);
    std::printf("%-22s %6ld %6ld %6ld %12.1f %12.1f\n", s.name, static_cast<long>(s.M), static_cast<long>(s.N),
                static_cast<long>(s.K), flops / t32 * 1e-9, flops / t16 * 1e-9);
    std::fflush(stdout);
  }
  std::printf("best fp32 GEMM: %.1f GFLOP/s\n", best_fp32);
  if (!has_bf16_matmul())
    std::printf("bf16: oneDNN has no bf16 matmul on this CPU; the bf16 column is gemm_bf16's fallback (inputs "
                "widened to fp32, then the fp32 product)\n");
  return best_fp32;
}

void bench_attention(double best_gemm) {
  const int64_t H = 12, D = 64;
  std::printf("\n(2) attention, H = K = %ld, D = %ld, scale 1/sqrt(D)\n", static_cast<long>(H), static_cast<long>(D));
  std::printf("    FLOPs counted: fwd 4*B*H*T^2*D (QK^T and PV), bwd 10*B*H*T^2*D (= 2.5 x fwd: recomputed\n"
              "    QK^T, dO V^T, P^T dO, dS K, dS^T Q), both halved for causal; the kernel's extra work (S and\n"
              "    dP computed in both backward passes, exp) is not counted. ratio = fwd+bwd / best fp32 GEMM.\n");
  std::printf("%-6s %2s %5s %9s %9s %9s %11s %11s %11s %8s\n", "mask", "B", "T", "fwd ms", "bwd ms", "f+b ms",
              "fwd GF/s", "bwd GF/s", "f+b GF/s", "ratio");
  for (MaskType type : {MaskType::None, MaskType::Causal}) {
    for (int64_t T : {256, 1024, 2048}) {
      const int64_t B = std::clamp<int64_t>(4096 / T, 1, 4);
      const int64_t nq = B * T * H * D;
      std::vector<float> q = random_floats(nq, 3, 1.0f), k = random_floats(nq, 4, 1.0f);
      std::vector<float> v = random_floats(nq, 5, 1.0f), dout = random_floats(nq, 6, 1.0f);
      std::vector<float> out(nq), lse(B * H * T), dq(nq), dk(nq), dv(nq);
      const AttentionMask mask{type, 0, nullptr};
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      const double tf = median_seconds([&] {
        attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, H, D, mask, scale);
      });
      const double tb = median_seconds([&] {
        attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                           lse.data(), B, T, H, H, D, mask, scale);
      });
      const double half = type == MaskType::Causal ? 0.5 : 1.0;
      const double ff = 4.0 * B * H * T * T * D * half, fb = 10.0 * B * H * T * T * D * half;
      const double gf = (ff + fb) / (tf + tb) * 1e-9;
      std::printf("%-6s %2ld %5ld %9.2f %9.2f %9.2f %11.1f %11.1f %11.1f %7.0f%%\n",
                  type == MaskType::Causal ? "causal" : "none", static_cast<long>(B), static_cast<long>(T), tf * 1e3,
                  tb * 1e3, (tf + tb) * 1e3, ff / tf * 1e-9, fb / tb * 1e-9, gf,
                  best_gemm > 0 ? 100.0 * gf / best_gemm : 0.0);
      std::fflush(stdout);
    }
  }
}

void bench_cross_entropy() {
  const int64_t V = 50304;
  std::printf("\n(3) fused cross-entropy, V = %ld; bytes = logits read (+ dlogits written)\n", static_cast<long>(V));
  std::printf("%-22s %6s %12s %10s %9s\n", "variant", "N", "ms", "Mtok/s", "GB/s");
  for (int64_t N : {1024, 4096}) {
    std::vector<float> logits = random_floats(N * V, 7, 4.0f), dlogits(N * V), losses(N);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 7919) % V);
    struct Variant {
      const char* name;
      float* dl;
      double bytes;
    } variants[] = {{"loss only", nullptr, 4.0 * N * V}, {"loss + gradient", dlogits.data(), 8.0 * N * V}};
    for (const Variant& var : variants) {
      const double t = median_seconds([&] {
        cross_entropy_forward_backward(losses.data(), var.dl, logits.data(), targets.data(), nullptr, -100,
                                       1.0f / N, N, V);
      });
      std::printf("%-22s %6ld %12.2f %10.3f %9.1f\n", var.name, static_cast<long>(N), t * 1e3, N / t * 1e-6,
                  var.bytes / t * 1e-9);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool gemm_on = false, attn_on = false, ce_on = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "gemm") gemm_on = true;
    else if (a == "attention") attn_on = true;
    else if (a == "ce") ce_on = true;
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "unknown argument '%s'; usage: bench_kernels [gemm] [attention] [ce] [--quick]\n", argv[i]);
      return 2;
    }
  }
  if (!gemm_on && !attn_on && !ce_on) gemm_on = attn_on = ce_on = true;
  if (quick) g_reps = 3;
  std::printf("bench_kernels: %d OpenMP threads (set with OMP_NUM_THREADS)\n", omp_get_max_threads());
  double best = 0.0;
  // The attention ratio needs a GEMM reference from this run: measure the fp32 forward products at least.
  if (gemm_on) best = bench_gemms(quick);
  else if (attn_on) {
    std::vector<float> A = random_floats(4096 * 768, 1, 1.0f), Bm = random_floats(3072 * 768, 2, 1.0f);
    std::vector<float> C(4096 * 3072);
    const double t = median_seconds(
        [&] { gemm(false, true, 4096, 3072, 768, 1.0f, A.data(), 768, Bm.data(), 768, 0.0f, C.data(), 3072); });
    best = 2.0 * 4096 * 3072 * 768 / t * 1e-9;
    std::printf("fp32 GEMM reference (fc fwd 4096x3072x768): %.1f GFLOP/s\n", best);
  }
  if (attn_on) bench_attention(best);
  if (ce_on) bench_cross_entropy();
  return 0;
}
