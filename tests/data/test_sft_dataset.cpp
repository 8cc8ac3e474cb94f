// Supervised fine-tuning data (--sft): the loss mask beside the tokens (data/loss_mask.h), the padding
// layout (SftDataset: one conversation per sample, padded with eod), the packing layout (GPTDataset
// carrying the mask), the blend and the loader passing the mask along, and the errors for a missing,
// mismatched or invalid mask and an over-long conversation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/loss_mask.h"
#include "data/sft_dataset.h"
#include "test_util.h"

using namespace megadlm;

namespace {

using test::error_of;
using test::TempDir;

constexpr int32_t kEod = 999;

struct Conversation {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
};

// Conversation c: a prompt of 2 + c % 4 tokens (c * 100 + position, mask 0), then a response of
// 1 + c % 3 tokens (mask 1) and the eod (mask 1); every token says where it came from.
Conversation conversation(int c) {
  Conversation v;
  const int prompt = 2 + c % 4, response = 1 + c % 3;
  for (int i = 0; i < prompt + response; ++i) {
    v.tokens.push_back(c * 100 + i);
    v.mask.push_back(i < prompt ? 0 : 1);
  }
  v.tokens.push_back(kEod);
  v.mask.push_back(1);
  return v;
}

// Writes conversations 0..n-1 at prefix with their loss mask (uint8) beside them.
std::vector<Conversation> write_conversations(const std::string& prefix, int n) {
  std::vector<Conversation> out;
  IndexedDatasetWriter t(prefix, IndexDType::I32), m(loss_mask_prefix(prefix), IndexDType::U8);
  for (int c = 0; c < n; ++c) {
    out.push_back(conversation(c));
    t.add_document(out.back().tokens);
    m.add_document(std::vector<int32_t>(out.back().mask.begin(), out.back().mask.end()));
  }
  t.finalize();
  m.finalize();
  return out;
}

GPTDatasetConfig padding_config(int64_t T, int64_t samples, uint8_t pad_mask) {
  GPTDatasetConfig c;
  c.seq_length = T;
  c.num_samples = samples;
  c.seed = 11;
  c.sft = SftLayout::Padding;
  c.pad_token = kEod;
  c.pad_loss_mask = pad_mask;
  return c;
}

std::shared_ptr<SftDataset> padding_dataset(const std::string& prefix, const GPTDatasetConfig& c) {
  auto data = std::make_shared<IndexedDataset>(prefix);
  return std::make_shared<SftDataset>(data, open_loss_mask(*data), SequenceRange{0, data->num_sequences()},
                                      Split::Train, c);
}

}  // namespace

TEST(SftDataset, LossMaskOfDtypeUint8ReadsBack) {
  TempDir tmp;
  const auto convs = write_conversations(tmp / "d", 3);
  const IndexedDataset mask(loss_mask_prefix(tmp / "d"));
  EXPECT_EQ(mask.dtype(), IndexDType::U8);
  EXPECT_EQ(loss_mask_prefix("x/y_text_document"), "x/y_text_document.loss_mask");
  for (int c = 0; c < 3; ++c) {
    std::vector<uint8_t> got(convs[c].mask.size());
    read_loss_mask(mask, c, 0, static_cast<int64_t>(got.size()), got.data());
    EXPECT_EQ(got, convs[c].mask) << "conversation " << c;
  }
}

// Each sample is one conversation from its first token, padded with eod to T + 1; the padding's mask
// is the configured value (1 for diffusion, 0 for AR).
TEST(SftDataset, PaddingSampleIsTheConversationPaddedWithEod) {
  TempDir tmp;
  const auto convs = write_conversations(tmp / "d", 12);
  const int64_t T = 10;
  for (uint8_t pad_mask : {uint8_t{1}, uint8_t{0}}) {
    auto ds = padding_dataset(tmp / "d", padding_config(T, 12, pad_mask));
    ASSERT_EQ(ds->size(), 12);
    for (int64_t i = 0; i < ds->size(); ++i) {
      const Conversation& c = convs[ds->order()[i]];
      std::vector<int32_t> want_tokens = c.tokens;
      std::vector<uint8_t> want_mask = c.mask;
      want_tokens.resize(T + 1, kEod);
      want_mask.resize(T + 1, pad_mask);
      std::vector<int32_t> tokens(T + 1, -1);
      std::vector<uint8_t> mask(T + 1, 7);
      ds->sample(i, tokens.data());
      ds->sample_loss_mask(i, mask.data());
      EXPECT_EQ(tokens, want_tokens) << "sample " << i;
      EXPECT_EQ(mask, want_mask) << "sample " << i;
    }
  }
}

