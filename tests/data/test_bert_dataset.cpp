// BertDataset (data/bert_dataset.h): the samples mapping, the layout of each sample, the masking
// statistics measured over thousands of samples (synthetic data and Brown), determinism by index, and
// the errors for data without sentence pairs and bad parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bert_dataset.h"
#include "data/indexed_dataset.h"
#include "sentence_corpus.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"

using namespace megadlm;

namespace {

using test::error_of;
using test::TempDir;

BertTokens synthetic_tokens() {
  BertTokens t;
  t.cls = test::kSyntheticCls;
  t.sep = test::kSyntheticSep;
  t.mask = test::kSyntheticMask;
  t.pad = test::kSyntheticPad;
  t.vocab_size = test::kSyntheticVocab;
  t.continuation.assign(test::kSyntheticVocab, 0);
  for (int32_t id = test::kSyntheticFirstContinuation; id < test::kSyntheticVocab; ++id) t.continuation[id] = 1;
  return t;
}

BertDatasetConfig config_of(const BertTokens& tokens, int64_t seq_length, int64_t num_samples) {
  BertDatasetConfig c;
  c.seq_length = seq_length;
  c.num_samples = num_samples;
  c.seed = 77;
  c.tokens = tokens;
  return c;
}

std::shared_ptr<const IndexedDataset> open(const std::string& prefix) { return std::make_shared<IndexedDataset>(prefix); }

SequenceRange all_documents(const IndexedDataset& d) { return {0, d.num_documents()}; }

// Counts over samples; `violations` counts samples whose layout breaks a rule (the first is described).
struct BertStats {
  int64_t samples = 0, is_random = 0, text_tokens = 0, masked = 0, to_mask = 0, kept = 0, to_random = 0;
  int64_t violations = 0;
  std::string first_violation;
  void violate(int64_t i, const std::string& why) {
    if (violations++ == 0) first_violation = "sample " + std::to_string(i) + ": " + why;
  }
  double masked_fraction() const { return static_cast<double>(masked) / static_cast<double>(text_tokens); }
  double share(int64_t k) const { return static_cast<double>(k) / static_cast<double>(masked); }
  double random_fraction() const { return static_cast<double>(is_random) / static_cast<double>(samples); }
};

bool is_special(const BertTokens& t, int32_t id) { return id == t.cls || id == t.sep || id == t.mask || id == t.pad; }

// Whether `part` occurs in `text` at or after `from`; sets *at to where it occurs.
bool find_from(const std::vector<int32_t>& text, const std::vector<int32_t>& part, size_t from, size_t* at) {
  const auto it = std::search(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), part.begin(), part.end());
  *at = static_cast<size_t>(it - text.begin());
  return it != text.end() || part.empty();
}

