#pragma once
// Helpers for end-to-end trainer tests: a tiny learnable dataset, flag parsing, a training run in
// process, and reading metrics.jsonl back.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "data/indexed_dataset.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace megadlm::test {

// `documents` documents counting upwards over ids 0..59, each ended by id 63 (NullTokenizer data): each
// token is its predecessor plus one, so both objectives have something to learn.
inline std::string make_counting_dataset(const std::string& dir, int documents) {
  const std::string prefix = dir + "/toy_text_document";
  IndexedDatasetWriter w(prefix, IndexDType::U16);
  for (int d = 0; d < documents; ++d) {
    std::vector<int32_t> doc;
    const int len = 20 + (d * 7) % 30;
    for (int i = 0; i < len; ++i) doc.push_back((d + i) % 60);
    doc.push_back(63);
    w.add_document(doc);
  }
  w.finalize();
  return prefix;
}

// pretrain_difflm flags (no argv[0]) of a tiny run on make_counting_dataset's data: one layer, C = 32,
// 16-token sequences, 4 sequences a step. The robustness tests' configuration.
inline std::vector<std::string> tiny_difflm_flags(const std::string& data) {
  return {"--model-type", "difflm", "--num-layers", "1", "--hidden-size", "32", "--num-heads", "4",
          "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--data-path", data,
          "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--make-vocab-size-divisible-by", "16",
          "--mask-token", "62", "--lr", "3e-3", "--lr-warmup-iters", "1", "--log-interval", "1", "--eval-interval",
          "1000", "--eval-iters", "1", "--seed", "5", "--data-cache-path", data + "_cache"};
}

// a followed by b.
inline std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline TrainArgs parse_flags(const std::vector<std::string>& flags) {
  std::vector<const char*> argv;
  for (const auto& s : flags) argv.push_back(s.c_str());
  TrainArgs a;
  EXPECT_TRUE(parse_train_args(static_cast<int>(argv.size()), argv.data(), a));
  return a;
}

// Trains in process with `flags` followed by `extra`.
inline void run_training(std::vector<std::string> flags, const std::vector<std::string>& extra) {
  flags.insert(flags.end(), extra.begin(), extra.end());
  Trainer t(parse_flags(flags));
  t.run();
}

// The training lines (those with a "loss") of a metrics.jsonl file.
inline std::vector<nlohmann::json> training_lines(const std::string& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j);
  }
  return out;
}

// A run of `flags` (their --train-iters = `steps`, even) saved in `full`, and the same stopped at
// steps / 2 and resumed in `part`: the same losses, finite and positive, and the same final
// model.safetensors, bit for bit.
inline void expect_bitwise_resume(const std::vector<std::string>& flags, const std::string& full,
                                  const std::string& part, int steps) {
  run_training(flags, {"--save", full});
  run_training(flags, {"--save", part, "--exit-interval", std::to_string(steps / 2)});
  run_training(flags, {"--save", part, "--load", part});
  const auto a = training_lines(full + "/metrics.jsonl"), b = training_lines(part + "/metrics.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(steps));
  ASSERT_EQ(b.size(), static_cast<size_t>(steps));
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
    EXPECT_EQ(x, b[i]["loss"].get<double>()) << "iteration " << i + 1;  // bitwise
  }
  EXPECT_EQ(file_checksum(resolve_checkpoint_dir(full) + "/model.safetensors"),
            file_checksum(resolve_checkpoint_dir(part) + "/model.safetensors"));
}

}  // namespace megadlm::test

namespace megadlm::test {

// Supervised fine-tuning data for ByteTokenizer (eod 256): `conversations` conversations
// "<letters>=" (prompt, loss mask 0) followed by the letters reversed and the eod (response, loss
// mask 1), 3 to 8 letters each, at <dir>/sft_text_document with its loss mask beside it
// (data/loss_mask.h). The longest conversation has 2 * 8 + 2 = 18 tokens. Other tokenizers: the
// letters from id first_letter on, `equals` and `eod` in their place.
inline std::string make_sft_dataset(const std::string& dir, int conversations, int32_t first_letter = 'a',
                                    int32_t equals = '=', int32_t eod = 256) {
  const std::string prefix = dir + "/sft_text_document";
  IndexedDatasetWriter tokens(prefix, IndexDType::U16), mask(prefix + ".loss_mask", IndexDType::U8);
  for (int c = 0; c < conversations; ++c) {
    const int n = 3 + (c * 5) % 6;
    std::vector<int32_t> doc, m;
    for (int i = 0; i < n; ++i) doc.push_back(first_letter + (c * 7 + i * 3) % 26);
    doc.push_back(equals);
    m.assign(doc.size(), 0);
    for (int i = n - 1; i >= 0; --i) doc.push_back(doc[i]);
    doc.push_back(eod);
    m.resize(doc.size(), 1);
    tokens.add_document(doc);
    mask.add_document(m);
  }
  tokens.finalize();
  mask.finalize();
  return prefix;
}

// pretrain_difflm flags (no argv[0]) of a tiny --sft run on make_sft_dataset's data: ByteTokenizer,
// one layer, C = 32, 24-token samples, 4 conversations a step.
inline std::vector<std::string> tiny_sft_flags(const std::string& data, const std::string& model_type) {
  return {"--model-type", model_type, "--sft", "--num-layers", "1", "--hidden-size", "32", "--num-heads", "4",
          "--seq-length", "24", "--micro-batch-size", "2", "--global-batch-size", "4", "--data-path", data,
          "--split", "100,0,0", "--tokenizer-type", "ByteTokenizer", "--make-vocab-size-divisible-by", "16",
          "--lr", "3e-3", "--lr-warmup-iters", "1", "--log-interval", "1", "--eval-iters", "0", "--seed", "5",
          "--data-cache-path", data + "_cache"};
}

}  // namespace megadlm::test
