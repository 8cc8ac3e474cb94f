// Non-finite steps: a NaN or Inf loss or gradient norm skips the update with the
// parameters, the AdamW moments and the step count bitwise untouched, is logged and counted in
// metrics.jsonl, and --max-skipped-steps consecutive skips stop the run with an error, nothing saved
// after the last good checkpoint. NaNs are injected for real: into one gradient element through the
// trainer's after-backward hook (a transient fault), or into a weight (every step then has a NaN loss).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "child_process.h"
#include "core/error.h"
#include "core/parameters.h"
#include "optim/adamw.h"
#include "test_util.h"
#include "train/step_guard.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

using test::error_of;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using test::plus;

// A tiny difflm run on the counting dataset, with argv[0].
std::vector<std::string> flags(const std::string& data) {
  return plus({"pretrain_difflm"}, test::tiny_difflm_flags(data));
}

// Everything a step may change: parameters, both moments, the step count.
struct OptState {
  std::vector<float> params, m, v;
  int64_t steps = 0;
};

OptState snapshot(Trainer& t) {
  ParamStore& ps = t.model().params();
  AdamW& opt = t.optimizer();
  const int64_t n = ps.numel();
  OptState s;
  s.params.assign(ps.values(), ps.values() + n);
  s.m.assign(opt.exp_avg().data<float>(), opt.exp_avg().data<float>() + n);
  s.v.assign(opt.exp_avg_sq().data<float>(), opt.exp_avg_sq().data<float>() + n);
  s.steps = opt.steps_taken();
  return s;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(StepGuard, ClassifiesLossFirstThenGradNorm) {
  EXPECT_EQ(classify_step(2.5, 0.7), StepSkip::None);
  EXPECT_EQ(classify_step(0.0, 0.0), StepSkip::None);
  EXPECT_EQ(classify_step(kNaN, 0.7), StepSkip::NonFiniteLoss);
  EXPECT_EQ(classify_step(kInf, 0.7), StepSkip::NonFiniteLoss);
  EXPECT_EQ(classify_step(-kInf, kNaN), StepSkip::NonFiniteLoss);
  EXPECT_EQ(classify_step(2.5, kNaN), StepSkip::NonFiniteGradNorm);
  EXPECT_EQ(classify_step(2.5, kInf), StepSkip::NonFiniteGradNorm);
  EXPECT_STREQ(skip_reason(StepSkip::NonFiniteLoss), "non-finite loss");
  EXPECT_STREQ(skip_reason(StepSkip::NonFiniteGradNorm), "non-finite gradient norm");
}

TEST(StepGuard, CountsAndStopsOnlyOnConsecutiveSkips) {
  StepGuard g(3);
  g.record(StepSkip::NonFiniteLoss, 1, kNaN, kNaN);
  g.record(StepSkip::NonFiniteGradNorm, 2, 1.0, kInf);
  EXPECT_EQ(g.consecutive(), 2);
  g.record(StepSkip::None, 3, 1.0, 1.0);  // a good step resets the run of skips, not the total
  EXPECT_EQ(g.consecutive(), 0);
  EXPECT_EQ(g.total(), 2);
  g.record(StepSkip::NonFiniteLoss, 4, kNaN, kNaN);
  g.record(StepSkip::NonFiniteLoss, 5, kNaN, kNaN);
  const std::string msg = error_of([&] { g.record(StepSkip::NonFiniteLoss, 6, kNaN, kNaN); });
  EXPECT_NE(msg.find("iteration 6: 3 consecutive steps skipped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--max-skipped-steps 3"), std::string::npos) << msg;
  EXPECT_EQ(g.total(), 5);

  StepGuard unlimited(0);
  for (int i = 1; i <= 100; ++i) unlimited.record(StepSkip::NonFiniteLoss, i, kNaN, kNaN);
  EXPECT_EQ(unlimited.total(), 100);
}

// grad_norm() + apply() is step(), bit for bit; a NaN gradient gives a NaN norm (the caller then skips).
TEST(AdamWSplit, NormThenApplyIsBitwiseStepAndNaNShowsInTheNorm) {
  auto make = [](ParamStore& ps) {
    ps.add("w", {13, 7}, Init::Normal, 0.5f, true);
    ps.add("b", {11}, Init::Zeros, 0.0f, false);
    ps.finalize();
    const std::vector<float> v = test::random_vector(ps.numel(), 21);
    std::copy(v.begin(), v.end(), ps.values());
  };
  ParamStore a, b;
  make(a);
  make(b);
  AdamWConfig cfg;
  cfg.clip_grad = 0.5f;  // the gradients below have norm > 0.5 on some steps: clipping is exercised
  AdamW oa(a, cfg), ob(b, cfg);
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = test::random_vector(a.numel(), 100 + step, -0.3f, 0.3f);
    std::copy(g.begin(), g.end(), a.grads());
    std::copy(g.begin(), g.end(), b.grads());
    const double na = oa.step(1e-2);
    const double nb = ob.grad_norm();
    ob.apply(1e-2, nb);
    EXPECT_EQ(na, nb);
    ASSERT_EQ(std::memcmp(a.values(), b.values(), a.numel() * 4), 0) << "step " << step;
    ASSERT_EQ(std::memcmp(oa.exp_avg().raw(), ob.exp_avg().raw(), a.numel() * 4), 0);
    ASSERT_EQ(std::memcmp(oa.exp_avg_sq().raw(), ob.exp_avg_sq().raw(), a.numel() * 4), 0);
  }
  b.grads()[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ob.grad_norm()));
  b.grads()[17] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(ob.grad_norm()));
}