// The template's closing tokens after the last response (chatml's "\n" after "<|im_end|>": mask 0) take the
// padding's mask: 1 for diffusion, whose sampler writes everything after the prompt, so training never
// shows where the answer ends; 0 for AR, the stored mask unchanged. A response inside the conversation
// keeps its prompt tokens after it, and a conversation without a response keeps its mask.
TEST(SftDataset, PaddingGivesTheClosingTokensThePaddingsMask) {
  TempDir tmp;
  const std::vector<std::vector<uint8_t>> masks = {
      {0, 0, 1, 1, 0},        // one turn, then a closing token
      {0, 1, 0, 0, 1, 0, 0},  // two turns: the first turn's closer and the second prompt stay 0
      {0, 0, 0},              // no response
  };
  {
    IndexedDatasetWriter t(tmp / "d", IndexDType::I32), m(loss_mask_prefix(tmp / "d"), IndexDType::U8);
    for (size_t c = 0; c < masks.size(); ++c) {
      std::vector<int32_t> tokens(masks[c].size());
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(c * 100 + i);
      t.add_document(tokens);
      m.add_document(std::vector<int32_t>(masks[c].begin(), masks[c].end()));
    }
    t.finalize();
    m.finalize();
  }
  const int64_t T = 8;
  const std::vector<std::vector<uint8_t>> diffusion = {
      {0, 0, 1, 1, 1, 1, 1, 1, 1},
      {0, 1, 0, 0, 1, 1, 1, 1, 1},
      {0, 0, 0, 1, 1, 1, 1, 1, 1},
  };
  for (uint8_t pad_mask : {uint8_t{1}, uint8_t{0}}) {
    auto ds = padding_dataset(tmp / "d", padding_config(T, 3, pad_mask));
    for (int64_t i = 0; i < ds->size(); ++i) {
      const int32_t c = ds->order()[i];
      std::vector<uint8_t> want = pad_mask ? diffusion[c] : masks[c];
      want.resize(T + 1, 0);
      std::vector<uint8_t> mask(T + 1, 7);
      ds->sample_loss_mask(i, mask.data());
      EXPECT_EQ(mask, want) << "conversation " << c << ", padding mask " << int{pad_mask};
    }
  }
}

// Every epoch visits every conversation once; the order is a pure function of the seed and the sizes.
TEST(SftDataset, PaddingOrderShufflesWholeEpochsBySeed) {
  TempDir tmp;
  write_conversations(tmp / "d", 10);
  auto a = padding_dataset(tmp / "d", padding_config(10, 25, 1));
  auto b = padding_dataset(tmp / "d", padding_config(10, 25, 1));
  GPTDatasetConfig other = padding_config(10, 25, 1);
  other.seed = 12;
  auto c = padding_dataset(tmp / "d", other);
  EXPECT_EQ(a->num_epochs(), 3);
  ASSERT_EQ(a->size(), 30);
  EXPECT_EQ(a->order(), b->order());
  EXPECT_NE(a->order(), c->order());
  std::vector<int32_t> identity(10);
  for (int i = 0; i < 10; ++i) identity[i] = i;
  EXPECT_NE(std::vector<int32_t>(a->order().begin(), a->order().begin() + 10), identity) << "not shuffled";
  // 25 samples: 5 of the third epoch, under 80% of one, so that epoch is shuffled on its own.
  std::vector<int32_t> last(a->order().begin() + 20, a->order().end());
  std::sort(last.begin(), last.end());
  EXPECT_EQ(last, identity);
  std::map<int32_t, int> seen;
  for (int32_t s : a->order()) ++seen[s];
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], 3) << "conversation " << i;
}