// Checks sample i's layout against its segment and adds it to the counts.
void check_sample(const BertDataset& ds, int64_t i, const BertSample& s, BertStats& st) {
  const BertDatasetConfig& c = ds.config();
  const BertTokens& t = c.tokens;
  const auto T = static_cast<size_t>(c.seq_length);
  if (s.tokens.size() != T || s.token_types.size() != T || s.labels.size() != T || s.loss_mask.size() != T ||
      s.padding_mask.size() != T)
    return st.violate(i, "a field is not seq_length long");
  size_t len = 0;
  while (len < T && s.padding_mask[len] == 1) ++len;
  for (size_t p = len; p < T; ++p)
    if (s.padding_mask[p] != 0 || s.tokens[p] != t.pad || s.labels[p] != -1 || s.token_types[p] != 0)
      return st.violate(i, "padding is not [PAD] with mask 0, label -1, type 0");
  if (len < 3 || s.tokens[0] != t.cls || s.tokens[len - 1] != t.sep) return st.violate(i, "not [CLS] ... [SEP]");
  size_t b_at = len;  // first position of type 1
  for (size_t p = 0; p < len; ++p)
    if (s.token_types[p] == 1) {
      b_at = p;
      break;
    }
  for (size_t p = b_at; p < len; ++p)
    if (s.token_types[p] != 1) return st.violate(i, "token types are not 0...0 1...1");
  if (s.tokens[b_at - 1] != t.sep) return st.violate(i, "A does not end with [SEP]");
  const size_t na = b_at - 2, nb = b_at < len ? len - b_at - 1 : 0;
  if (c.binary_head && (na == 0 || nb == 0)) return st.violate(i, "A or B is empty with the binary head");
  if (!c.binary_head && (nb != 0 || s.is_random != 0)) return st.violate(i, "a B part without the binary head");
  if (na + nb > T - 3) return st.violate(i, "A + B exceeds seq_length - 3");
  // Masking: labels and loss mask agree; specials are never chosen; the count is max(1, round(n p)).
  std::vector<int32_t> original(s.tokens.begin(), s.tokens.begin() + static_cast<std::ptrdiff_t>(len));
  int64_t chosen = 0;
  for (size_t p = 0; p < T; ++p) {
    if ((s.loss_mask[p] == 1) != (s.labels[p] != -1)) return st.violate(i, "loss mask and labels disagree");
    if (s.loss_mask[p] == 0) continue;
    if (p == 0 || p == b_at - 1 || p + 1 == len || p >= len) return st.violate(i, "a special position is masked");
    ++chosen;
    original[p] = s.labels[p];
    if (s.tokens[p] == t.mask) ++st.to_mask;
    else if (s.tokens[p] == s.labels[p]) ++st.kept;
    else if (is_special(t, s.tokens[p]) || s.tokens[p] < 0 || s.tokens[p] >= t.vocab_size)
      return st.violate(i, "a random replacement is special or outside the vocabulary");
    else ++st.to_random;
  }
  const auto n = static_cast<int64_t>(na + nb);
  const auto want = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * c.mask_prob)));
  if (!c.whole_word_masking && chosen != want) return st.violate(i, "masked count is not max(1, round(n p))");
  if (c.whole_word_masking && chosen > want) return st.violate(i, "whole-word masking overshoots the count");
  // With whole-word masking a word's tokens are masked together.
  if (c.whole_word_masking)
    for (const auto& [from, count] : {std::pair{size_t{1}, na}, std::pair{b_at, nb}})
      for (size_t p = from + 1; p < from + count; ++p)
        if (t.continuation[static_cast<size_t>(original[p])] && s.loss_mask[p] != s.loss_mask[p - 1])
          return st.violate(i, "a word is masked in part");
  // A and B are pieces of the segment's text, the first one before the second.
  std::vector<int32_t> text;
  std::vector<int64_t> ends;
  read_segment(ds.indexed(), ds.segments()[static_cast<size_t>(i)], text, ends);
  std::vector<int32_t> a(original.begin() + 1, original.begin() + 1 + static_cast<std::ptrdiff_t>(na));
  std::vector<int32_t> b(original.begin() + static_cast<std::ptrdiff_t>(b_at),
                         original.begin() + static_cast<std::ptrdiff_t>(b_at + nb));
  if (s.is_random) std::swap(a, b);
  size_t a_at = 0, b_found = 0;
  if (!find_from(text, a, 0, &a_at) || !find_from(text, b, a_at + a.size(), &b_found))
    return st.violate(i, "A and B are not in order in the segment's text");
  ++st.samples;
  st.is_random += s.is_random;
  st.text_tokens += n;
  st.masked += chosen;
}

BertStats measure(const BertDataset& ds, int64_t n) {
  BertStats st;
  BertSample s;
  for (int64_t i = 0; i < n; ++i) {
    ds.sample(i, s);
    check_sample(ds, i, s, st);
  }
  return st;
}

void expect_megatron_statistics(const BertStats& st, bool binary_head, double mask_tolerance = 0.01) {
  // The measured values, for docs/bert_t5_data.md.
  std::printf("  measured over %lld samples (%lld text tokens): masked %.4f, of those [MASK] %.4f, kept %.4f, "
              "random %.4f; is_random %.4f\n",
              static_cast<long long>(st.samples), static_cast<long long>(st.text_tokens), st.masked_fraction(),
              st.share(st.to_mask), st.share(st.kept), st.share(st.to_random), st.random_fraction());
  EXPECT_EQ(st.violations, 0) << st.first_violation;
  EXPECT_NEAR(st.masked_fraction(), 0.15, mask_tolerance);
  EXPECT_NEAR(st.share(st.to_mask), 0.8, 0.02);
  EXPECT_NEAR(st.share(st.kept), 0.1, 0.02);
  EXPECT_NEAR(st.share(st.to_random), 0.1, 0.02);
  if (binary_head) EXPECT_NEAR(st.random_fraction(), 0.5, 0.03);
  else EXPECT_EQ(st.is_random, 0);
}

