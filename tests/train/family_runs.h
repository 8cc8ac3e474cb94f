#pragma once
// What the BERT and T5 training tests share: a field of a run's training lines, the mean of a range of
// them, the flags of a tiny T5 run on bert_corpus.h's data and vocabulary, the bitwise-resume check,
// bf16 against fp32, recomputation against none, and the layout runs against the single process
// (tests/layout_runs.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bert_corpus.h"
#include "checkpoint/native_checkpoint.h"
#include "layout_runs.h"
#include "test_util.h"
#include "train_fixture.h"

namespace megadlm::test {

// `name` of each training line of the metrics.jsonl in `save`.
inline std::vector<double> field(const std::string& save, const std::string& name) {
  std::vector<double> out;
  for (const auto& j : training_lines(save + "/metrics.jsonl")) out.push_back(j.at(name).get<double>());
  return out;
}

inline double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

// A hidden-32 T5 of 2 + 2 layers (4 heads, ffn 64, 8 buckets up to distance 32) on the WordPiece
// vocabulary with 10 sentinels: encoder 48 rows, decoder 16 (a text of 48 tokens needs 7 noise
// tokens in at most 2 spans: 10 target rows), 16 samples a step in micro-batches of 8, logged every step.
inline std::vector<std::string> t5_flags(const std::string& data, const std::string& vocab) {
  return {"--model-type", "t5", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
          "--ffn-hidden-size", "64", "--relative-attention-num-buckets", "8", "--relative-attention-max-distance",
          "32", "--encoder-seq-length", "48", "--decoder-seq-length", "16", "--vocab-extra-ids", "10",
          "--micro-batch-size", "8", "--global-batch-size", "16", "--lr", "3e-3", "--lr-decay-style", "constant",
          "--tokenizer-type", "BertWordPieceLowerCase", "--vocab-file", vocab, "--data-path", data, "--split",
          "95,5,0", "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "2", "--seed", "7"};
}

// A run of pretrain_difflm's flags in process (the trainer of the family).
using RunFlags = std::function<void(const std::vector<std::string>& flags, const std::vector<std::string>& extra)>;

// `flags` (with --train-iters `iters`) run through into dir/full, and into dir/part stopped at
// iteration `stop` (--exit-interval) then resumed: the losses and the last checkpoint's model and
// optimizer files are bitwise the same.
inline void expect_bitwise_resume(const RunFlags& run, const std::vector<std::string>& flags, const std::string& dir,
                                  int iters, int stop) {
  const auto f = plus(flags, {"--train-iters", std::to_string(iters)});
  const std::string full = dir + "/full", part = dir + "/part";
  run(f, {"--save", full});
  run(f, {"--save", part, "--exit-interval", std::to_string(stop)});
  run(f, {"--save", part, "--load", part});
  const auto a = field(full, "loss"), b = field(part, "loss");
  ASSERT_EQ(a.size(), static_cast<size_t>(iters));
  ASSERT_EQ(b.size(), static_cast<size_t>(iters));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "iteration " << i + 1;  // bitwise
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"})
    EXPECT_EQ(file_checksum(resolve_checkpoint_dir(full) + file), file_checksum(resolve_checkpoint_dir(part) + file)) << file;
}

// `flags` for `iters` steps in fp32 and under --bf16 --bf16-products (bf16 products on any CPU) into
// dir/fp32 and dir/bf16: the bf16 run's first loss within `first_bound` relative of fp32's (the same
// weights and batch), its mean loss over the last quarter of the steps within `late_bound` of fp32's,
// and falling to below `fall` times its first quarter's mean. Prints the numbers.
inline void expect_bf16_follows_fp32(const RunFlags& run, const std::vector<std::string>& flags, const std::string& dir,
                                     int iters, double first_bound, double late_bound, double fall) {
  const auto f = plus(flags, {"--train-iters", std::to_string(iters)});
  run(f, {"--save", dir + "/fp32"});
  run(plus(f, {"--bf16", "--bf16-products"}), {"--save", dir + "/bf16"});
  const auto a = field(dir + "/fp32", "loss"), b = field(dir + "/bf16", "loss");
  ASSERT_EQ(a.size(), static_cast<size_t>(iters));
  ASSERT_EQ(b.size(), static_cast<size_t>(iters));
  const size_t q = static_cast<size_t>(iters) / 4, n = a.size();
  const double first = std::fabs(b[0] - a[0]) / a[0];
  const double late = std::fabs(mean(b, n - q, n) - mean(a, n - q, n)) / mean(a, n - q, n);
  std::printf("bf16 against fp32: step 1 %.6f / %.6f (%.2e relative); last %zu steps %.4f / %.4f (%.2e); bf16 first %zu "
              "steps %.4f\n",
              b[0], a[0], first, q, mean(b, n - q, n), mean(a, n - q, n), late, q, mean(b, 0, q));
  EXPECT_NE(b[0], a[0]) << "the bf16 run multiplied in fp32";
  EXPECT_LT(first, first_bound);
  EXPECT_LT(late, late_bound);
  EXPECT_LT(mean(b, n - q, n), fall * mean(b, 0, q));
}

// `flags` for `iters` steps with and without --recompute-granularity full: in fp32 with the uniform
// method (one layer a group), under --bf16 with the block method (the first layer); the losses and the
// final weights bitwise the same.
inline void expect_recompute_bitwise(const RunFlags& run, const std::vector<std::string>& flags, const std::string& dir,
                                     int iters) {
  const auto f = plus(flags, {"--train-iters", std::to_string(iters)});
  for (const bool bf16 : {false, true}) {
    const auto g = bf16 ? plus(f, {"--bf16"}) : f;
    const std::string ref = dir + (bf16 ? "/bf16" : "/fp32"), got = ref + "_recompute";
    run(g, {"--save", ref});
    run(plus(g, {"--recompute-granularity", "full", "--recompute-method", bf16 ? "block" : "uniform"}), {"--save", got});
    const auto a = field(ref, "loss"), b = field(got, "loss");
    ASSERT_EQ(b.size(), static_cast<size_t>(iters));
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << got << " iteration " << i + 1;  // bitwise
    EXPECT_EQ(file_checksum(resolve_checkpoint_dir(ref) + "/model.safetensors"),
              file_checksum(resolve_checkpoint_dir(got) + "/model.safetensors"))
        << got;
  }
}

struct LayoutRun {
  int np;
  std::vector<std::string> flags;
};

// The layout runs of a family under mpirun (skipped without it) on bert_corpus.h's corpus of 150
// documents: family_flags(data, vocab) with micro-batches of 4, 20 steps saved at 10, in one process;
// then each of `layouts` (name -> ranks and flags), whose 20 losses must be the single process's (the
// first within 1e-6 relative, every one within 1e-4); then each of `resumes` (the run whose iteration-10
// checkpoint it loads, and its layout), whose 10 losses must be too. Prints the differences.
inline void check_layout_runs(const std::string& family,
                              const std::function<std::vector<std::string>(const std::string&, const std::string&)>& family_flags,
                              const std::map<std::string, LayoutRun>& layouts,
                              const std::vector<std::pair<std::string, LayoutRun>>& resumes) {
  if (!std::filesystem::exists(binary_path("pretrain_difflm"))) GTEST_SKIP() << "pretrain_difflm not built";
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  TempDir tmp;
  const std::string vocab = write_bert_vocab(tmp.str()), data = write_ordered_corpus(tmp.str(), 150);
  const auto flags = plus(set_flag(family_flags(data, vocab), "--micro-batch-size", "4"),
                          {"--train-iters", "20", "--save-interval", "10"});
  const std::string ref = tmp / "single";
  train_on_ranks(mpirun, 1, plus(flags, {"--save", ref}), ref + ".log");
  if (::testing::Test::HasFatalFailure()) return;
  const auto want = losses_of(ref);
  ASSERT_EQ(want.size(), 20u);
  for (const auto& [name, layout] : layouts) {
    const std::string save = tmp / name;
    train_on_ranks(mpirun, layout.np, plus(plus(flags, layout.flags), {"--save", save}), save + ".log");
    if (::testing::Test::HasFatalFailure()) return;
    expect_same_losses(want, losses_of(save), 20, 1e-6, name);
    report_losses(want, losses_of(save), family + " " + name);
  }
  // Resumes at iteration 10 in another layout: iterations 11 to 20 are the single process's.
  for (const auto& [from, layout] : resumes) {
    const std::string save = tmp / ("resumed_from_" + from);
    train_on_ranks(mpirun, layout.np, plus(plus(flags, layout.flags), {"--load", tmp / (from + "/iter_0000010"), "--save", save}),
                   save + ".log");
    if (::testing::Test::HasFatalFailure()) return;
    expect_same_losses(want, losses_of(save), 10, 1e-6, "resumed from " + from);
    report_losses(want, losses_of(save), family + " resumed from " + from);
  }
}

}  // namespace megadlm::test