// A conversation longer than T + 1 is never truncated: an error naming the prefix, the conversation
// (1-based document; an empty document before it counts) and --seq-length.
TEST(SftDataset, OverLongConversationIsAnErrorNamingDocumentAndFlag) {
  TempDir tmp;
  const std::string prefix = tmp / "d";
  {
    IndexedDatasetWriter t(prefix, IndexDType::I32), m(loss_mask_prefix(prefix), IndexDType::U8);
    const std::vector<int32_t> short_conv = {1, 2, kEod}, short_mask = {0, 1, 1};
    t.add_document(short_conv);
    m.add_document(short_mask);
    t.add_document(nullptr, 0);  // an empty document: line 2 of the jsonl
    m.add_document(nullptr, 0);
    std::vector<int32_t> long_conv(12, 5), long_mask(12, 1);
    t.add_document(long_conv);
    m.add_document(long_mask);
    t.finalize();
    m.finalize();
  }
  const std::string e = error_of([&] { padding_dataset(prefix, padding_config(10, 4, 1)); });
  EXPECT_NE(e.find(prefix), std::string::npos) << e;
  EXPECT_NE(e.find("conversation 3 (document 3; line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("12 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("--seq-length 10"), std::string::npos) << e;
  // T + 1 tokens fit exactly.
  EXPECT_EQ(error_of([&] { padding_dataset(prefix, padding_config(11, 4, 1)); }), "");
}

TEST(SftDataset, MissingLossMaskNamesTheFileAndSft) {
  TempDir tmp;
  const std::string prefix = tmp / "d";
  {
    IndexedDatasetWriter t(prefix, IndexDType::I32);
    t.add_document(std::vector<int32_t>{1, 2, 3});
    t.finalize();
  }
  DataBlend blend;
  blend.prefixes = {prefix};
  blend.weights = {1.0};
  for (SftLayout layout : {SftLayout::Padding, SftLayout::Packing}) {
    GPTDatasetConfig c = padding_config(2, 1, 1);
    c.sft = layout;
    const std::string e = error_of([&] { build_gpt_dataset_whole(blend, Split::Train, 1, c); });
    EXPECT_NE(e.find("--sft"), std::string::npos) << e;
    EXPECT_NE(e.find(prefix + ".loss_mask.idx is missing"), std::string::npos) << e;
  }
  // Pretraining reads no mask.
  GPTDatasetConfig plain;
  plain.seq_length = 2;
  EXPECT_EQ(error_of([&] { build_gpt_dataset_whole(blend, Split::Train, 1, plain); }), "");
}

TEST(SftDataset, LossMaskOfOtherLengthsIsAnError) {
  TempDir tmp;
  const std::string prefix = tmp / "d";
  {
    IndexedDatasetWriter t(prefix, IndexDType::I32), m(loss_mask_prefix(prefix), IndexDType::U8);
    t.add_document(std::vector<int32_t>{1, 2, 3});
    m.add_document(std::vector<int32_t>{0, 1, 1});
    t.add_document(std::vector<int32_t>{4, 5, 6, 7});
    m.add_document(std::vector<int32_t>{0, 1, 1});  // one value short
    t.finalize();
    m.finalize();
  }
  const IndexedDataset tokens(prefix);
  const std::string e = error_of([&] { open_loss_mask(tokens); });
  EXPECT_NE(e.find("--sft"), std::string::npos) << e;
  EXPECT_NE(e.find(prefix + ".loss_mask.idx: sequence 1 has 3 values"), std::string::npos) << e;

  // Another number of documents.
  const std::string p2 = tmp / "e";
  {
    IndexedDatasetWriter t(p2, IndexDType::I32), m(loss_mask_prefix(p2), IndexDType::U8);
    t.add_document(std::vector<int32_t>{1, 2, 3});
    t.add_document(std::vector<int32_t>{1, 2, 3});
    m.add_document(std::vector<int32_t>{0, 1, 1});
    t.finalize();
    m.finalize();
  }
  const IndexedDataset tokens2(p2);
  const std::string e2 = error_of([&] { open_loss_mask(tokens2); });
  EXPECT_NE(e2.find("holds 1 sequences in 1 documents"), std::string::npos) << e2;
}

TEST(SftDataset, LossMaskValueOtherThanZeroOrOneIsAnError) {
  TempDir tmp;
  const std::string prefix = tmp / "d";
  {
    IndexedDatasetWriter t(prefix, IndexDType::I32), m(loss_mask_prefix(prefix), IndexDType::U8);
    t.add_document(std::vector<int32_t>{1, 2, 3});
    m.add_document(std::vector<int32_t>{0, 2, 1});
    t.finalize();
    m.finalize();
  }
  auto ds = padding_dataset(prefix, padding_config(4, 1, 1));
  std::vector<uint8_t> mask(5);
  const std::string e = error_of([&] { ds->sample_loss_mask(0, mask.data()); });
  EXPECT_NE(e.find(prefix + ".loss_mask.bin: sequence 0 holds loss-mask value 2 at token 1"), std::string::npos) << e;
}

// Packing: the GPTDataset's samples, the mask cut exactly as the tokens are.
TEST(SftDataset, PackingCarriesTheMaskAlignedWithTheTokens) {
  TempDir tmp;
  const auto convs = write_conversations(tmp / "d", 30);
  std::map<int32_t, uint8_t> mask_of;  // every token id is unique but the eod
  for (const auto& c : convs)
    for (size_t i = 0; i + 1 < c.tokens.size(); ++i) mask_of[c.tokens[i]] = c.mask[i];
  mask_of[kEod] = 1;
  DataBlend blend;
  blend.prefixes = {tmp / "d"};
  blend.weights = {1.0};
  GPTDatasetConfig c;
  c.seq_length = 8;
  c.seed = 3;
  c.sft = SftLayout::Packing;
  auto ds = build_gpt_dataset_whole(blend, Split::Train, 40, c);
  ASSERT_TRUE(ds->has_loss_mask());
  ASSERT_GE(ds->size(), 40);
  for (int64_t i = 0; i < 40; ++i) {
    std::vector<int32_t> tokens(9);
    std::vector<uint8_t> mask(9);
    ds->sample(i, tokens.data());
    ds->sample_loss_mask(i, mask.data());
    for (int k = 0; k < 9; ++k) EXPECT_EQ(mask[k], mask_of.at(tokens[k])) << "sample " << i << " token " << k;
  }
}

// The blend passes each part's mask along; the loader fills SampleBatch::loss_mask for --sft data
// (the same with and without prefetch) and leaves it empty for pretraining data.
TEST(SftDataset, BlendAndLoaderCarryTheMask) {
  TempDir tmp;
  const auto a = write_conversations(tmp / "a", 8);
  write_conversations(tmp / "b", 9);
  DataBlend blend;
  blend.prefixes = {tmp / "a", tmp / "b"};
  blend.weights = {1.0, 2.0};
  auto ds = build_gpt_dataset_whole(blend, Split::Train, 20, padding_config(12, 0, 1));
  ASSERT_TRUE(ds->has_loss_mask());
  std::vector<std::vector<uint8_t>> masks;
  for (bool prefetch : {true, false}) {
    LoaderConfig lc;
    lc.micro_batch_size = 4;
    lc.prefetch = prefetch;
    BatchLoader loader(ds, lc);
    for (int k = 0; k < 5; ++k) {
      const SampleBatch b = loader.next();
      ASSERT_EQ(b.loss_mask.size(), b.tokens.size());
      for (int64_t r = 0; r < 4; ++r) {
        std::vector<uint8_t> want(13);
        ds->sample_loss_mask(b.first_sample + r, want.data());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), b.loss_mask.begin() + r * 13));
      }
      if (prefetch) masks.push_back(b.loss_mask);
      else EXPECT_EQ(b.loss_mask, masks[k]);
    }
  }
  GPTDatasetConfig plain;
  plain.seq_length = 4;
  blend.prefixes = {tmp / "a"};
  blend.weights = {1.0};
  LoaderConfig lc;
  lc.micro_batch_size = 2;
  BatchLoader loader(build_gpt_dataset_whole(blend, Split::Train, 4, plain), lc);
  EXPECT_TRUE(loader.next().loss_mask.empty());
}

TEST(SftDataset, BlendOfMaskedAndUnmaskedPartsIsAnError) {
  TempDir tmp;
  write_conversations(tmp / "a", 8);
  auto data = std::make_shared<IndexedDataset>(tmp / "a");
  GPTDatasetConfig c;
  c.seq_length = 4;
  c.num_samples = 4;
  auto masked = std::make_shared<GPTDataset>(data, SequenceRange{0, 8}, Split::Train, c);
  masked->attach_loss_mask(open_loss_mask(*data));
  auto plain = std::make_shared<GPTDataset>(data, SequenceRange{0, 8}, Split::Train, c);
  const std::string e = error_of([&] { BlendedDataset({masked, plain}, {1.0, 1.0}, 4); });
  EXPECT_NE(e.find("blend dataset 1 lacks a loss mask"), std::string::npos) << e;
}
