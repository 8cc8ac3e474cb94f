#include "data/bert_dataset.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace megadlm {

namespace {

// DataShuffle streams (Philox positions) of the segments; a sample's draws start at kSampleDraws.
constexpr uint32_t kStreamSegmentTargets = 16, kStreamSegmentShuffle = 17;
constexpr uint32_t kSampleDraws = uint32_t{1} << 24;

constexpr int64_t kMaxSegments = int64_t{1} << 40;

// A segment's target: max_num_tokens, or with probability short_seq_prob one uniform in [2, max].
int32_t draw_target(const SegmentOptions& o, uint64_t& draw) {
  DrawStream d(o.seed, draw++, kStreamSegmentTargets);
  if (d.uniform() >= o.short_seq_prob) return o.max_num_tokens;
  return static_cast<int32_t>(2 + d.below(o.max_num_tokens - 1));
}

bool has_long_sentence(const IndexedDataset& data, int64_t first, int64_t last) {
  for (int64_t s = first; s < last; ++s)
    if (data.sequence_length(s) > kBertLongSentence) return true;
  return false;
}

// One epoch of segments over the documents (helpers.cpp build_mapping_impl's inner loops).
void add_epoch(const IndexedDataset& data, SequenceRange documents, const SegmentOptions& o, uint64_t& draw,
               std::vector<SentenceSegment>& out) {
  for (int64_t d = documents.begin; d < documents.end; ++d) {
    const int64_t first = data.document_index(d), last = data.document_index(d + 1);
    // As Megatron, only a document of several sentences is checked for an over-long one.
    if (last - first < o.min_sentences || (last - first > 1 && has_long_sentence(data, first, last))) continue;
    int64_t start = first, tokens = 0, sentences = 0;
    int32_t target = draw_target(o, draw);
    for (int64_t s = first; s < last; ++s) {
      tokens += data.sequence_length(s);
      ++sentences;
      const int64_t remaining = last - s - 1;
      // Close when the target is reached and enough sentences are left for another segment, or at the end.
      if ((tokens >= target && remaining > 1 && sentences >= o.min_sentences) || remaining == 0) {
        if (tokens > 0) out.push_back({start, s + 1, target});
        start = s + 1;
        tokens = sentences = 0;
        if (remaining > 0) target = draw_target(o, draw);
      }
    }
  }
}

}  // namespace