bool same(const BertSample& x, const BertSample& y) {
  return x.tokens == y.tokens && x.token_types == y.token_types && x.labels == y.labels && x.loss_mask == y.loss_mask &&
         x.padding_mask == y.padding_mask && x.is_random == y.is_random;
}

}  // namespace

// The samples mapping: segments of whole sentences of one document, two or more each with the binary
// head, targets in [2, seq_length - 3] with about short_seq_prob of them short; epochs for num_samples.
TEST(BertSegments, WholeSentencesOfOneDocumentWithShortTargets) {
  TempDir dir;
  const auto docs = test::write_sentence_corpus(dir / "corpus", 400, 1);
  const auto data = open(dir / "corpus");
  std::vector<int64_t> doc_of_sentence;
  for (size_t d = 0; d < docs.size(); ++d) doc_of_sentence.insert(doc_of_sentence.end(), docs[d].size(), static_cast<int64_t>(d));
  for (bool binary_head : {true, false}) {
    SegmentOptions o;
    o.max_num_tokens = 61;
    o.short_seq_prob = 0.25;
    o.min_sentences = binary_head ? 2 : 1;
    o.num_samples = 5000;
    o.seed = 5;
    int64_t epochs = 0;
    const auto segs = build_sentence_segments(*data, all_documents(*data), o, &epochs);
    ASSERT_GE(static_cast<int64_t>(segs.size()), o.num_samples);
    EXPECT_GT(epochs, 1);
    int64_t short_targets = 0, sentences_covered = 0;
    for (const SentenceSegment& s : segs) {
      ASSERT_GE(s.end - s.begin, o.min_sentences);
      ASSERT_EQ(doc_of_sentence[s.begin], doc_of_sentence[s.end - 1]) << "a segment spans documents";
      ASSERT_TRUE(s.target >= 2 && s.target <= o.max_num_tokens) << s.target;
      short_targets += s.target < o.max_num_tokens;
      sentences_covered += s.end - s.begin;
    }
    // A short target equals the maximum 1 time in 60, hence the factor.
    EXPECT_NEAR(static_cast<double>(short_targets) / static_cast<double>(segs.size()), 0.25 * 59.0 / 60.0, 0.03);
    // Every epoch covers each usable document's sentences once.
    int64_t usable = 0;
    for (const auto& d : docs) usable += static_cast<int64_t>(d.size()) >= o.min_sentences ? static_cast<int64_t>(d.size()) : 0;
    EXPECT_EQ(sentences_covered, usable * epochs);
    // Deterministic from the seed, and another seed gives another order.
    EXPECT_EQ(build_sentence_segments(*data, all_documents(*data), o, nullptr).front().begin, segs.front().begin);
    o.seed = 6;
    const auto other = build_sentence_segments(*data, all_documents(*data), o, nullptr);
    EXPECT_FALSE(std::equal(segs.begin(), segs.begin() + 20, other.begin(),
                            [](const SentenceSegment& x, const SentenceSegment& y) { return x.begin == y.begin; }));
  }
}

// Thousands of samples of synthetic data: the layout rules, 15% masked, 80/10/10, is_random 50%.
TEST(BertDataset, MaskingAndPairStatisticsOnSyntheticData) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 600, 2);
  const auto data = open(dir / "corpus");
  for (bool binary_head : {true, false}) {
    BertDatasetConfig c = config_of(synthetic_tokens(), 128, 6000);
    c.binary_head = binary_head;
    const BertDataset ds(data, all_documents(*data), Split::Train, c);
    ASSERT_GE(ds.size(), 6000);
    const BertStats st = measure(ds, 6000);
    SCOPED_TRACE(binary_head ? "binary head" : "no binary head");
    expect_megatron_statistics(st, binary_head);
  }
}

