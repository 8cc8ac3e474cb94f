#pragma once
// Megatron's BERT pretraining samples (megatron/legacy/data/bert_dataset.py, dataset_utils.py and
// helpers.cpp build_mapping) from a sentence-split IndexedDataset (preprocess_data --split-sentences:
// each sentence one sequence, the document index grouping them). docs/bert_t5_data.md describes the
// format, the flags and the measured statistics.
//
// Segments (the samples mapping): each document's sentences are walked in order and gathered into a
// segment until its token count reaches a target: max_num_tokens = seq_length - 3, or with probability
// short_seq_prob a shorter target uniform in [2, max_num_tokens]. A segment holds at least two
// sentences with the binary head (an A and a B part) and one without it; a segment closes early only
// when at least two sentences remain for the next. Documents with fewer sentences than a segment
// needs, or of two sentences or more with one over 512 tokens (Megatron's LONG_SENTENCE_LEN), give no
// segment. Epochs of
// segments (new targets each epoch) are made until num_samples are there, then shuffled together.
// The targets and the shuffle come from Philox under the seed, so the segments depend only on (data,
// documents, seq_length, short_seq_prob, binary head, num_samples, seed). They are rebuilt in memory
// each time (one pass over the sentence lengths per epoch), with no cache file.
//
// Sample i draws from Philox keyed by (seed, i) alone, so it is the same whichever samples were read
// before it and from any dataset object built with the same parameters:
//   1. with the binary head, the segment's sentences are cut at a random point into A and B (A is
//      the first sentence when there are two); with probability 0.5 A and B are swapped and is_random
//      is 1 (Megatron-core's sentence-order label). Without it, A is the whole segment and B empty;
//   2. while A + B exceeds the segment's target, one token is removed from the longer side (B on a
//      tie), from its front or back with probability 0.5 each;
//   3. tokens = [CLS] A [SEP] B [SEP] ([CLS] A [SEP] without B), token types 0 for [CLS] A [SEP] and
//      1 for B [SEP];
//   4. masking: of the n tokens of A and B, max(1, round(n * mask_prob)) are chosen (Python's round,
//      half to even), words in a random order, a word skipped when it would overshoot the count; each
//      chosen token becomes [MASK] with probability 0.8, stays itself with 0.1, and becomes a random id
//      with 0.1, uniform over the vocabulary without [CLS] [SEP] [MASK] [PAD]. A word is one token, or
//      with whole-word masking a token and the "##" continuation tokens after it. labels hold the
//      original id at chosen positions and -1 elsewhere; loss_mask is 1 there;
//   5. padded with [PAD] to seq_length; padding_mask 1 on the tokens, 0 on the padding.
// Megatron's masking also draws n-grams of up to 3 words and caps the count at mask_prob times the
// target; this one does neither.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/philox_draws.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

// The special ids BERT samples use, the vocabulary size, and which ids continue a word.
struct BertTokens {
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;
  int64_t vocab_size = 0;
  std::vector<uint8_t> continuation;  // [vocab_size] with whole-word masking: 1 for a "##" token
};
// Looks up [CLS] [SEP] [MASK] [PAD] by name and marks every id whose token starts with "##"; throws
// Error naming a missing token (a tokenizer that is not BERT's WordPiece).
BertTokens bert_tokens_of(const Tokenizer& tok);

struct BertDatasetConfig {
  int64_t seq_length = 0;      // --seq-length: tokens per sample, specials and padding included
  int64_t num_samples = 0;     // samples wanted; <= 0: one epoch of segments
  uint64_t seed = 1234;
  double mask_prob = 0.15;      // --mask-prob, in (0, 1)
  double short_seq_prob = 0.1;  // --short-seq-prob, in [0, 1]
  bool binary_head = true;      // false: --bert-no-binary-head (no A/B pairs, is_random always 0)
  bool whole_word_masking = false;
  BertTokens tokens;
};

// Megatron's LONG_SENTENCE_LEN: a document of several sentences with a longer one gives no segment.
inline constexpr int32_t kBertLongSentence = 512;

