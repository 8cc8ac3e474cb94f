// Attention forward and backward, fp32 kernel (attention.h) against the bf16-operand kernel
// (attention_bf16.h), at the shapes of our GPT-2 runs: gpt2-small DLM (B=8, T=256, H=K=6, D=64) and
// gpt2-124m (B=4, T=256, H=K=12, D=64), each causal and bidirectional. Inputs are the same bf16 values
// for both (the fp32 kernel gets them widened). Each time is the best of N calls after one warm-up. The
// bf16 backward runs its automatic schedule (fused at these shapes) and, for comparison, the two passes.
// Where the CPU has AMX, the bf16 kernel is timed twice: with its AMX tile products (the default) and with
// AVX512-BF16's vdpbf16ps (amx::set_enabled(false), as MEGADLM_AMX=0 does).
//
// Usage: OMP_NUM_THREADS=2 chrt -f 10 bench_attention_bf16 [N]   (N defaults to 10)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "core/philox.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"

using namespace megadlm;
using namespace megadlm::cpu;

namespace {

double best_ms(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: page faults, caches
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// n values uniform in [-1, 1), rounded to bf16: the bf16 operand and its fp32 widening.
void random_bf16(int64_t n, uint64_t seed, std::vector<bf16_t>* bits, std::vector<float>* wide) {
  CounterRng rng(seed, RngPurpose::Test);
  bits->resize(n);
  wide->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*bits)[i].bits = f32_to_bf16(2.0f * rng.uniform(i >> 2, 0, static_cast<int>(i & 3)) - 1.0f);
    (*wide)[i] = bf16_to_f32((*bits)[i].bits);
  }
}

struct Case {
  const char* name;
  int64_t B, T, H, D;
  MaskType mask;
};

void run(const Case& c, int reps, const char* products) {
  const int64_t B = c.B, T = c.T, H = c.H, K = c.H, D = c.D, nq = B * T * H * D, nkv = B * T * K * D;
  std::vector<bf16_t> q16, k16, v16, do16;
  std::vector<float> q, k, v, dout;
  random_bf16(nq, 1, &q16, &q);
  random_bf16(nkv, 2, &k16, &k);
  random_bf16(nkv, 3, &v16, &v);
  random_bf16(nq, 4, &do16, &dout);
  std::vector<float> out(nq), lse(B * H * T), dq(nq), dk(nkv), dv(nkv);
  std::vector<bf16_t> out16(nq);
  const AttentionMask mask{c.mask, 0, nullptr};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  const double f32_fwd = best_ms([&] {
    attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, K, D, mask, scale);
  }, reps);
  const double f32_bwd = best_ms([&] {
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                       lse.data(), B, T, H, K, D, mask, scale);
  }, reps);
  const double bf_fwd = best_ms([&] {
    attention_forward_bf16(out.data(), lse.data(), q16.data(), k16.data(), v16.data(), B, T, H, K, D, mask, scale);
  }, reps);
  for (int64_t i = 0; i < nq; ++i) out16[i].bits = f32_to_bf16(out[i]);
  auto bf_backward = [&](AttentionBackwardSchedule schedule) {
    return best_ms([&] {
      attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q16.data(), k16.data(), v16.data(),
                              out16.data(), lse.data(), B, T, H, K, D, mask, scale, schedule);
    }, reps);
  };
  const double bf_bwd = bf_backward(AttentionBackwardSchedule::Auto);
  const double bf_bwd2 = bf_backward(AttentionBackwardSchedule::TwoPass);
  std::printf("%-11s B=%-2ld T=%ld H=%-2ld D=%ld %-6s %-11s | fwd %7.2f %7.2f  x%.2f | bwd %7.2f %7.2f  x%.2f "
              "(two-pass %7.2f) | f+b x%.2f\n",
              c.name, static_cast<long>(B), static_cast<long>(T), static_cast<long>(H), static_cast<long>(D),
              c.mask == MaskType::Causal ? "causal" : "bidir", products, f32_fwd, bf_fwd, f32_fwd / bf_fwd, f32_bwd,
              bf_bwd, f32_bwd / bf_bwd, bf_bwd2, (f32_fwd + f32_bwd) / (bf_fwd + bf_bwd));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  const char* native = attention_bf16_native() ? "AVX512-BF16" : "fp32 fallback";
  const bool amx = cpu::amx::available();
  std::printf("attention fp32 vs bf16 operands (%s%s), %d threads, best of %d, times in ms (fp32, bf16, speed-up)\n",
              amx ? "AMX tiles and " : "", native, omp_get_max_threads(), reps);
  const Case cases[] = {{"gpt2-small", 8, 256, 6, 64, MaskType::None},
                        {"gpt2-small", 8, 256, 6, 64, MaskType::Causal},
                        {"gpt2-124m", 4, 256, 12, 64, MaskType::None},
                        {"gpt2-124m", 4, 256, 12, 64, MaskType::Causal}};
  for (const Case& c : cases) {
    if (amx) {
      run(c, reps, "AMX");
      cpu::amx::set_enabled(false);  // the same case with vdpbf16ps, as MEGADLM_AMX=0 runs it
    }
    run(c, reps, native);
    cpu::amx::set_enabled(true);
  }
  return 0;
}
