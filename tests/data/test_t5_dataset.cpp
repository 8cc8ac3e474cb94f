// T5Dataset (data/t5_dataset.h): T5's random_spans_noise_mask, the sample layout, noise density and
// mean span length measured over thousands of samples (synthetic data and Brown), exact
// reconstruction of the text from encoder input and decoder labels, determinism by index, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/t5_dataset.h"
#include "sentence_corpus.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"

using namespace megadlm;

namespace {

using test::error_of;
using test::TempDir;

T5DatasetConfig synthetic_config(int64_t encoder, int64_t decoder, int64_t num_samples) {
  T5DatasetConfig c;
  c.encoder_seq_length = encoder;
  c.decoder_seq_length = decoder;
  c.num_samples = num_samples;
  c.seed = 91;
  c.pad = test::kSyntheticPad;
  c.bos = test::kSyntheticCls;
  c.eos = test::kSyntheticSep;
  c.sentinels = t5_sentinel_ids(test::kSyntheticVocab + 100, 100);
  return c;
}

std::shared_ptr<const IndexedDataset> open(const std::string& prefix) { return std::make_shared<IndexedDataset>(prefix); }
SequenceRange all_documents(const IndexedDataset& d) { return {0, d.num_documents()}; }

struct T5Stats {
  int64_t samples = 0, text_tokens = 0, noise = 0, spans = 0, violations = 0;
  std::string first_violation;
  void violate(int64_t i, const std::string& why) {
    if (violations++ == 0) first_violation = "sample " + std::to_string(i) + ": " + why;
  }
};

bool is_sentinel(const T5DatasetConfig& c, int32_t id) {
  return id >= c.sentinels.front() && id <= c.sentinels.back();
}

// Rebuilds the text from the encoder input and decoder labels and compares it with the segment's.
void check_sample(const T5Dataset& ds, int64_t i, const T5Sample& s, T5Stats& st) {
  const T5DatasetConfig& c = ds.config();
  std::vector<int32_t> text;
  std::vector<int64_t> ends;
  const SentenceSegment& seg = ds.segments()[static_cast<size_t>(i)];
  read_segment(ds.indexed(), seg, text, ends);
  text.resize(std::min(text.size(), static_cast<size_t>(seg.target)));
  size_t enc = 0, dec = 0;
  while (enc < s.encoder_tokens.size() && s.encoder_padding_mask[enc]) ++enc;
  while (dec < s.decoder_labels.size() && s.loss_mask[dec]) ++dec;
  for (size_t p = enc; p < s.encoder_tokens.size(); ++p)
    if (s.encoder_tokens[p] != c.pad || s.encoder_padding_mask[p]) return st.violate(i, "encoder padding");
  for (size_t p = dec; p < s.decoder_labels.size(); ++p)
    if (s.decoder_labels[p] != -1 || s.decoder_input[p] != c.pad || s.decoder_padding_mask[p])
      return st.violate(i, "decoder padding");
  if (dec == 0 || s.decoder_labels[dec - 1] != c.eos) return st.violate(i, "the labels do not end with eos");
  if (s.decoder_input[0] != c.bos) return st.violate(i, "the decoder input does not start with bos");
  for (size_t p = 0; p < dec; ++p) {
    if (s.decoder_padding_mask[p] != 1) return st.violate(i, "decoder padding mask");
    if (p > 0 && s.decoder_input[p] != s.decoder_labels[p - 1]) return st.violate(i, "decoder input is not bos + labels");
  }
  // Walk the encoder input; each sentinel k takes span k's tokens from the labels.
  std::vector<int32_t> rebuilt;
  size_t label = 0;
  int32_t expected_span = 0;
  for (size_t p = 0; p < enc; ++p) {
    const int32_t t = s.encoder_tokens[p];
    if (!is_sentinel(c, t)) {
      rebuilt.push_back(t);
      continue;
    }
    if (t != c.sentinels[static_cast<size_t>(expected_span++)] || s.decoder_labels[label++] != t)
      return st.violate(i, "sentinels out of order");
    if (p > 0 && is_sentinel(c, s.encoder_tokens[p - 1])) return st.violate(i, "two spans touch");
    while (label + 1 < dec && !is_sentinel(c, s.decoder_labels[label])) rebuilt.push_back(s.decoder_labels[label++]);
  }
  if (label + 1 != dec) return st.violate(i, "labels left over");
  if (rebuilt != text) return st.violate(i, "encoder input + decoder labels do not rebuild the text");
  if (expected_span != s.num_spans || static_cast<int64_t>(dec) != s.num_noise + s.num_spans + 1)
    return st.violate(i, "span counts disagree");
  ++st.samples;
  st.text_tokens += static_cast<int64_t>(text.size());
  st.noise += s.num_noise;
  st.spans += s.num_spans;
}

T5Stats measure(const T5Dataset& ds, int64_t n) {
  T5Stats st;
  T5Sample s;
  for (int64_t i = 0; i < n; ++i) {
    ds.sample(i, s);
    check_sample(ds, i, s, st);
  }
  const double density = static_cast<double>(st.noise) / static_cast<double>(st.text_tokens);
  const double mean_span = static_cast<double>(st.noise) / static_cast<double>(st.spans);
  // The measured values, for docs/bert_t5_data.md.
  std::printf("  measured over %lld samples (%lld text tokens): noise density %.4f, mean span length %.3f\n",
              static_cast<long long>(st.samples), static_cast<long long>(st.text_tokens), density, mean_span);
  EXPECT_EQ(st.violations, 0) << st.first_violation;
  EXPECT_NEAR(density, 0.15, 0.01);
  EXPECT_NEAR(mean_span, 3.0, 0.15);
  return st;
}

}  // namespace

