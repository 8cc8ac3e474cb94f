// pretrain_difflm under tp 1, 2 and 4 (mpirun) trains one model: the vocabulary is padded to
// --make-vocab-size-divisible-by alone and split unevenly over the tp ranks, so a vocabulary that does
// not divide by tp (259 tokens, --make-vocab-size-divisible-by 1) gives the same losses at every tp,
// a checkpoint saved under tp 2 resumes under tp 1 and tp 4, and GPT-2's 50,257 tokens give the same
// first loss at tp 1 and tp 2. Losses compared as scripts/layout_matrix.sh compares layouts: the first
// step within 1e-6 relative, every step within 1e-4 (a resumed run: 1e-4). The tests spawn mpirun
// themselves and skip where it is not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "robustness/child_process.h"
#include "layout_runs.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

#define REQUIRE_MPIRUN(var)                \
  MEGADLM_REQUIRE_BINARY("pretrain_difflm"); \
  const std::string var = test::find_mpirun();   \
  if (var.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)"

// pretrain_difflm with `flags` on `np` ranks at tensor-parallel size np. Fails the test when the run fails.
void train(const std::string& mpirun, int np, const std::vector<std::string>& flags, const std::string& log) {
  test::train_on_ranks(mpirun, np, test::plus(flags, {"--tensor-model-parallel-size", std::to_string(np)}), log);
}

using test::expect_same_losses;
using test::losses_of;

// The robustness tests' tiny run (4 heads, C 32: tp 4 divides them) on 259 tokens (NullTokenizer's
// --vocab-size 258 and its end-of-document id) padded to a multiple of 1: 259 rows, 130 + 129 at tp 2,
// 65 + 65 + 65 + 64 at tp 4.
std::vector<std::string> uneven_flags(const std::string& data, const std::string& type, int iters) {
  std::vector<std::string> f = test::tiny_difflm_flags(data);
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] == "--model-type") f[i + 1] = type;
    if (f[i] == "--vocab-size") f[i + 1] = "258";
    if (f[i] == "--make-vocab-size-divisible-by") f[i + 1] = "1";
    if (f[i] == "--eval-iters") f[i + 1] = "0";
  }
  return test::plus(f, {"--train-iters", std::to_string(iters)});
}

}  // namespace

TEST(VocabLayoutRuns, UnevenVocabularyTrainsTheSameModelAtEveryTp) {
  REQUIRE_MPIRUN(mpirun);
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  for (const std::string type : {"difflm", "gpt"}) {
    SCOPED_TRACE(type);
    const auto flags = uneven_flags(data, type, 20);
    std::map<int, std::map<int64_t, double>> losses;
    for (int np : {1, 2, 4}) {
      const std::string save = dir / (type + "_tp" + std::to_string(np));
      train(mpirun, np, test::plus(flags, {"--save", save}), save + ".log");
      if (HasFatalFailure()) return;
      losses[np] = losses_of(save);
    }
    expect_same_losses(losses[1], losses[2], 20, 1e-6, "tp2 vs tp1");
    expect_same_losses(losses[1], losses[4], 20, 1e-6, "tp4 vs tp1");
  }
}

// The bytes of a file.
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Saved under tp 2 at step 10 (259 rows split 130 + 129), resumed under tp 1 and tp 4 (65 + 65 + 65
// + 64): the checkpoint holds the full tables, and the resumed steps 11..20 give the uninterrupted
// single-process run's losses. Loaded under tp 1 and tp 4 with nothing left to train (--train-iters
// 10) and saved elsewhere, the state comes back bit for bit: the parameters and AdamW's moments
// (model.safetensors, optimizer.safetensors) are the tp 2 run's bytes.
TEST(VocabLayoutRuns, Tp2CheckpointResumesUnderTp1AndTp4) {
  REQUIRE_MPIRUN(mpirun);
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  const auto flags = uneven_flags(data, "difflm", 20);
  const std::string ref = dir / "tp1", saved = dir / "tp2_saved";
  train(mpirun, 1, test::plus(flags, {"--save", ref}), ref + ".log");
  train(mpirun, 2, test::plus(flags, {"--save", saved, "--exit-interval", "10"}), saved + ".log");
  if (HasFatalFailure()) return;
  ASSERT_EQ(losses_of(saved).size(), 10u);
  for (int np : {1, 4}) {
    const std::string resumed = dir / ("resumed_tp" + std::to_string(np));
    train(mpirun, np, test::plus(flags, {"--save", resumed, "--load", saved}), resumed + ".log");
    if (HasFatalFailure()) return;
    expect_same_losses(losses_of(ref), losses_of(resumed), 10, 1e-4, "tp2 checkpoint resumed under tp" + std::to_string(np));
    const std::string copy = dir / ("loaded_tp" + std::to_string(np));
    train(mpirun, np, test::plus(uneven_flags(data, "difflm", 10), {"--save", copy, "--load", saved}), copy + ".log");
    if (HasFatalFailure()) return;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const std::string a = file_bytes(saved + "/iter_0000010/" + file), b = file_bytes(copy + "/iter_0000010/" + file);
      EXPECT_FALSE(a.empty()) << file;
      EXPECT_TRUE(a == b) << file << " of the tp2 checkpoint loaded and saved under tp" << np << " differs ("
                          << a.size() << " and " << b.size() << " bytes)";
    }
  }
}

// The case: GPT-2's tokenizer (50,257 tokens, padded to 50,304 at every tp), 4 layers, hidden
// 128, on the first Brown documents; tp 1 and tp 2 take the same first step.
TEST(VocabLayoutRuns, Gpt2TokenizerFirstLossTp1VsTp2) {
  REQUIRE_MPIRUN(mpirun);
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(merges, "tokenizers/gpt2/merges.txt");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  test::TempDir dir;
  {
    std::ifstream in(brown);
    std::ofstream out(dir / "brown.jsonl");
    std::string line;
    for (int i = 0; i < 20 && std::getline(in, line); ++i) out << line << "\n";
  }
  const std::vector<std::string> tok = {"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges};
  const test::ChildResult pre = test::run_binary(
      "preprocess_data", test::plus({"--input", dir / "brown.jsonl", "--output-prefix", dir / "brown", "--append-eod"}, tok),
      dir / "preprocess.log");
  ASSERT_TRUE(pre.exited && pre.exit_code == 0) << pre.output;
  const std::vector<std::string> flags = test::plus(
      {"--model-type", "gpt", "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length",
       "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters",
       "2", "--lr", "1e-3", "--seed", "1234", "--data-path", dir / "brown_text_document", "--split", "100,0,0",
       "--log-interval", "1", "--eval-iters", "0", "--data-cache-path", dir / "cache"},
      tok);
  std::map<int, std::map<int64_t, double>> losses;
  for (int np : {1, 2}) {
    const std::string save = dir / ("tp" + std::to_string(np));
    train(mpirun, np, test::plus(flags, {"--save", save}), save + ".log");
    if (HasFatalFailure()) return;
    losses[np] = losses_of(save);
  }
  expect_same_losses(losses[1], losses[2], 2, 1e-6, "gpt2 tokenizer, tp2 vs tp1");
}