std::vector<SentenceSegment> build_sentence_segments(const IndexedDataset& data, SequenceRange documents,
                                                     const SegmentOptions& o, int64_t* num_epochs) {
  MEGADLM_CHECK(documents.begin >= 0 && documents.begin <= documents.end && documents.end <= data.num_documents(),
                data.prefix(), ": document range [", documents.begin, ", ", documents.end, ") is outside the ",
                data.num_documents(), " documents");
  MEGADLM_CHECK(o.max_num_tokens >= 2, "the segment target ", o.max_num_tokens, " is below 2 tokens");
  MEGADLM_CHECK(o.num_samples <= kMaxSegments, o.num_samples, " samples are more than can be indexed (2^40)");
  std::vector<SentenceSegment> segs;
  uint64_t draw = 0;
  int64_t epochs = 0;
  do {
    const size_t before = segs.size();
    add_epoch(data, documents, o, draw, segs);
    ++epochs;
    if (segs.size() == before) break;  // no document gives a segment
  } while (o.num_samples > 0 && static_cast<int64_t>(segs.size()) < o.num_samples);
  // All epochs shuffled together, as Megatron shuffles the whole mapping.
  std::vector<int64_t> order(segs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  philox_shuffle(order.data(), static_cast<int64_t>(order.size()), o.seed, kStreamSegmentShuffle);
  std::vector<SentenceSegment> shuffled(segs.size());
  for (size_t i = 0; i < order.size(); ++i) shuffled[i] = segs[static_cast<size_t>(order[i])];
  if (num_epochs) *num_epochs = epochs;
  return shuffled;
}

std::string describe_documents(const IndexedDataset& data, SequenceRange documents, int32_t min_sentences) {
  int64_t empty = 0, one = 0, few = 0, long_sentence = 0;
  for (int64_t d = documents.begin; d < documents.end; ++d) {
    const int64_t first = data.document_index(d), last = data.document_index(d + 1), n = last - first;
    if (n == 0) ++empty;
    else if (n == 1) ++one;
    else if (n < min_sentences) ++few;
    else if (has_long_sentence(data, first, last)) ++long_sentence;
  }
  std::ostringstream s;
  s << "of its " << documents.size() << " documents, " << empty << " have no sentence, " << one
    << " have one sentence";
  if (min_sentences > 2) s << ", " << few << " have fewer than " << min_sentences;
  s << " and " << long_sentence << " hold a sentence over " << kBertLongSentence << " tokens";
  return s.str();
}

void read_segment(const IndexedDataset& data, const SentenceSegment& seg, std::vector<int32_t>& out,
                  std::vector<int64_t>& sentence_ends) {
  out.clear();
  sentence_ends.clear();
  for (int64_t s = seg.begin; s < seg.end; ++s) {
    const int64_t n = data.sequence_length(s), at = static_cast<int64_t>(out.size());
    out.resize(static_cast<size_t>(at + n));
    data.read(s, 0, n, out.data() + at);
    sentence_ends.push_back(at + n);
  }
}

BertTokens bert_tokens_of(const Tokenizer& tok) {
  BertTokens t;
  auto id = [&](const char* name) {
    const int32_t i = tok.token_to_id(name);
    MEGADLM_CHECK(i >= 0, "BERT data needs the token ", name, ", which the ", tok.spec().type,
                  " tokenizer does not have (use BertWordPieceLowerCase or BertWordPieceCase)");
    return i;
  };
  t.cls = id("[CLS]");
  t.sep = id("[SEP]");
  t.mask = id("[MASK]");
  t.pad = id("[PAD]");
  t.vocab_size = tok.vocab_size();
  t.continuation.assign(static_cast<size_t>(t.vocab_size), 0);
  for (int64_t i = 0; i < t.vocab_size; ++i) {
    const auto v = static_cast<int32_t>(i);
    t.continuation[static_cast<size_t>(i)] = tok.decode(&v, 1).rfind("##", 0) == 0 ? 1 : 0;
  }
  return t;
}

// ---- BertDataset -------------------------------------------------------------------------------------

BertDataset::BertDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split,
                         const BertDatasetConfig& config)
    : data_(std::move(data)), documents_(documents), split_(split), config_(config) {
  MEGADLM_CHECK(data_ != nullptr, "BertDataset: no indexed dataset");
  check_config();
  const BertTokens& t = config_.tokens;
  random_ids_skip_ = {t.cls, t.sep, t.mask, t.pad};
  std::sort(random_ids_skip_.begin(), random_ids_skip_.end());
  random_ids_skip_.erase(std::unique(random_ids_skip_.begin(), random_ids_skip_.end()), random_ids_skip_.end());

  const SegmentOptions o{static_cast<int32_t>(config_.seq_length - 3), config_.short_seq_prob,
                         config_.binary_head ? 2 : 1, config_.num_samples, config_.seed};
  segments_ = build_sentence_segments(*data_, documents_, o, &num_epochs_);
  if (!segments_.empty()) return;
  if (config_.binary_head)
    fail(data_->prefix(), ": the ", split_name(split_), " split gives no BERT sample with two sentences (",
         describe_documents(*data_, documents_, 2),
         "); the binary head (sentence-order prediction) needs documents of two or more sentences: make the data "
         "with preprocess_data --split-sentences, or train without the binary head (--bert-no-binary-head)");
  fail(data_->prefix(), ": the ", split_name(split_), " split gives no BERT sample (",
       describe_documents(*data_, documents_, 1), ")");
}

void BertDataset::check_config() const {
  const BertDatasetConfig& c = config_;
  const BertTokens& t = c.tokens;
  MEGADLM_CHECK(c.seq_length >= 5 && c.seq_length <= (int64_t{1} << 30), "--seq-length ", c.seq_length,
                " must be at least 5 for BERT ([CLS] A [SEP] B [SEP] with two tokens of text)");
  MEGADLM_CHECK(c.mask_prob > 0 && c.mask_prob < 1, "--mask-prob ", c.mask_prob, " must be in (0, 1)");
  MEGADLM_CHECK(c.short_seq_prob >= 0 && c.short_seq_prob <= 1, "--short-seq-prob ", c.short_seq_prob,
                " must be in [0, 1]");
  MEGADLM_CHECK(t.vocab_size > 4 && t.vocab_size <= (int64_t{1} << 31), "BERT vocabulary size ", t.vocab_size,
                " must exceed the 4 special tokens");
  for (int32_t id : {t.cls, t.sep, t.mask, t.pad})
    MEGADLM_CHECK(id >= 0 && id < t.vocab_size, "BERT special token id ", id, " is outside the vocabulary of ",
                  t.vocab_size);
  MEGADLM_CHECK(!c.whole_word_masking || static_cast<int64_t>(t.continuation.size()) == t.vocab_size,
                "whole-word masking needs the continuation flag of each of the ", t.vocab_size, " ids (got ",
                t.continuation.size(), ")");
}

BertSample BertDataset::sample(int64_t i) const {
  BertSample s;
  sample(i, s);
  return s;
}

