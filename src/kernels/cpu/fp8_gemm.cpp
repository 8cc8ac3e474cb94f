#include "kernels/cpu/fp8_gemm.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm.h"

namespace megadlm::cpu {

namespace {
void dequantise(float* out, const uint8_t* codes, int64_t n, bool e5m2, float scale) {
  if (e5m2) cast_e5m2_to_f32(out, codes, n, scale);
  else cast_e4m3_to_f32(out, codes, n, scale);
}
}  // namespace

void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale, const uint8_t* B,
              bool b_e5m2, float b_scale, float beta, float* C) {
  MEGADLM_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_fp8: negative shape M=", M, " N=", N, " K=", K);
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(N * K));
  dequantise(a.data(), A, M * K, a_e5m2, a_scale);
  dequantise(b.data(), B, N * K, b_e5m2, b_scale);
  gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, beta, C, N);
}

void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) {
  constexpr int64_t kTile = 64;
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (R * C > (1 << 16))
  for (int64_t tr = 0; tr < tiles_r; ++tr)
    for (int64_t tc = 0; tc < tiles_c; ++tc) {
      const int64_t r1 = std::min(R, (tr + 1) * kTile), c1 = std::min(C, (tc + 1) * kTile);
      for (int64_t r = tr * kTile; r < r1; ++r)
        for (int64_t c = tc * kTile; c < c1; ++c) out[c * R + r] = in[r * C + c];
    }
}

}  // namespace megadlm::cpu