TEST(BertDataset, WholeWordMaskingMasksWordsTogether) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 600, 3);
  const auto data = open(dir / "corpus");
  BertDatasetConfig c = config_of(synthetic_tokens(), 96, 4000);
  c.whole_word_masking = true;
  const BertDataset ds(data, all_documents(*data), Split::Train, c);
  // Words average 1.25 tokens here; the count falls short of 15% when the last word would overshoot.
  expect_megatron_statistics(measure(ds, 4000), true, 0.015);
}

// Sample i is a function of (seed, i): the same read in reverse order and from a second object.
TEST(BertDataset, SamplesAreDeterministicByIndex) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 300, 4);
  const BertDatasetConfig c = config_of(synthetic_tokens(), 64, 2000);
  const auto data = open(dir / "corpus");
  const BertDataset first(data, all_documents(*data), Split::Train, c);
  const BertDataset second(open(dir / "corpus"), all_documents(*data), Split::Train, c);
  std::vector<BertSample> forward;
  for (int64_t i = 0; i < first.size(); ++i) forward.push_back(first.sample(i));
  int64_t differing = 0;
  for (int64_t i = first.size() - 1; i >= 0; --i)
    differing += !same(forward[static_cast<size_t>(i)], first.sample(i)) + !same(forward[static_cast<size_t>(i)], second.sample(i));
  EXPECT_EQ(differing, 0);
  BertDatasetConfig other = c;
  other.seed = c.seed + 1;
  const BertDataset reseeded(data, all_documents(*data), Split::Train, other);
  EXPECT_FALSE(same(forward[0], reseeded.sample(0)));
}

// Brown, split into sentences by preprocess_data and tokenized with the WordPiece test vocabulary.
TEST(BertDataset, MaskingAndPairStatisticsOnBrown) {
  TempDir dir;
  const std::string prefix = test::preprocess_brown(dir.str(), true);
  if (prefix.empty()) GTEST_SKIP() << "../shared/data/brown.jsonl is absent (a fresh clone has no shared/)";
  const auto tok = make_tokenizer(read_data_sidecar(prefix).spec);
  const auto data = open(prefix);
  for (bool whole_word : {false, true}) {
    BertDatasetConfig c = config_of(bert_tokens_of(*tok), 128, 5000);
    c.whole_word_masking = whole_word;
    const BertDataset ds(data, all_documents(*data), Split::Train, c);
    SCOPED_TRACE(whole_word ? "whole-word masking" : "token masking");
    expect_megatron_statistics(measure(ds, 5000), true, whole_word ? 0.015 : 0.01);
  }
}