// A NaN in one gradient element at iteration 3: that step is skipped with everything bitwise as it
// was, counted and logged in metrics.jsonl; the next steps train normally.
TEST(NonFiniteSteps, PoisonedGradientSkipsTheUpdateAndTrainingGoesOn) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "ckpt";
  Trainer t(test::parse_flags(plus(flags(data), {"--train-iters", "5", "--save", save})));
  std::vector<OptState> before(7);  // state seen by the hook of iteration i = the state after i - 1
  t.set_after_backward_hook([&](int64_t it, Trainer& tr) {
    before[static_cast<size_t>(it)] = snapshot(tr);
    if (it == 3) tr.model().params().grads()[tr.model().params().numel() / 2] = std::numeric_limits<float>::quiet_NaN();
  });
  EXPECT_EQ(t.run(), 5);
  const OptState after = snapshot(t);
  EXPECT_EQ(t.skipped_steps(), 1);
  // Iteration 3 changed nothing, iterations 2 and 4 did (so the comparison can fail).
  EXPECT_TRUE(bitwise_equal(before[4].params, before[3].params));
  EXPECT_TRUE(bitwise_equal(before[4].m, before[3].m));
  EXPECT_TRUE(bitwise_equal(before[4].v, before[3].v));
  EXPECT_EQ(before[4].steps, before[3].steps);
  EXPECT_FALSE(bitwise_equal(before[3].params, before[2].params));
  EXPECT_FALSE(bitwise_equal(after.params, before[4].params));
  EXPECT_EQ(before[3].steps, 2);
  EXPECT_EQ(after.steps, 4);  // 5 iterations, one skipped: bias correction counts updates
  for (float x : after.params) ASSERT_TRUE(std::isfinite(x));

  const auto lines = test::training_lines(save + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  const int64_t want_skipped[] = {0, 0, 1, 1, 1};
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["skipped_steps"].get<int64_t>(), want_skipped[i]) << "iteration " << i + 1;
    EXPECT_EQ(lines[i]["grad_norm"].get<double>() < 0, i == 2) << "iteration " << i + 1;  // -1: not finite
  }
}

// A NaN weight makes every loss NaN: after --max-skipped-steps in a row the run stops with an Error,
// and the last good checkpoint stays the latest, byte for byte.
TEST(NonFiniteSteps, ConsecutiveSkipsStopTheRunAndKeepTheLastGoodCheckpoint) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "ckpt";
  test::run_training(flags(data), {"--train-iters", "2", "--save", save});
  const std::string good = resolve_checkpoint_dir(save);
  ASSERT_EQ(good, save + "/iter_0000002");
  const uint64_t model_sum = file_checksum(good + "/model.safetensors");
  const uint64_t opt_sum = file_checksum(good + "/optimizer.safetensors");
  const auto entries = test::entries_of(save);

  for (const bool periodic_saves : {false, true}) {
    SCOPED_TRACE(periodic_saves ? "--save-interval 1" : "save at the end only");
    std::vector<std::string> f = plus(flags(data), {"--train-iters", "20", "--load", save, "--save", save,
                                                    "--max-skipped-steps", "3"});
    if (periodic_saves) f = plus(f, {"--save-interval", "1"});
    Trainer t(test::parse_flags(f));
    t.model().params().values()[5] = std::numeric_limits<float>::quiet_NaN();  // in memory only
    const std::string msg = error_of([&] { t.run(); });
    if (!periodic_saves) {
      EXPECT_NE(msg.find("iteration 5: 3 consecutive steps skipped"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--max-skipped-steps 3"), std::string::npos) << msg;
      EXPECT_EQ(t.skipped_steps(), 3);
    } else {
      // The skipped iteration 3 would be saved with the weights it left as they were, but those hold a
      // NaN: the save refuses, naming the parameter, rather than replace the last good checkpoint.
      EXPECT_NE(msg.find("not saving the checkpoint of iteration 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + t.model().params().info(0).name + "'"), std::string::npos) << msg;
      EXPECT_EQ(t.skipped_steps(), 1);
    }
    EXPECT_EQ(resolve_checkpoint_dir(save), good);
    EXPECT_EQ(test::entries_of(save), entries);  // no new (or half-written) directory
    EXPECT_EQ(file_checksum(good + "/model.safetensors"), model_sum);
    EXPECT_EQ(file_checksum(good + "/optimizer.safetensors"), opt_sum);
  }
}

// The same through the program: a checkpoint whose weights hold a NaN makes every step non-finite;
// pretrain_difflm exits with status 1 and the --max-skipped-steps message.
TEST(NonFiniteSteps, ProgramExitsNonZeroAfterMaxSkippedSteps) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "ckpt";
  {
    Trainer t(test::parse_flags(plus(flags(data), {"--train-iters", "1", "--save", save})));
    t.run();
    t.model().params().values()[0] = std::numeric_limits<float>::quiet_NaN();
    CheckpointState st = read_checkpoint_state(resolve_checkpoint_dir(save));
    save_checkpoint(save, t.model(), &t.optimizer(), st);  // the library's writer does not look at values
  }
  const uint64_t sum = file_checksum(save + "/iter_0000001/model.safetensors");
  const std::vector<std::string> f = flags(data);
  const auto r = test::run_binary("pretrain_difflm",
                                  plus(std::vector<std::string>(f.begin() + 1, f.end()),  // without argv[0]
                                       {"--train-iters", "50", "--load", save, "--save", save, "--max-skipped-steps", "4"}),
                                  tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("iteration 5: 4 consecutive steps skipped for a non-finite loss or gradient norm "
                          "(--max-skipped-steps 4)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("iteration 2: non-finite loss"), std::string::npos) << r.output;  // the per-skip line
  EXPECT_EQ(resolve_checkpoint_dir(save), save + "/iter_0000001");
  EXPECT_EQ(file_checksum(save + "/iter_0000001/model.safetensors"), sum);
}
