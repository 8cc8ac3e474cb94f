#pragma once
// Intel AMX tiles for the CPU kernels that multiply small tiles themselves (the bf16 attention): whether
// this process may use them, and a bf16 tile product with fp32 accumulation.
//
// oneDNN's matmul uses AMX on its own; a kernel of ours that issues tile instructions needs three things
// besides a CPU with AMX-BF16: a build for it (-march=native on such a CPU defines __AMX_TILE__ and
// __AMX_BF16__), the kernel's permission for this process to hold the 8 KiB of tile data (Linux 5.16+,
// arch_prctl(ARCH_REQ_XCOMP_PERM), asked once here), and a tile configuration loaded on the calling
// thread. The configuration is per thread and oneDNN's own AMX kernels load theirs, so a caller loads
// ours (configure) in each thread before its tile products, after any oneDNN call on that thread, and
// releases the tiles (release) when done.
//
// Rounding: TDPBF16PS sums the pairs of a 16-pair tile row with an internal order and precision of its
// own, so its results differ from vdpbf16ps's (AVX512-BF16) at fp32 rounding level; they do not depend on
// which operand is which (C = A B and C^T = B^T A^T give the same bits), nor on the thread count.
#include <cstdint>

namespace megadlm::cpu::amx {

// True when tile products may run: built for AMX-BF16, the CPU has it, and the OS granted the tile data.
// Probed once. MEGADLM_AMX=0 in the environment turns AMX off for the whole process (1 or unset: on where
// available; anything else is an error naming the variable).
bool available();

// available(), unless turned off with set_enabled(false): the switch the kernels read at each call.
bool enabled();
// Turns the kernels' use of AMX on or off (on has no effect where it is not available); returns the
// previous setting. For tests and A/B measurements that run both paths in one process.
bool set_enabled(bool on);

// Loads the tile configuration tile_product needs into the calling thread's tile registers.
void configure();
// Returns the calling thread's tiles to their initial state.
void release();

// configure() on construction and release() at the end of the scope when `on` (a kernel's parallel
// region, on each of its threads); nothing when off.
class TileScope {
 public:
  explicit TileScope(bool on) : on_(on) {
    if (on_) configure();
  }
  ~TileScope() {
    if (on_) release();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  bool on_;
};

// C [rows, W] (fp32, row stride ldc) = mul * A B, or C += A B when `accumulate` (mul is then ignored):
//   - A [rows, 2*kp] bf16 bits, row stride lda elements: row r's reduction pairs (2p, 2p+1) adjacent;
//   - B [kp, W] 32-bit words, row stride ldb words, "VNNI" order: word (p, w) holds B[2p, w] in its low
//     half and B[2p+1, w] in its high half.
// rows and W must be multiples of 32, kp of 16; pointers need no alignment. configure() must have run on
// this thread since its last oneDNN call.
void tile_product(float* C, int64_t ldc, const uint16_t* A, int64_t lda, const uint32_t* B, int64_t ldb, int64_t rows,
                  int64_t kp, int64_t W, bool accumulate, float mul);

}  // namespace megadlm::cpu::amx
