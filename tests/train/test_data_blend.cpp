// The trainer's datasets for a weighted multi-prefix --data-path: the data library's Megatron blend
// (build_gpt_split_dataset), sample for sample, with each prefix drawn at its weight; and a run on it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "test_util.h"
#include "train/data_setup.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

// `documents` documents of ids in [lo, lo + 30), each ended by id 63.
std::string make_dataset(const std::string& dir, int32_t lo, int documents) {
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/text_document";
  IndexedDatasetWriter w(prefix, IndexDType::U16);
  for (int d = 0; d < documents; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 12 + d % 9; ++i) doc.push_back(lo + (d + i) % 30);
    doc.push_back(63);
    w.add_document(doc);
  }
  w.finalize();
  return prefix;
}

std::vector<int32_t> sample_of(const TokenDataset& ds, int64_t i) {
  std::vector<int32_t> s(static_cast<size_t>(ds.seq_length() + 1));
  ds.sample(i, s.data());
  return s;
}

// `flags` with --data-path's value replaced by `blend`.
std::vector<std::string> with_data_path(std::vector<std::string> flags, const std::vector<std::string>& blend) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == "--data-path") {
      flags.erase(flags.begin() + static_cast<long>(i), flags.begin() + static_cast<long>(i) + 2);
      break;
    }
  flags.push_back("--data-path");
  flags.insert(flags.end(), blend.begin(), blend.end());
  return flags;
}

}  // namespace

TEST(DataBlend, TrainerDatasetsAreTheLibrarysMegatronBlend) {
  test::TempDir dir;
  const std::string a = make_dataset(dir / "a", 0, 60), b = make_dataset(dir / "b", 30, 90);
  const std::vector<std::string> blend_flag = {"0.25", a, "0.75", b};
  auto flags = with_data_path(test::plus({"pretrain_difflm"}, test::tiny_difflm_flags(a)), blend_flag);
  flags = test::plus(flags, {"--split", "90,10,0", "--train-iters", "50"});
  TrainArgs args = test::parse_flags(flags);
  args.model.vocab_size = 80;  // what the trainer sets: 64 NullTokenizer ids + eod, padded to 16
  // 202 samples: b gives ceil(ceil(202 * 0.75) * 1.005) = 153 by Megatron's count, two epochs of its
  // split with the second shuffled apart; one sample more would shuffle the two epochs together.
  const int64_t train_samples = 202, valid_samples = 8;
  const Datasets d = build_datasets(args, train_samples, valid_samples, 0);
  ASSERT_NE(d.train, nullptr);
  ASSERT_NE(d.valid, nullptr);
  EXPECT_EQ(d.test, nullptr);  // a zero-weight split and no samples asked for

  GPTDatasetConfig cfg;
  cfg.seq_length = 16;
  cfg.seed = 5;
  cfg.cache_dir = args.data_cache_path;
  const DataBlend blend = parse_data_path(blend_flag);
  for (const auto& [split, samples, got] :
       {std::tuple{Split::Train, train_samples, d.train}, std::tuple{Split::Valid, valid_samples, d.valid}}) {
    SCOPED_TRACE(split_name(split));
    const auto want = build_gpt_split_dataset(blend, "90,10,0", split, samples, cfg);
    ASSERT_EQ(got->size(), want->size());
    for (int64_t i = 0; i < want->size(); ++i) ASSERT_EQ(sample_of(*got, i), sample_of(*want, i)) << "sample " << i;
  }
  // Each prefix at its weight: samples of ids below 30 come from a, the others from b.
  int64_t from_a = 0;
  for (int64_t i = 0; i < train_samples; ++i) {
    const auto s = sample_of(*d.train, i);
    from_a += s[0] < 30 || (s[0] == 63 && s[1] < 30);
  }
  EXPECT_NEAR(static_cast<double>(from_a) / train_samples, 0.25, 0.02);
}

TEST(DataBlend, TrainerTrainsOnAWeightedBlend) {
  test::TempDir dir;
  const std::string a = make_dataset(dir / "a", 0, 60), b = make_dataset(dir / "b", 30, 90);
  auto flags = with_data_path(test::plus({"pretrain_difflm"}, test::tiny_difflm_flags(a)), {"1", a, "3", b});
  test::run_training(flags, {"--train-iters", "3", "--save", dir / "ckpt"});
  const auto lines = test::training_lines(dir / "ckpt/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_TRUE(std::isfinite(l["loss"].get<double>())) << l.dump();
}
