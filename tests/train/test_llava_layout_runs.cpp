// pretrain_difflm --model-type llava under mpirun against the single process (tests/layout_runs.h), both
// backbones, 20 losses each (the first within 1e-6 relative, every one within 1e-4):
// - dp2, and dp2 with the distributed optimizer: each rank feeds the images of its own micro-batches;
//   the single process resumed from the dp2 run's iteration-10 checkpoint continues its losses; with a
//   part frozen (gpt: the tower, difflm: the language model) the distributed optimizer's run follows the
//   single process's and leaves the frozen parameters bit for bit.
// - pp2 (2 layers, 4 micro-batches a step, so the first stage's 1F1B has two in flight and recomputes
//   each forward after a later micro-batch's): the tower and projector on the first stage, each
//   micro-batch's forwards with its own images; the validation losses (within 1e-6) and the parameters
//   after 20 steps agree too (within 1e-5 of their scale: the tower's would not with another
//   micro-batch's images in the recomputed forward before a backward, where the losses would); the single
//   process resumed from the pp2 run's iteration-10 checkpoint, and pp2 resumed from the single
//   process's, continue the losses. And gpt with the tower and the language model frozen.
// - tp2, tp2 with --sequence-parallel, and tp2 x dp2: the tower's heads and MLP split over the tp ranks,
//   the mlp2x_gelu projector column- then row-parallel (gpt) or the linear one replicated (difflm); the
//   parameters after 20 steps agree too; the single process resumed from the tp2 run's checkpoint, and
//   tp2 from the single process's, continue the losses.
// Skipped without mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bert_corpus.h"  // set_flag
#include "checkpoint/safetensors.h"
#include "layout_runs.h"
#include "llava_data.h"

using namespace megadlm;

namespace {

// The tests' LLaVA flags for backbone `lm` without the program's name (train_on_ranks gives it): 20 steps,
// saved at 10 and 20.
std::vector<std::string> run_flags(const std::string& data, const std::string& lm) {
  std::vector<std::string> flags = test::llava_flags(data, lm);
  flags.erase(flags.begin());
  return test::plus(flags, {"--train-iters", "20", "--save-interval", "10"});
}

// The largest difference between the tensors of two runs' iteration-20 checkpoints whose names start
// with `prefix`, relative to the largest magnitude among those tensors in `ref` (not per tensor: the
// key biases have no gradient, so AdamW turns the rounding noise of theirs into steps of the learning
// rate's size about values near 0).
double max_param_difference(const std::string& ref, const std::string& got, const std::string& prefix) {
  SafetensorsFile a(ref + "/iter_0000020/model.safetensors"), b(got + "/iter_0000020/model.safetensors");
  double diff = 0, scale = 0;
  int tensors = 0;
  std::string worst;
  for (const std::string& name : a.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    EXPECT_TRUE(b.has(name)) << name;
    if (!b.has(name)) continue;
    const Tensor x = a.get(name), y = b.get(name);
    EXPECT_EQ(x.numel(), y.numel()) << name;
    for (int64_t i = 0; i < std::min(x.numel(), y.numel()); ++i) {
      const double d = std::fabs(static_cast<double>(x.data<float>()[i]) - y.data<float>()[i]);
      if (d > diff) {
        diff = d;
        worst = name + "[" + std::to_string(i) + "] " + std::to_string(x.data<float>()[i]) + " vs " +
                std::to_string(y.data<float>()[i]);
      }
      scale = std::max(scale, std::fabs(static_cast<double>(x.data<float>()[i])));
    }
    ++tensors;
  }
  EXPECT_GT(tensors, 0) << "no tensor named " << prefix << "*";
  if (diff > 0) std::printf("  largest difference in %s*: %s\n", prefix.c_str(), worst.c_str());
  return diff / std::max(scale, 1e-30);
}

// The validation losses of a run's metrics.jsonl (in its --save directory), in order.
std::vector<double> validation_losses(const std::string& save_dir) {
  std::vector<double> out;
  std::ifstream in(save_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) out.push_back(j["val_loss"].get<double>());
  }
  return out;
}

