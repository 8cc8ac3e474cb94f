// Intel AMX tiles: permission, configuration and the bf16 tile product (see amx.h).
#include "kernels/cpu/amx.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__) && defined(__linux__)
#define MEGADLM_HAVE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace megadlm::cpu::amx {

namespace {

std::atomic<bool> g_enabled{true};

#if defined(MEGADLM_HAVE_AMX)

// CPUID leaf 7, sub-leaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 22)) && (d & (1u << 24));
}

// Linux keeps the tile data (state component 18) out of a process until it asks for it.
bool os_grants_tile_data() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Palette 1 with all eight tiles 16 rows x 64 bytes: C tiles 0-3 (16 x 16 fp32), A tiles 4-5 (16 rows x
// 16 bf16 pairs), B tiles 6-7 (16 pairs x 16 words).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig& tile_config() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  return config;
}

#endif

}  // namespace

bool available() {
#if defined(MEGADLM_HAVE_AMX)
  static const bool ok = [] {
    const char* env = std::getenv("MEGADLM_AMX");
    const std::string v = env ? env : "";
    MEGADLM_CHECK(v.empty() || v == "0" || v == "1", "MEGADLM_AMX: expected 0 or 1, got '", v, "'");
    if (v == "0") return false;
    return cpu_has_amx_bf16() && os_grants_tile_data();
  }();
  return ok;
#else
  return false;
#endif
}

bool enabled() { return available() && g_enabled.load(std::memory_order_relaxed); }

bool set_enabled(bool on) { return g_enabled.exchange(on); }

#if defined(MEGADLM_HAVE_AMX)

void configure() { _tile_loadconfig(&tile_config()); }

void release() { _tile_release(); }

void tile_product(float* C, int64_t ldc, const uint16_t* A, int64_t lda, const uint32_t* B, int64_t ldb, int64_t rows,
                  int64_t kp, int64_t W, bool accumulate, float mul) {
  MEGADLM_CHECK(rows % 32 == 0 && W % 32 == 0 && kp % 16 == 0, "amx::tile_product: rows = ", rows, " and W = ", W,
                " must be multiples of 32 and kp = ", kp, " of 16");
  const int64_t cs = ldc * 4, as = lda * 2, bs = ldb * 4;  // tile row strides in bytes
  // 32 x 32 blocks of C, each four 16 x 16 accumulator tiles fed by two A and two B tiles per 16 pairs.
  for (int64_t r0 = 0; r0 < rows; r0 += 32) {
    for (int64_t c0 = 0; c0 < W; c0 += 32) {
      float* c = C + r0 * ldc + c0;
      if (accumulate) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, c + 16 * ldc, cs);
        _tile_loadd(3, c + 16 * ldc + 16, cs);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t p0 = 0; p0 < kp; p0 += 16) {
        const uint16_t* a = A + r0 * lda + 2 * p0;
        const uint32_t* b = B + p0 * ldb + c0;
        _tile_loadd(4, a, as);
        _tile_loadd(5, a + 16 * lda, as);
        _tile_loadd(6, b, bs);
        _tile_loadd(7, b + 16, bs);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, cs);
      _tile_stored(1, c + 16, cs);
      _tile_stored(2, c + 16 * ldc, cs);
      _tile_stored(3, c + 16 * ldc + 16, cs);
      if (!accumulate && mul != 1.0f) {
        const __m512 m = _mm512_set1_ps(mul);
        for (int64_t r = 0; r < 32; ++r) {
          float* row = c + r * ldc;
          _mm512_storeu_ps(row, _mm512_mul_ps(_mm512_loadu_ps(row), m));
          _mm512_storeu_ps(row + 16, _mm512_mul_ps(_mm512_loadu_ps(row + 16), m));
        }
      }
    }
  }
}

#else

void configure() { fail("amx::configure: this build has no AMX tile code (amx::available() is false)"); }

void release() {}

void tile_product(float*, int64_t, const uint16_t*, int64_t, const uint32_t*, int64_t, int64_t, int64_t, int64_t, bool,
                  float) {
  fail("amx::tile_product: this build has no AMX tile code (amx::available() is false)");
}

#endif

}  // namespace megadlm::cpu::amx
