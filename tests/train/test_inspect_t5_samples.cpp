// inspect_data --t5-samples (apps/inspect_data.cpp): the samples it writes for the flags of a
// pretrain_difflm --model-type t5 run are those of a T5Dataset built here directly from the same
// values (the train split by documents, --train-iters x --global-batch-size samples, the special ids
// after the WordPiece vocabulary), in order; the flags of another model type, an unwritable file and
// both sample flags at once are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bert_corpus.h"
#include "data/gpt_dataset.h"
#include "data/t5_dataset.h"
#include "family_runs.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "train_fixture.h"

using namespace megadlm;

using test::plus;

namespace {

struct InspectT5Samples : ::testing::Test {
  test::TempDir tmp;
  std::string vocab = test::write_bert_vocab(tmp.str());
  std::string data = test::write_ordered_corpus(tmp.str(), 60);
};

}  // namespace

TEST_F(InspectT5Samples, WritesTheTrainersSamplesInOrder) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  // t5_flags: encoder 48, decoder 16, 10 sentinels, --global-batch-size 16, --split 95,5,0, --seed 7;
  // 3 steps = 48 samples. --mask-prob 0.2: 10 noise tokens of 48 in 3 spans, 14 target rows.
  const auto train = plus(test::t5_flags(data, vocab), {"--train-iters", "3", "--mask-prob", "0.2"});
  const auto r = test::run_binary("inspect_data", plus({"--t5-samples", tmp / "s.jsonl", "--"}, train),
                                  tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;

  TokenizerSpec spec;
  spec.type = "BertWordPieceLowerCase";
  spec.vocab_file = vocab;
  const auto tok = make_tokenizer(spec);
  const int32_t V = static_cast<int32_t>(tok->vocab_size());  // 41 WordPiece ids: [BOS] V, [EOS] V + 1, sentinels
  auto indexed = std::make_shared<const IndexedDataset>(data);
  const auto ranges = split_ranges("95,5,0", indexed->num_documents());
  T5DatasetConfig c;
  c.encoder_seq_length = 48;
  c.decoder_seq_length = 16;
  c.num_samples = 48;
  c.seed = 7;
  c.noise_density = 0.2;
  c.short_seq_prob = 0.1;
  c.pad = tok->token_to_id("[PAD]");
  c.bos = V;
  c.eos = V + 1;
  for (int32_t k = 0; k < 10; ++k) c.sentinels.push_back(V + 2 + k);
  const T5Dataset direct(indexed, *ranges[0], Split::Train, c);

  std::ifstream in(tmp / "s.jsonl");
  std::string line;
  int64_t i = 0, labelled = 0;
  T5Sample s;
  for (; std::getline(in, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    direct.sample(i % direct.size(), s);
    ASSERT_EQ(j.at("index").get<int64_t>(), i);
    EXPECT_EQ(j.at("encoder_tokens").get<std::vector<int32_t>>(), s.encoder_tokens) << "sample " << i;
    EXPECT_EQ(j.at("encoder_padding_mask").get<std::vector<uint8_t>>(), s.encoder_padding_mask) << "sample " << i;
    EXPECT_EQ(j.at("decoder_input").get<std::vector<int32_t>>(), s.decoder_input) << "sample " << i;
    EXPECT_EQ(j.at("decoder_labels").get<std::vector<int32_t>>(), s.decoder_labels) << "sample " << i;
    EXPECT_EQ(j.at("loss_mask").get<std::vector<uint8_t>>(), s.loss_mask) << "sample " << i;
    EXPECT_EQ(j.at("decoder_padding_mask").get<std::vector<uint8_t>>(), s.decoder_padding_mask) << "sample " << i;
    for (uint8_t m : s.loss_mask) labelled += m;
  }
  EXPECT_EQ(i, 48);
  // The samples are span-corrupted texts: the decoder starts from [BOS], some rows are padding.
  EXPECT_EQ(s.decoder_input[0], V);
  EXPECT_GT(labelled, 48 * 3);
  EXPECT_LT(labelled, 48 * 16);
}

TEST_F(InspectT5Samples, RefusesAnotherModelType) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  const auto r = test::run_binary("inspect_data", plus({"--t5-samples", tmp / "s.jsonl", "--"}, test::bert_flags(data, vocab)),
                                  tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--t5-samples needs the flags of a --model-type t5 run"), std::string::npos) << r.output;
}

TEST_F(InspectT5Samples, RefusesAnUnwritableFile) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  const std::string path = tmp / "no_such_dir/s.jsonl";
  const auto train = plus(test::t5_flags(data, vocab), {"--train-iters", "1"});
  const auto r = test::run_binary("inspect_data", plus({"--t5-samples", path, "--"}, train), tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--t5-samples: cannot write " + path), std::string::npos) << r.output;
}

TEST_F(InspectT5Samples, RefusesBothSampleFlags) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  const auto train = plus(test::t5_flags(data, vocab), {"--train-iters", "1"});
  const auto r = test::run_binary(
      "inspect_data", plus({"--t5-samples", tmp / "a.jsonl", "--bert-samples", tmp / "b.jsonl", "--"}, train),
      tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--bert-samples and --t5-samples"), std::string::npos) << r.output;
}
