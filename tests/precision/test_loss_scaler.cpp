// The fp16 loss scaler's state machine (Megatron's DynamicGradScaler semantics) and its unscale/check.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/backend.h"
#include "optim/loss_scaler.h"

namespace megadlm {
namespace {

LossScalerConfig dynamic(double initial, double min_scale, int64_t window, int64_t hysteresis) {
  LossScalerConfig c;
  c.initial_scale = initial;
  c.min_scale = min_scale;
  c.window = window;
  c.hysteresis = hysteresis;
  return c;
}

TEST(LossScaler, DefaultsAreMegatrons) {
  LossScaler s{LossScalerConfig{}};
  EXPECT_EQ(s.scale(), 4294967296.0);
  EXPECT_EQ(s.hysteresis_tracker(), 2);
}

TEST(LossScaler, GrowsAfterWindowCleanSteps) {
  LossScaler s(dynamic(1024, 1, 3, 2));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.growth_tracker(), 2);
  s.update(false);  // third clean step in a row
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4096);
}

TEST(LossScaler, OverflowResetsGrowthAndBacksOffAfterHysteresis) {
  LossScaler s(dynamic(1024, 1, 3, 2));
  s.update(false);
  s.update(false);
  s.update(true);  // first overflow: hysteresis 2 -> 1, no backoff yet, growth restarts
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_tracker(), 1);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024) << "the overflow restarted the growth window";
  s.update(true);  // second overflow: hysteresis reaches 0 -> halve
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // hysteresis stays exhausted: every further overflow halves
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.hysteresis_tracker(), -1);
  // Growth refills the hysteresis.
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.hysteresis_tracker(), 2);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
}

TEST(LossScaler, NeverBelowMinScale) {
  LossScaler s(dynamic(8, 2, 1000, 1));
  s.update(true);
  EXPECT_EQ(s.scale(), 4);
  s.update(true);
  EXPECT_EQ(s.scale(), 2);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 2);
}

TEST(LossScaler, HysteresisOneBacksOffAtOnce) {
  LossScaler s(dynamic(4294967296.0, 1, 1000, 1));
  for (int i = 0; i < 16; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(LossScaler, StaticScaleNeverChanges) {
  LossScalerConfig c;
  c.dynamic = false;
  c.static_scale = 128;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 128);
  s.update(true);
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScaler, UnscaleAndCheck) {
  LossScaler s(dynamic(64, 1, 10, 2));
  std::vector<float> g = {64.0f, -128.0f, 0.5f, 0.0f, 3.0f};
  ASSERT_TRUE(s.unscale_and_check(cpu_backend(), g.data(), static_cast<int64_t>(g.size())));
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -2.0f);
  EXPECT_EQ(g[2], 0.5f / 64.0f);
  EXPECT_EQ(g[3], 0.0f);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> h(1000, 1.0f);
    h[777] = bad;
    EXPECT_FALSE(s.unscale_and_check(cpu_backend(), h.data(), static_cast<int64_t>(h.size()))) << bad;
  }
}

TEST(LossScaler, BadValuesNameTheFlag) {
  auto msg = [](const LossScalerConfig& c) {
    try {
      LossScaler s(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(dynamic(0, 1, 10, 2)).find("--initial-loss-scale"), std::string::npos);
  EXPECT_NE(msg(dynamic(8, 16, 10, 2)).find("--min-loss-scale"), std::string::npos);
  EXPECT_NE(msg(dynamic(8, 1, 0, 2)).find("--loss-scale-window"), std::string::npos);
  EXPECT_NE(msg(dynamic(8, 1, 10, 0)).find("--hysteresis"), std::string::npos);
}

}  // namespace
}  // namespace megadlm