// The checkpoints hold the full tensors: each layout resumes from the other's. The single process
// resumed from tmp/<lm>_<name>'s iteration-10 checkpoint, and `name`'s layout (np 2, `layout` flags)
// resumed from tmp/<lm>_single's, continue tmp/<lm>_single's losses (10 steps, the first within 1e-6).
void resume_across_layouts(const std::string& mpirun, const test::TempDir& tmp, const std::string& lm,
                           const std::string& name, const std::vector<std::string>& flags,
                           const std::vector<std::string>& layout) {
  const auto want = test::losses_of(tmp / (lm + "_single"));
  for (const auto& [from, np] : {std::pair<std::string, int>{name, 1}, {"single", 2}}) {
    const std::string resumed = tmp / (lm + "_resumed_from_" + from);
    test::train_on_ranks(mpirun, np,
                         test::plus(test::plus(flags, np == 2 ? layout : std::vector<std::string>{}),
                                    {"--load", tmp / (lm + "_" + from + "/iter_0000010"), "--save", resumed}),
                         resumed + ".log");
    if (::testing::Test::HasFatalFailure()) return;
    test::expect_same_losses(want, test::losses_of(resumed), 10, 1e-6, lm + " resumed from " + from);
    test::report_losses(want, test::losses_of(resumed), "llava " + lm + " resumed from " + from);
  }
}

}  // namespace

TEST(LlavaLayoutRuns, DataParallelGivesTheSingleProcessLosses) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  MEGADLM_REQUIRE_MPIRUN(mpirun);
  test::TempDir tmp;
  const std::string data = test::make_llava_data(tmp, 24);
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    // Micro-batches of 2 in a global batch of 4: one micro-batch a rank under dp2.
    const std::vector<std::string> flags = run_flags(data, lm);
    const std::string ref = tmp / (lm + "_single");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", ref}), ref + ".log");
    if (HasFatalFailure()) return;
    const auto want = test::losses_of(ref);
    ASSERT_EQ(want.size(), 20u);
    for (const auto& [name, extra] : {std::pair<std::string, std::vector<std::string>>{"dp2", {}},
                                      {"dp2_distopt", {"--use-distributed-optimizer"}}}) {
      const std::string save = tmp / (lm + "_" + name);
      test::train_on_ranks(mpirun, 2, test::plus(test::plus(flags, extra), {"--save", save}), save + ".log");
      if (HasFatalFailure()) return;
      test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, lm + " " + name);
      test::report_losses(want, test::losses_of(save), "llava " + lm + " " + name);
    }
    const std::string resumed = tmp / (lm + "_resumed_from_dp2");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--load", tmp / (lm + "_dp2/iter_0000010"), "--save", resumed}),
                         resumed + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(want, test::losses_of(resumed), 10, 1e-6, lm + " resumed from dp2");
    test::report_losses(want, test::losses_of(resumed), "llava " + lm + " resumed from dp2");

    // The distributed optimizer's shards leave frozen parameters as AdamW does (gpt: the tower frozen;
    // difflm: the language model): the losses and the parameters follow the single process's, and the
    // frozen ones stay as initialised in both, bit for bit.
    const auto frozen = test::plus(flags, {lm == "gpt" ? "--freeze-vision-model" : "--freeze-language-model"});
    const std::string frozen_ref = tmp / (lm + "_single_frozen"), frozen_dist = tmp / (lm + "_dp2_distopt_frozen");
    test::train_on_ranks(mpirun, 1, test::plus(frozen, {"--save", frozen_ref}), frozen_ref + ".log");
    if (HasFatalFailure()) return;
    test::train_on_ranks(mpirun, 2, test::plus(frozen, {"--use-distributed-optimizer", "--save", frozen_dist}),
                         frozen_dist + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(test::losses_of(frozen_ref), test::losses_of(frozen_dist), 20, 1e-6,
                             lm + " frozen dp2_distopt");
    test::report_losses(test::losses_of(frozen_ref), test::losses_of(frozen_dist), "llava " + lm + " frozen dp2_distopt");
    EXPECT_LT(max_param_difference(frozen_ref, frozen_dist, ""), 1e-5);
    EXPECT_EQ(max_param_difference(frozen_ref, frozen_dist, lm == "gpt" ? "vision_tower." : "layers."), 0.0);
  }
}

