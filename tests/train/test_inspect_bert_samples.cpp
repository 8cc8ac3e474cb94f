// inspect_data --bert-samples (apps/inspect_data.cpp): the samples it writes for the flags of a
// pretrain_difflm --model-type bert run are those of a BertDataset built here directly from the same
// values (the train split by documents, --train-iters x --global-batch-size samples), in order; a
// run's flags of another model type are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bert_corpus.h"
#include "data/bert_dataset.h"
#include "data/gpt_dataset.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "train_fixture.h"

using namespace megadlm;

using test::plus;

TEST(InspectBertSamples, WritesTheTrainersSamplesInOrder) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  test::TempDir tmp;
  const std::string vocab = test::write_bert_vocab(tmp.str()), data = test::write_ordered_corpus(tmp.str(), 60);
  // bert_flags: --seq-length 48, --global-batch-size 16, --split 95,5,0, --seed 7; 3 steps = 48 samples.
  const auto train = plus(test::bert_flags(data, vocab), {"--train-iters", "3", "--mask-prob", "0.2"});
  const auto r = test::run_binary("inspect_data", plus({"--bert-samples", tmp / "s.jsonl", "--"}, train),
                                  tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;

  TokenizerSpec spec;
  spec.type = "BertWordPieceLowerCase";
  spec.vocab_file = vocab;
  auto indexed = std::make_shared<const IndexedDataset>(data);
  const auto ranges = split_ranges("95,5,0", indexed->num_documents());
  BertDatasetConfig c;
  c.seq_length = 48;
  c.num_samples = 48;
  c.seed = 7;
  c.mask_prob = 0.2;
  c.short_seq_prob = 0.1;
  c.binary_head = true;
  c.tokens = bert_tokens_of(*make_tokenizer(spec));
  const BertDataset direct(indexed, *ranges[0], Split::Train, c);

  std::ifstream in(tmp / "s.jsonl");
  std::string line;
  int64_t i = 0, swapped = 0;
  BertSample s;
  for (; std::getline(in, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    direct.sample(i % direct.size(), s);
    ASSERT_EQ(j.at("index").get<int64_t>(), i);
    EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), s.tokens) << "sample " << i;
    EXPECT_EQ(j.at("token_types").get<std::vector<int32_t>>(), s.token_types) << "sample " << i;
    EXPECT_EQ(j.at("labels").get<std::vector<int32_t>>(), s.labels) << "sample " << i;
    EXPECT_EQ(j.at("padding_mask").get<std::vector<uint8_t>>(), s.padding_mask) << "sample " << i;
    EXPECT_EQ(j.at("is_random").get<int32_t>(), s.is_random) << "sample " << i;
    swapped += s.is_random;
  }
  EXPECT_EQ(i, 48);
  EXPECT_GT(swapped, 0);  // both sentence orders are among the samples compared
  EXPECT_LT(swapped, 48);
}

TEST(InspectBertSamples, RefusesAnotherModelType) {
  MEGADLM_REQUIRE_BINARY("inspect_data");
  test::TempDir tmp;
  const std::string vocab = test::write_bert_vocab(tmp.str()), data = test::write_ordered_corpus(tmp.str(), 20);
  auto train = test::set_flag(test::bert_flags(data, vocab), "--model-type", "difflm");
  const auto r = test::run_binary("inspect_data", plus({"--bert-samples", tmp / "s.jsonl", "--"}, train),
                                  tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--bert-samples"), std::string::npos) << r.output;
}
