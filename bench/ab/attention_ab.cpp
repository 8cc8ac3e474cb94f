// Two builds of the attention kernels in one process, called alternately: the A/B comparison for a
// machine whose speed drifts from second to second (a shared machine's can move by up to 2x within
// minutes, so two benchmark runs a minute apart do not resolve a 5% change). run_attention_ab.sh builds
// the two shared objects (a git revision's kernels and the working tree's) and this driver; each is
// loaded with RTLD_LOCAL | RTLD_DEEPBIND, so both define the same symbols side by side. Per repetition
// each build runs bf16 forward, bf16 backward (automatic schedule), fp32 forward and fp32 backward, the
// two builds in alternating order; the report is each phase's median and minimum, and the median over
// repetitions of new / old of the calls made back to back (drift cancels in the pair).
// The driver is compiled with the working tree's headers: the two revisions must agree on the kernels'
// signatures and on AttentionMask.
// Legend: B batch, T sequence, H heads (= kv heads here), D head dim.
//
// Usage: attention_ab OLD.so NEW.so B T H D REPS [causal|none]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"

using namespace megadlm;
using namespace megadlm::cpu;

namespace {

using FwdBf16 = decltype(&attention_forward_bf16);
using BwdBf16 = decltype(&attention_backward_bf16);
using FwdF32 = decltype(&attention_forward);
using BwdF32 = decltype(&attention_backward);

struct Kernels {
  FwdBf16 fwd_bf16;
  BwdBf16 bwd_bf16;
  FwdF32 fwd_f32;
  BwdF32 bwd_f32;
};

void* symbol(void* lib, const char* path, const char* name) {
  void* p = dlsym(lib, name);
  if (!p) {
    std::fprintf(stderr, "attention_ab: %s has no %s\n", path, name);
    std::exit(1);
  }
  return p;
}

Kernels load(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) {
    std::fprintf(stderr, "attention_ab: %s\n", dlerror());
    std::exit(1);
  }
  // The mangled names of the four kernels (attention.h, attention_bf16.h).
  return Kernels{
      reinterpret_cast<FwdBf16>(symbol(lib, path, "_ZN7megadlm3cpu22attention_forward_bf16EPfS1_PKNS_6bf16_tES4_S4_lllllRKNS0_13AttentionMaskEf")),
      reinterpret_cast<BwdBf16>(symbol(lib, path, "_ZN7megadlm3cpu23attention_backward_bf16EPfS1_S1_PKfPKNS_6bf16_tES6_S6_S6_S3_lllllRKNS0_13AttentionMaskEfNS0_25AttentionBackwardScheduleE")),
      reinterpret_cast<FwdF32>(symbol(lib, path, "_ZN7megadlm3cpu17attention_forwardEPfS1_PKfS3_S3_lllllRKNS0_13AttentionMaskEf")),
      reinterpret_cast<BwdF32>(symbol(lib, path, "_ZN7megadlm3cpu18attention_backwardEPfS1_S1_PKfS3_S3_S3_S3_S3_lllllRKNS0_13AttentionMaskEf"))};
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: attention_ab OLD.so NEW.so B T H D REPS [causal|none]\n");
    return 2;
  }
  const Kernels builds[2] = {load(argv[1]), load(argv[2])};
  const int64_t B = std::atol(argv[3]), T = std::atol(argv[4]), H = std::atol(argv[5]), D = std::atol(argv[6]);
  const int reps = std::atoi(argv[7]);
  const std::string mask_name = argc > 8 ? argv[8] : "causal";
  if (B < 1 || T < 1 || H < 1 || D < 1 || reps < 2 || (mask_name != "causal" && mask_name != "none")) {
    std::fprintf(stderr, "attention_ab: B, T, H, D >= 1, REPS >= 2, mask causal or none\n");
    return 2;
  }
  AttentionMask mask;
  mask.type = mask_name == "none" ? MaskType::None : MaskType::Causal;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // q, k, v, dout [B, T, H, D]: random normal, the bf16 kernels get their bf16 roundings.
  const int64_t n = B * T * H * D;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), lse(B * H * T), dq(n), dk(n), dv(n);
  for (auto* x : {&q, &k, &v, &dout})
    for (float& y : *x) y = normal(gen);
  std::vector<bf16_t> qb(n), kb(n), vb(n), ob(n);
  for (int64_t i = 0; i < n; ++i) {
    qb[i].bits = f32_to_bf16(q[i]);
    kb[i].bits = f32_to_bf16(k[i]);
    vb[i].bits = f32_to_bf16(v[i]);
  }

  const char* phases[4] = {"bf16 forward", "bf16 backward", "fp32 forward", "fp32 backward"};
  std::vector<double> times[2][4];  // [build][phase], the first repetition (warm-up) left out
  for (int r = 0; r < reps; ++r)
    for (int turn = 0; turn < 2; ++turn) {
      const int id = (r + turn) % 2;  // old first on even repetitions, new first on odd ones
      const Kernels& kern = builds[id];
      double t[6];  // the four phases between t[0..1], t[2..3], t[3..4], t[4..5]
      t[0] = seconds();
      kern.fwd_bf16(out.data(), lse.data(), qb.data(), kb.data(), vb.data(), B, T, H, H, D, mask, scale);
      t[1] = seconds();
      for (int64_t i = 0; i < n; ++i) ob[i].bits = f32_to_bf16(out[i]);  // the backward's bf16 output, untimed
      t[2] = seconds();
      kern.bwd_bf16(dq.data(), dk.data(), dv.data(), dout.data(), qb.data(), kb.data(), vb.data(), ob.data(), lse.data(),
                    B, T, H, H, D, mask, scale, AttentionBackwardSchedule::Auto);
      t[3] = seconds();
      kern.fwd_f32(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, H, D, mask, scale);
      t[4] = seconds();
      kern.bwd_f32(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), B,
                   T, H, H, D, mask, scale);
      t[5] = seconds();
      if (r == 0) continue;
      times[id][0].push_back(t[1] - t[0]);
      for (int p = 1; p < 4; ++p) times[id][p].push_back(t[p + 2] - t[p + 1]);
    }

  std::printf("B=%ld T=%ld H=%ld D=%ld %s, %d repetitions\n", B, T, H, D, mask_name.c_str(), reps - 1);
  for (int p = 0; p < 4; ++p) {
    std::vector<double> ratio;
    for (size_t i = 0; i < times[0][p].size(); ++i) ratio.push_back(times[1][p][i] / times[0][p][i]);
    const auto& o = times[0][p];
    const auto& w = times[1][p];
    std::printf("  %-13s old median %7.2f ms, min %7.2f | new median %7.2f ms, min %7.2f | new/old paired %.3f\n",
                phases[p], 1e3 * median(o), 1e3 * *std::min_element(o.begin(), o.end()), 1e3 * median(w),
                1e3 * *std::min_element(w.begin(), w.end()), median(ratio));
  }
  return 0;
}