TEST(LlavaLayoutRuns, PipelineParallelGivesTheSingleProcessLosses) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  MEGADLM_REQUIRE_MPIRUN(mpirun);
  test::TempDir tmp;
  const std::string data = test::make_llava_data(tmp, 24);
  // One layer a stage; 4 micro-batches of 2 a step; 4 of the 24 conversations held out for validation.
  const auto pp_flags = [&](const std::string& lm) {
    std::vector<std::string> f = test::set_flag(run_flags(data, lm), "--num-layers", "2");
    f = test::set_flag(test::set_flag(f, "--global-batch-size", "8"), "--split", "80,20,0");
    return test::plus(test::set_flag(f, "--eval-iters", "2"), {"--eval-interval", "10"});
  };
  // `flags` in one process (into tmp/<name>_single) and on two stages (tmp/<name>_pp2): the same 20 losses,
  // and parameters after 20 steps within 1e-5 of the single process's scale. The losses see the tower's
  // gradients only through later steps; its parameters show them directly (a backward through another
  // micro-batch's images moves them by about the learning rate).
  const auto single_and_pp2 = [&](const std::string& name, const std::vector<std::string>& flags) {
    const std::string ref = tmp / (name + "_single"), save = tmp / (name + "_pp2");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", ref}), ref + ".log");
    if (::testing::Test::HasFatalFailure()) return;
    test::train_on_ranks(mpirun, 2, test::plus(flags, {"--pipeline-model-parallel-size", "2", "--save", save}),
                         save + ".log");
    if (::testing::Test::HasFatalFailure()) return;
    const auto want = test::losses_of(ref);
    ASSERT_EQ(want.size(), 20u);
    test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, name + " pp2");
    test::report_losses(want, test::losses_of(save), "llava " + name + " pp2");
    // Validation (a forward of each micro-batch through the stages, with its images) at 0, 10 and 20.
    const std::vector<double> val = validation_losses(ref), val_pp2 = validation_losses(save);
    ASSERT_EQ(val.size(), 3u);
    ASSERT_EQ(val_pp2.size(), 3u);
    double val_diff = 0;
    for (size_t i = 0; i < val.size(); ++i) {
      EXPECT_LE(std::fabs(val_pp2[i] - val[i]), 1e-6 * std::fabs(val[i])) << "validation " << i;
      val_diff = std::max(val_diff, std::fabs(val_pp2[i] - val[i]) / std::fabs(val[i]));
    }
    std::printf("llava %s pp2: validation losses within %.3e\n", name.c_str(), val_diff);
    for (const std::string part : {"vision_tower.", "multi_modal_projector.", ""}) {
      const double diff = max_param_difference(ref, save, part);
      EXPECT_LT(diff, 1e-5) << part;
      std::printf("llava %s pp2: parameters %s* after 20 steps within %.3e of the single process's\n", name.c_str(),
                  part.c_str(), diff);
    }
  };
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    const std::vector<std::string> flags = pp_flags(lm);
    single_and_pp2(lm, flags);
    if (HasFatalFailure()) return;
    resume_across_layouts(mpirun, tmp, lm, "pp2", flags, {"--pipeline-model-parallel-size", "2"});
    if (HasFatalFailure()) return;
  }
  // Both parts frozen (only the projector trains): the first stage freezes the tower and its share of the
  // language model, the last stage all of its parameters.
  single_and_pp2("gpt_frozen", test::plus(pp_flags("gpt"), {"--freeze-vision-model", "--freeze-language-model"}));
}

TEST(LlavaLayoutRuns, TensorParallelGivesTheSingleProcessLosses) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  MEGADLM_REQUIRE_MPIRUN(mpirun);
  test::TempDir tmp;
  const std::string data = test::make_llava_data(tmp, 24);
  const std::vector<std::string> tp2 = {"--tensor-model-parallel-size", "2"};
  for (const auto& [lm, projector] : {std::pair<std::string, std::string>{"gpt", "mlp2x_gelu"}, {"difflm", "linear"}}) {
    SCOPED_TRACE(lm);
    const std::vector<std::string> flags = test::plus(run_flags(data, lm), {"--projector-type", projector});
    const std::string ref = tmp / (lm + "_single");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", ref}), ref + ".log");
    if (HasFatalFailure()) return;
    const auto want = test::losses_of(ref);
    ASSERT_EQ(want.size(), 20u);
    for (const auto& [name, np, layout] :
         {std::tuple<std::string, int, std::vector<std::string>>{"tp2", 2, tp2},
          {"tp2_sp", 2, test::plus(tp2, {"--sequence-parallel"})},
          {"tp2_dp2", 4, test::plus(tp2, {"--use-distributed-optimizer"})}}) {
      const std::string save = tmp / (lm + "_" + name);
      test::train_on_ranks(mpirun, np, test::plus(test::plus(flags, layout), {"--save", save}), save + ".log");
      if (HasFatalFailure()) return;
      test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, lm + " " + name);
      test::report_losses(want, test::losses_of(save), "llava " + lm + " " + name);
      // Within 1e-4 of their scale: the tp ranks' partial sums round differently, and AdamW's division by
      // sqrt(v) carries a small gradient's relative rounding into its step; a wrong or missing gradient
      // moves a parameter by about the learning rate (3e-3, some 5e-2 of the scale) within a few steps.
      for (const std::string part : {"vision_tower.", "multi_modal_projector.", ""}) {
        const double diff = max_param_difference(ref, save, part);
        EXPECT_LT(diff, 1e-4) << name << " " << part;
        std::printf("llava %s %s: parameters %s* after 20 steps within %.3e of the single process's\n", lm.c_str(),
                    name.c_str(), part.c_str(), diff);
      }
    }
    resume_across_layouts(mpirun, tmp, lm, "tp2", flags, tp2);
    if (HasFatalFailure()) return;
  }
}
