#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/device_memory.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

using namespace megadlm;

// Known-answer vectors published with Random123 (kat_vectors, philox4x32_10).
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (Philox4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (Philox4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (Philox4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, SameNumbersWhateverTheThreadCountOrSplit) {
  const int64_t n = 10007;
  CounterRng rng(1234, RngPurpose::DiffusionMask);
  std::vector<float> one(n), two(n), pieces(n);
  omp_set_num_threads(1);
  fill_uniform(one.data(), n, rng, 42, 0);
  omp_set_num_threads(2);
  fill_uniform(two.data(), n, rng, 42, 0);
  // The same range produced in three uneven pieces.
  fill_uniform(pieces.data(), 17, rng, 42, 0);
  fill_uniform(pieces.data() + 17, 5000, rng, 42, 17);
  fill_uniform(pieces.data() + 5017, n - 5017, rng, 42, 5017);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, pieces);
  double mean = 0;
  for (float x : one) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    mean += x;
  }
  EXPECT_NEAR(mean / n, 0.5, 0.01);
}

TEST(Philox, PurposesAndSeedsAreIndependentStreams) {
  CounterRng a(1, RngPurpose::DiffusionMask), b(1, RngPurpose::Dropout), c(2, RngPurpose::DiffusionMask);
  EXPECT_NE(a.bits(0, 0), b.bits(0, 0));
  EXPECT_NE(a.bits(0, 0), c.bits(0, 0));
  EXPECT_NE(a.bits(0, 0), a.bits(1, 0));
  EXPECT_NE(a.bits(0, 0), a.bits(0, 1));
  EXPECT_NE(a.bits(0, 0), a.bits(1ull << 32, 0));  // the high word of the index counts
}

TEST(Philox, NormalHasUnitMoments) {
  CounterRng rng(7, RngPurpose::Init);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(i, 0);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
}

// Every fp16 bit pattern decodes and re-encodes to itself (NaNs to a NaN).
TEST(DType, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "fp16 code " << h << " value " << f;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(5.96046448e-8f)), 5.96046448e-8f);  // smallest subnormal
}

TEST(DType, Fp8RoundTripsEveryValueAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    const float a = e4m3_to_f32(static_cast<uint8_t>(c));
    if (!std::isnan(a)) {
      EXPECT_EQ(f32_to_e4m3(a), (a == 0.0f && c == 0x80) ? 0x80 : c) << "e4m3 code " << c;
    }
    const float b = e5m2_to_f32(static_cast<uint8_t>(c));
    if (std::isfinite(b)) {
      EXPECT_EQ(f32_to_e5m2(b), c) << "e5m2 code " << c;
    }
  }
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1000.0f)), 448.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(-1e9f)), -448.0f);
  EXPECT_EQ(e5m2_to_f32(f32_to_e5m2(1e9f)), 57344.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(0.0f)), 0.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(NAN))));
  // Rounding to nearest: 1.0625 lies halfway between 1.0 and 1.125 in e4m3 -> even (1.0).
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.07f)), 1.125f);
  // Smallest e4m3 subnormal is 2^-9.
  EXPECT_EQ(e4m3_to_f32(1), std::ldexp(1.0f, -9));
}

TEST(Tensor, ViewsAndSlicesShareMemory) {
  Tensor t = Tensor::zeros({4, 3, 2}, DType::F32);
  Tensor row = t[2];
  EXPECT_EQ(row.shape(), (Shape{3, 2}));
  row.fill_(5.0f);
  EXPECT_EQ(t.data<float>()[2 * 6], 5.0f);
  EXPECT_EQ(t.data<float>()[1 * 6], 0.0f);
  Tensor flat = t.view({-1});
  EXPECT_EQ(flat.shape(), (Shape{24}));
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.data<float>(), t.data<float>() + 6);
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
}

TEST(Tensor, ErrorsNameTheValueAtFault) {
  Tensor t = Tensor::zeros({4, 3}, DType::F32);
  try {
    t.view({5, 3});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.slice(2, 5), Error);
  EXPECT_THROW(t.data<uint16_t>(), Error);
  EXPECT_THROW(Tensor::empty({2}, DType::F32, Device::CUDA), Error);
  EXPECT_THROW(dtype_from_name("float9"), Error);
}