void BertDataset::sample(int64_t i, BertSample& out) const {
  MEGADLM_CHECK(i >= 0 && i < size(), data_->prefix(), ": ", split_name(split_), " BERT sample ", i,
                " out of range [0, ", size(), ")");
  const SentenceSegment& seg = segments_[static_cast<size_t>(i)];
  std::vector<int32_t> text;
  std::vector<int64_t> ends;
  read_segment(*data_, seg, text, ends);
  for (int32_t id : text)
    MEGADLM_CHECK(id < config_.tokens.vocab_size, data_->prefix(), ": token id ", id, " in sentences [", seg.begin,
                  ", ", seg.end, ") is outside the BERT vocabulary of ", config_.tokens.vocab_size);
  DrawStream rng(config_.seed, static_cast<uint64_t>(i), kSampleDraws);
  const auto n = static_cast<int64_t>(text.size());
  out.is_random = 0;
  if (!config_.binary_head) return assemble(text.data(), n, nullptr, 0, seg.target, rng, out);
  // Step 1: A = sentences [0, a_end), B = the rest; a_end uniform in [1, sentences - 1].
  const auto sentences = static_cast<int64_t>(ends.size());
  const int64_t a_end = sentences >= 3 ? 1 + rng.below(sentences - 1) : 1;
  const int64_t na = ends[static_cast<size_t>(a_end - 1)];
  const int32_t* a = text.data();
  const int32_t* b = text.data() + na;
  int64_t nb = n - na;
  int64_t la = na;
  if (rng.uniform() < 0.5) {
    std::swap(a, b);
    std::swap(la, nb);
    out.is_random = 1;
  }
  assemble(a, la, b, nb, seg.target, rng, out);
}

void BertDataset::assemble(const int32_t* a, int64_t na, const int32_t* b, int64_t nb, int64_t target,
                           DrawStream& rng, BertSample& out) const {
  // Step 2: trim the longer side, a token at a time, from its front or back.
  while (na + nb > target) {
    const bool trim_a = na > nb;
    const int32_t*& p = trim_a ? a : b;
    int64_t& len = trim_a ? na : nb;
    if (rng.uniform() < 0.5) ++p;
    --len;
  }
  // Step 3: [CLS] A [SEP] B [SEP], padded.
  const BertTokens& t = config_.tokens;
  const auto T = static_cast<size_t>(config_.seq_length);
  out.tokens.assign(T, t.pad);
  out.token_types.assign(T, 0);
  out.labels.assign(T, -1);
  out.loss_mask.assign(T, 0);
  out.padding_mask.assign(T, 0);
  size_t at = 0;
  out.tokens[at++] = t.cls;
  const size_t a_at = at;
  at = std::copy(a, a + na, out.tokens.begin() + static_cast<std::ptrdiff_t>(at)) - out.tokens.begin();
  out.tokens[at++] = t.sep;
  const size_t b_at = at;
  if (nb > 0) {
    at = std::copy(b, b + nb, out.tokens.begin() + static_cast<std::ptrdiff_t>(at)) - out.tokens.begin();
    out.tokens[at++] = t.sep;
    std::fill(out.token_types.begin() + static_cast<std::ptrdiff_t>(b_at), out.token_types.begin() + static_cast<std::ptrdiff_t>(at), 1);
  }
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + static_cast<std::ptrdiff_t>(at), 1);
  mask_tokens(a_at, static_cast<size_t>(na), b_at, static_cast<size_t>(nb), rng, out);
}

void BertDataset::mask_tokens(size_t a_at, size_t na, size_t b_at, size_t nb, DrawStream& rng, BertSample& out) const {
  const BertTokens& t = config_.tokens;
  // Words: a token, with whole-word masking followed by its continuation tokens (within A or B).
  std::vector<std::pair<size_t, size_t>> words;  // (first position, tokens)
  for (const auto& [from, len] : {std::pair{a_at, na}, std::pair{b_at, nb}})
    for (size_t p = from; p < from + len; ++p) {
      const bool joins = config_.whole_word_masking && p > from &&
                         t.continuation[static_cast<size_t>(out.tokens[p])] != 0;
      if (joins) ++words.back().second;
      else words.emplace_back(p, 1);
    }
  const double n = static_cast<double>(na + nb);
  const auto want = std::max<size_t>(1, static_cast<size_t>(std::nearbyint(n * config_.mask_prob)));
  for (size_t k = words.size(); k > 1; --k)  // Fisher-Yates: the words in a random order
    std::swap(words[k - 1], words[static_cast<size_t>(rng.below(static_cast<int64_t>(k)))]);
  size_t chosen = 0;
  for (const auto& [first, len] : words) {
    if (chosen >= want) break;
    if (chosen + len > want) continue;
    for (size_t p = first; p < first + len; ++p) {
      out.labels[p] = out.tokens[p];
      out.loss_mask[p] = 1;
      if (rng.uniform() < 0.8) out.tokens[p] = t.mask;
      else if (rng.uniform() >= 0.5) out.tokens[p] = random_id(rng);
    }
    chosen += len;
  }
}

int32_t BertDataset::random_id(DrawStream& rng) const {
  auto id = rng.below(config_.tokens.vocab_size - static_cast<int64_t>(random_ids_skip_.size()));
  for (int32_t s : random_ids_skip_)  // ascending: step over each special id at or below
    if (id >= s) ++id;
  return static_cast<int32_t>(id);
}

}  // namespace megadlm