// One segment of the samples mapping: sentences [begin, end) of the IndexedDataset.
struct SentenceSegment {
  int64_t begin = 0, end = 0;
  int32_t target = 0;  // tokens of the sample's text after truncation, at most
};

struct SegmentOptions {
  int32_t max_num_tokens = 0;   // the target of a segment (seq_length minus the special tokens)
  double short_seq_prob = 0.1;  // probability of a shorter target, uniform in [2, max_num_tokens]
  int32_t min_sentences = 2;    // sentences a segment needs (2 for A/B pairs)
  int64_t num_samples = 0;      // segments wanted; <= 0: one epoch
  uint64_t seed = 1234;
};
// Megatron's samples mapping over the documents [documents.begin, documents.end), as described above;
// shared by the BERT and T5 datasets. Empty when no document gives a segment. *num_epochs gets the
// epochs made. Throws Error when num_samples would need more than 2^40 segments.
std::vector<SentenceSegment> build_sentence_segments(const IndexedDataset& data, SequenceRange documents,
                                                     const SegmentOptions& options, int64_t* num_epochs);

// Why `data` gives no segment over `documents`: how many documents have no sentence, one sentence,
// fewer than `min_sentences`, or a sentence over kBertLongSentence tokens.
std::string describe_documents(const IndexedDataset& data, SequenceRange documents, int32_t min_sentences);

// The tokens of a segment's sentences back to back (out) and where each sentence ends in them.
void read_segment(const IndexedDataset& data, const SentenceSegment& seg, std::vector<int32_t>& out,
                  std::vector<int64_t>& sentence_ends);

struct BertSample {
  std::vector<int32_t> tokens;        // [seq_length]
  std::vector<int32_t> token_types;   // [seq_length]: 0 for [CLS] A [SEP] (and padding), 1 for B [SEP]
  std::vector<int32_t> labels;        // [seq_length]: the original id where masked, -1 elsewhere
  std::vector<uint8_t> loss_mask;     // [seq_length]: 1 where masked
  std::vector<uint8_t> padding_mask;  // [seq_length]: 1 on tokens, 0 on padding
  int32_t is_random = 0;              // 1 when A and B were swapped
};

class BertDataset {
 public:
  // `documents`: the split's documents (indices into the document index), as Megatron splits BERT
  // data by documents: split_ranges(--split, data->num_documents()).
  BertDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split,
              const BertDatasetConfig& config);

  int64_t size() const { return static_cast<int64_t>(segments_.size()); }  // >= num_samples
  int64_t seq_length() const { return config_.seq_length; }
  int64_t num_epochs() const { return num_epochs_; }
  const BertDatasetConfig& config() const { return config_; }
  const IndexedDataset& indexed() const { return *data_; }
  const std::vector<SentenceSegment>& segments() const { return segments_; }  // in sample order

  void sample(int64_t i, BertSample& out) const;  // i in [0, size())
  BertSample sample(int64_t i) const;

 private:
  void check_config() const;
  // Steps 2-5 of a sample from A and B (spans of the segment's tokens).
  void assemble(const int32_t* a, int64_t na, const int32_t* b, int64_t nb, int64_t target, DrawStream& rng,
                BertSample& out) const;
  // Step 4 over A at out.tokens[a_at, a_at + na) and B at [b_at, b_at + nb).
  void mask_tokens(size_t a_at, size_t na, size_t b_at, size_t nb, DrawStream& rng, BertSample& out) const;
  // A replacement id: uniform over the vocabulary without the special ids.
  int32_t random_id(DrawStream& rng) const;

  std::shared_ptr<const IndexedDataset> data_;
  SequenceRange documents_;
  Split split_;
  BertDatasetConfig config_;
  std::vector<int32_t> random_ids_skip_;  // the sorted special ids a random replacement skips
  std::vector<SentenceSegment> segments_;
  int64_t num_epochs_ = 0;
};

}  // namespace megadlm