// Host blocks: 64-byte aligned; from 4 MiB on, 2 MiB-aligned (whole huge pages) and usable throughout.
TEST(HostMemory, BigBlocksAreHugePageAligned) {
  for (size_t bytes : {size_t{0}, size_t{100}, size_t{4} << 20, (size_t{5} << 20) + 3}) {
    void* p = host_alloc_aligned(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    const size_t align = bytes >= (size_t{4} << 20) ? size_t{2} << 20 : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << bytes;
    if (bytes) std::memset(p, 0x5a, bytes);
    std::free(p);
  }
}

namespace {
// The "THPeligible" line of the /proc/self/smaps mapping that holds address a, or -1.
int thp_eligible(const void* a) {
  std::ifstream smaps("/proc/self/smaps");
  const auto x = reinterpret_cast<uintptr_t>(a);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = x >= lo && x < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}
}  // namespace

// Where the kernel gives transparent huge pages on advice (THP "always" or "madvise"), a big block is
// advised: its mapping is eligible, as an unadvised one is not under "madvise".
TEST(HostMemory, BigBlocksAreAdvisedForHugePages) {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  if (mode.find("[always]") == std::string::npos && mode.find("[madvise]") == std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off or absent here ('" << mode << "')";
  const size_t bytes = size_t{8} << 20;
  void* p = host_alloc_aligned(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  EXPECT_EQ(thp_eligible(p), 1);
  std::free(p);
}

TEST(Arena, SteadyStateMakesNoHeapAllocation) {
  Arena arena(1024);
  auto step = [&] {
    Tensor a = arena.tensor({100, 10});
    Tensor b = arena.tensor({37});
    Tensor c = arena.zeros({3, 3, 3});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 64, 0u);
    EXPECT_EQ(c.data<float>()[26], 0.0f);
    arena.reset();
  };
  step();  // overflows the initial 1 KiB and regrows
  const size_t after_first = arena.heap_allocations();
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(arena.heap_allocations(), after_first);
  EXPECT_GE(arena.capacity(), 4000u + 148u);
}

// A temporary that overflows only inside a marked region (freed by release before reset) still makes
// reset() regrow the block: the next step fits without a heap allocation.
TEST(Arena, OverflowFreedByReleaseStillRegrows) {
  Arena arena(4096);
  auto step = [&] {
    arena.tensor({512});  // 2 KiB, fits
    const size_t m = arena.mark();
    arena.tensor({4096});  // 16 KiB: overflows
    arena.release(m);
    arena.reset();
  };
  step();
  const size_t after_first = arena.heap_allocations();
  EXPECT_GE(arena.capacity(), 2048u + 16384u);
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(arena.heap_allocations(), after_first);
}

// Steps whose size creeps up (a diffusion step's masked rows vary) regrow the block once, then fit in
// its headroom: each new maximum does not free and re-map the whole block again.
TEST(Arena, SlowlyGrowingStepsRegrowOnce) {
  Arena arena(1024);
  auto step = [&](int64_t floats) {
    arena.tensor({floats});
    arena.reset();
  };
  step(100000);  // overflows the initial 1 KiB: one chunk, then the regrow
  const size_t after_first = arena.heap_allocations();
  for (int64_t n : {100100, 101000, 103000, 110000, 120000, 124000}) step(n);
  EXPECT_EQ(arena.heap_allocations(), after_first);
  EXPECT_EQ(arena.high_water(), size_t{124000} * 4);
  step(200000);  // beyond the headroom: served, then regrown again
  EXPECT_EQ(arena.heap_allocations(), after_first + 2);
  step(200000);
  EXPECT_EQ(arena.heap_allocations(), after_first + 2);
}

TEST(Arena, MarkAndRelease) {
  Arena arena(4096);
  arena.tensor({16});
  const size_t m = arena.mark();
  arena.tensor({100});
  arena.release(m);
  EXPECT_EQ(arena.used(), m);
}