// The mask has T5's counts, starts with a non-noise span and alternates non-empty spans.
TEST(T5NoiseMask, CountsAndSpansOfRandomSpansNoiseMask) {
  for (int64_t n : {1, 2, 3, 7, 10, 20, 33, 100, 512}) {
    for (uint64_t i = 0; i < 50; ++i) {
      DrawStream rng(3, i, 0);
      int32_t spans = 0;
      const std::vector<uint8_t> m = random_spans_noise_mask(n, 0.15, 3.0, rng, &spans);
      ASSERT_EQ(static_cast<int64_t>(m.size()), n);
      const int64_t length = std::max<int64_t>(n, 2);
      const int64_t noise = std::clamp<int64_t>(std::llround(std::nearbyint(length * 0.15)), 1, length - 1);
      const int64_t want_spans = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(noise / 3.0)));
      if (n >= 2) {
        EXPECT_EQ(std::count(m.begin(), m.end(), 1), noise) << n;
        EXPECT_EQ(spans, want_spans) << n;
        EXPECT_EQ(m[0], 0) << "the first span is not noise";
      } else {
        EXPECT_EQ(spans, 0);  // the padded second token carried the noise
      }
    }
  }
  // A uniformly random composition: over many draws the first noise span of 3 noise tokens in 2 spans
  // has 1 or 2 tokens equally often.
  int64_t first_one = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    DrawStream rng(4, i, 0);
    const std::vector<uint8_t> m = random_spans_noise_mask(20, 0.15, 1.5, rng, nullptr);
    size_t j = 0;
    while (!m[j]) ++j;
    first_one += m[j + 1] == 0;
  }
  EXPECT_NEAR(static_cast<double>(first_one) / 4000.0, 0.5, 0.03);
}

TEST(T5Dataset, NoiseStatisticsAndExactReconstructionOnSyntheticData) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 600, 8);
  const auto data = open(dir / "corpus");
  const T5Dataset ds(data, all_documents(*data), Split::Train, synthetic_config(128, 32, 5000));
  ASSERT_GE(ds.size(), 5000);
  EXPECT_EQ(measure(ds, 5000).samples, 5000);
}

