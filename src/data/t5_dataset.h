#pragma once
// T5 span-corruption samples from sentence-split data (preprocess_data --split-sentences), over the
// segments of the BERT samples mapping (data/bert_dataset.h, one sentence or more, no A/B parts).
// docs/bert_t5_data.md describes the format, the flags and the measured statistics.
//
// Sample i draws from Philox keyed by (seed, i) alone:
//   1. the segment's sentences back to back, cut to the segment's target (at most
//      encoder_seq_length tokens): the n tokens of the text;
//   2. the noise mask of T5's random_spans_noise_mask (t5.data.preprocessors): num_noise =
//      round(n * noise_density) clamped to [1, n - 1], num_spans = max(1, round(num_noise /
//      mean_noise_span_length)) (at most the non-noise count), the noise tokens and the others each cut
//      into num_spans non-empty spans at random (a uniformly random composition), interleaved starting
//      with a non-noise span; round is half to even, as tf.round;
//   3. encoder input: the text with noise span k replaced by sentinels[k]; decoder labels: for each
//      span sentinels[k] then its tokens, then eos; decoder input: bos then the labels but the last
//      (Megatron's t5_decoder_in); all padded with pad (labels with -1) to their lengths.
// Megatron's own T5 dataset masks n-grams of geometric lengths through BERT's masking code instead;
// this one follows T5's noise mask. A decoder target longer than decoder_seq_length for the longest
// text is an error naming --decoder-seq-length when the dataset is built, so no sample is cut.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/bert_dataset.h"
#include "data/indexed_dataset.h"
#include "data/philox_draws.h"

namespace megadlm {

struct T5DatasetConfig {
  int64_t encoder_seq_length = 512;  // --encoder-seq-length (Megatron's --seq-length for T5)
  int64_t decoder_seq_length = 128;  // --decoder-seq-length
  int64_t num_samples = 0;           // samples wanted; <= 0: one epoch of segments
  uint64_t seed = 1234;
  double noise_density = 0.15;          // --mask-prob, in (0, 1)
  double mean_noise_span_length = 3.0;  // T5's mean_noise_span_length, >= 1
  double short_seq_prob = 0.1;          // --short-seq-prob, in [0, 1]
  int32_t pad = -1, bos = -1, eos = -1;
  std::vector<int32_t> sentinels;  // <extra_id_0>, <extra_id_1>, ...: span k is replaced by sentinels[k]
};

// The sentinel ids of Megatron's --vocab-extra-ids: the last `extra_ids` ids of a vocabulary of
// `vocab_size` ids (extra ids included), <extra_id_0> first.
std::vector<int32_t> t5_sentinel_ids(int64_t vocab_size, int64_t extra_ids);

struct T5Sample {
  std::vector<int32_t> encoder_tokens;         // [encoder_seq_length]
  std::vector<uint8_t> encoder_padding_mask;   // [encoder_seq_length]: 1 on tokens, 0 on padding
  std::vector<int32_t> decoder_input;          // [decoder_seq_length]
  std::vector<int32_t> decoder_labels;         // [decoder_seq_length]: -1 on padding
  std::vector<uint8_t> loss_mask;              // [decoder_seq_length]: 1 where decoder_labels is a token
  std::vector<uint8_t> decoder_padding_mask;   // [decoder_seq_length]: the same, for the decoder input
  int32_t num_noise = 0, num_spans = 0;        // of the noise mask
};

// The noise mask of T5's random_spans_noise_mask over n tokens (n >= 2): is_noise[j] for each token.
// Sets *num_spans to the noise spans made.
std::vector<uint8_t> random_spans_noise_mask(int64_t n, double noise_density, double mean_noise_span_length,
                                             DrawStream& rng, int32_t* num_spans);

// The decoder length (labels with eos) that a text of n tokens needs.
int64_t t5_decoder_length(int64_t n, double noise_density, double mean_noise_span_length);

class T5Dataset {
 public:
  T5Dataset(std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split,
            const T5DatasetConfig& config);

  int64_t size() const { return static_cast<int64_t>(segments_.size()); }  // >= num_samples
  const T5DatasetConfig& config() const { return config_; }
  const IndexedDataset& indexed() const { return *data_; }
  const std::vector<SentenceSegment>& segments() const { return segments_; }  // in sample order

  void sample(int64_t i, T5Sample& out) const;  // i in [0, size())
  T5Sample sample(int64_t i) const;

 private:
  void check_config() const;

  std::shared_ptr<const IndexedDataset> data_;
  SequenceRange documents_;
  Split split_;
  T5DatasetConfig config_;
  std::vector<SentenceSegment> segments_;
};

}  // namespace megadlm
