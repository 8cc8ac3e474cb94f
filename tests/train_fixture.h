#pragma once
// Helpers for end-to-end trainer tests: a tiny learnable dataset, flag parsing, a training run in
// process, and reading metrics.jsonl back.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace megadlm::test