// Data without two-sentence documents cannot feed the binary head: an error naming the data and why.
TEST(BertDataset, DataWithoutSentencePairsIsAnErrorNamingThePrefix) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir / "single", IndexDType::U16);
    for (int d = 0; d < 20; ++d) w.add_document(std::vector<int32_t>(10 + d, 7));  // one sentence each
    w.add_document(nullptr, 0);
    w.finalize();
  }
  const auto data = open(dir / "single");
  const BertDatasetConfig c = config_of(synthetic_tokens(), 64, 100);
  const std::string e = error_of([&] { BertDataset(data, all_documents(*data), Split::Train, c); });
  for (const char* part : {"single", "no BERT sample with two sentences", "1 have no sentence", "20 have one sentence",
                           "--split-sentences", "--bert-no-binary-head"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;
  BertDatasetConfig no_head = c;
  no_head.binary_head = false;
  const BertDataset ok(data, all_documents(*data), Split::Train, no_head);
  EXPECT_GE(ok.size(), 100);
  EXPECT_EQ(ok.sample(0).is_random, 0);

  // Only empty documents: no sample even without the binary head.
  IndexedDatasetWriter w(dir / "empty", IndexDType::U16);
  w.add_document(nullptr, 0);
  w.finalize();
  const auto empty = open(dir / "empty");
  EXPECT_NE(error_of([&] { BertDataset(empty, all_documents(*empty), Split::Valid, no_head); })
                .find("the valid split gives no BERT sample (of its 1 documents, 1 have no sentence"),
            std::string::npos);
}

// A document-level (not sentence-split) file has one sequence per document: the same error.
TEST(BertDataset, DocumentLevelBrownWithTheBinaryHeadIsTheSameError) {
  TempDir dir;
  const std::string prefix = test::preprocess_brown(dir.str(), false);
  if (prefix.empty()) GTEST_SKIP() << "../shared/data/brown.jsonl is absent (a fresh clone has no shared/)";
  const auto tok = make_tokenizer(read_data_sidecar(prefix).spec);
  const auto data = open(prefix);
  const BertDatasetConfig c = config_of(bert_tokens_of(*tok), 128, 100);
  const std::string e = error_of([&] { BertDataset(data, all_documents(*data), Split::Train, c); });
  EXPECT_NE(e.find("brown_text_document: the train split gives no BERT sample with two sentences (of its 500 "
                   "documents, 0 have no sentence, 500 have one sentence"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--split-sentences"), std::string::npos) << e;
}

TEST(BertDataset, BadParametersNameTheFlag) {
  TempDir dir;
  test::write_sentence_corpus(dir / "corpus", 50, 5);
  const auto data = open(dir / "corpus");
  const BertDatasetConfig good = config_of(synthetic_tokens(), 64, 10);
  auto error_with = [&](const std::function<void(BertDatasetConfig&)>& change) {
    BertDatasetConfig c = good;
    change(c);
    return error_of([&] { BertDataset(data, all_documents(*data), Split::Train, c); });
  };
  for (double p : {0.0, 1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_NE(error_with([&](BertDatasetConfig& c) { c.mask_prob = p; }).find("--mask-prob"), std::string::npos) << p;
  EXPECT_NE(error_with([](BertDatasetConfig& c) { c.short_seq_prob = 1.5; }).find("--short-seq-prob 1.5 must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_with([](BertDatasetConfig& c) { c.seq_length = 4; }).find("--seq-length 4 must be at least 5"),
            std::string::npos);
  EXPECT_NE(error_with([](BertDatasetConfig& c) { c.tokens.mask = 5000; }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_with([](BertDatasetConfig& c) {
              c.whole_word_masking = true;
              c.tokens.continuation.clear();
            }).find("whole-word masking needs"),
            std::string::npos);
  const BertDataset ds(data, all_documents(*data), Split::Train, good);
  EXPECT_NE(error_of([&] { ds.sample(ds.size()); }).find("out of range"), std::string::npos);
  // Data of a larger vocabulary than the tokens given.
  BertDatasetConfig small = good;
  small.tokens.vocab_size = 10;
  small.tokens.continuation.resize(10);
  const BertDataset narrow(data, all_documents(*data), Split::Train, small);
  EXPECT_NE(error_of([&] { narrow.sample(0); }).find("outside the BERT vocabulary of 10"), std::string::npos);
  // A tokenizer without BERT's special tokens.
  TokenizerSpec spec;
  spec.type = "ByteTokenizer";
  EXPECT_NE(error_of([&] { bert_tokens_of(*make_tokenizer(spec)); }).find("needs the token [CLS]"), std::string::npos);
}

// Megatron's LONG_SENTENCE_LEN: a document of several sentences with one over 512 tokens gives no
// segment; a document of that one sentence alone does (without the binary head), cut to its target.
TEST(BertSegments, LongSentencesDropSeveralSentenceDocumentsOnly) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir / "long", IndexDType::U16);
    const std::vector<int32_t> long_and_short(kBertLongSentence + 1 + 5, 9);
    w.add_document(long_and_short.data(), static_cast<int64_t>(long_and_short.size()),
                   std::vector<int32_t>{kBertLongSentence + 1, 5});
    w.add_document(long_and_short.data(), kBertLongSentence + 1);
    w.finalize();
  }
  const auto data = open(dir / "long");
  const std::string e = error_of([&] { BertDataset(data, all_documents(*data), Split::Train, config_of(synthetic_tokens(), 64, 4)); });
  EXPECT_NE(e.find("1 have one sentence and 1 hold a sentence over 512 tokens"), std::string::npos) << e;
  BertDatasetConfig c = config_of(synthetic_tokens(), 64, 4);
  c.binary_head = false;
  const BertDataset ds(data, all_documents(*data), Split::Train, c);
  for (const SentenceSegment& s : ds.segments()) EXPECT_EQ(s.begin, 2) << "only the one-sentence document";
  BertStats st;
  check_sample(ds, 0, ds.sample(0), st);
  EXPECT_EQ(st.violations, 0) << st.first_violation;
}