TEST(T5Dataset, NoiseStatisticsAndExactReconstructionOnBrown) {
  TempDir dir;
  const std::string prefix = test::preprocess_brown(dir.str(), true);
  if (prefix.empty()) GTEST_SKIP() << "../shared/data/brown.jsonl is absent (a fresh clone has no shared/)";
  const auto tok = make_tokenizer(read_data_sidecar(prefix).spec);
  const auto data = open(prefix);
  T5DatasetConfig c;
  c.encoder_seq_length = 256;
  c.decoder_seq_length = 64;
  c.num_samples = 4000;
  c.pad = tok->token_to_id("[PAD]");
  c.bos = tok->token_to_id("[CLS]");
  c.eos = tok->token_to_id("[SEP]");
  c.sentinels = t5_sentinel_ids(tok->vocab_size() + 100, 100);  // Megatron appends them to the vocabulary
  const T5Dataset ds(data, all_documents(*data), Split::Train, c);
  EXPECT_EQ(measure(ds, 4000).samples, 4000);
}

TEST(T5Dataset, SamplesAreDeterministicByIndex) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 200, 9);
  const T5DatasetConfig c = synthetic_config(64, 16, 1000);
  const T5Dataset first(open(dir / "corpus"), {0, 200}, Split::Train, c);
  const T5Dataset second(open(dir / "corpus"), {0, 200}, Split::Train, c);
  std::vector<T5Sample> forward;
  for (int64_t i = 0; i < first.size(); ++i) forward.push_back(first.sample(i));
  auto same = [](const T5Sample& x, const T5Sample& y) {
    return x.encoder_tokens == y.encoder_tokens && x.decoder_input == y.decoder_input &&
           x.decoder_labels == y.decoder_labels && x.loss_mask == y.loss_mask &&
           x.encoder_padding_mask == y.encoder_padding_mask && x.decoder_padding_mask == y.decoder_padding_mask;
  };
  int64_t differing = 0;
  for (int64_t i = first.size() - 1; i >= 0; --i)
    differing += !same(forward[static_cast<size_t>(i)], first.sample(i)) + !same(forward[static_cast<size_t>(i)], second.sample(i));
  EXPECT_EQ(differing, 0);
}

TEST(T5Dataset, BadParametersNameTheFlag) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 50, 10);
  const auto data = open(dir / "corpus");
  auto error_with = [&](const std::function<void(T5DatasetConfig&)>& change) {
    T5DatasetConfig c = synthetic_config(128, 32, 10);
    change(c);
    return error_of([&] { T5Dataset(data, all_documents(*data), Split::Train, c); });
  };
  // 511 tokens make round(76.65) = 77 noise tokens in 26 spans: a target of 104 with eos.
  const std::string e = error_with([](T5DatasetConfig& c) {
    c.encoder_seq_length = 512;
    c.decoder_seq_length = 64;
  });
  EXPECT_NE(e.find("--decoder-seq-length 64 is too short: a text of 511 tokens (--encoder-seq-length 512) makes a "
                   "decoder target of 104 tokens"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_with([](T5DatasetConfig& c) {
              c.encoder_seq_length = 512;
              c.decoder_seq_length = 104;
            }),
            "");
  EXPECT_NE(error_with([](T5DatasetConfig& c) { c.sentinels.resize(3); }).find("only 3 sentinel ids are given (--vocab-extra-ids)"),
            std::string::npos);
  for (double p : {0.0, 1.0, -0.2, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_NE(error_with([&](T5DatasetConfig& c) { c.noise_density = p; }).find("--mask-prob"), std::string::npos) << p;
  EXPECT_NE(error_with([](T5DatasetConfig& c) { c.encoder_seq_length = 1; }).find("--encoder-seq-length 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { t5_sentinel_ids(50, 0); }).find("--vocab-extra-ids 0"), std::string::npos);
  IndexedDatasetWriter w(dir / "empty", IndexDType::U16);
  w.add_document(nullptr, 0);
  w.finalize();
  const auto empty = open(dir / "empty");
  EXPECT_NE(error_of([&] { T5Dataset(empty, {0, 1}, Split::Train, synthetic_config(64, 16, 10)); })
                .find("empty: the train split gives no T5 sample"),
            std::string::npos);
}
