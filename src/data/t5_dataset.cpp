#include "data/t5_dataset.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megadlm {

namespace {

// A sample's draws start here (DataShuffle positions; the BERT samples use 1 << 24).
constexpr uint32_t kSampleDraws = uint32_t{2} << 24;

struct NoiseCounts {
  int64_t length = 0, noise = 0, spans = 0;
};

// random_spans_noise_mask's counts for n tokens (computed over max(n, 2), as T5 does).
NoiseCounts noise_counts(int64_t n, double density, double mean_span) {
  NoiseCounts c;
  c.length = std::max<int64_t>(n, 2);
  const auto noise = static_cast<int64_t>(std::nearbyint(static_cast<double>(c.length) * density));
  c.noise = std::clamp<int64_t>(noise, 1, c.length - 1);
  const auto spans = static_cast<int64_t>(std::nearbyint(static_cast<double>(c.noise) / mean_span));
  c.spans = std::clamp<int64_t>(spans, 1, std::min(c.noise, c.length - c.noise));
  return c;
}

// `items` cut into `parts` non-empty pieces at random: parts - 1 distinct cut points among the items - 1
// gaps (T5's _random_segmentation).
std::vector<int64_t> random_segmentation(int64_t items, int64_t parts, DrawStream& rng) {
  std::vector<uint8_t> cut(static_cast<size_t>(items - 1), 0);
  std::fill(cut.begin(), cut.begin() + (parts - 1), 1);
  for (size_t k = cut.size(); k > 1; --k) std::swap(cut[k - 1], cut[static_cast<size_t>(rng.below(static_cast<int64_t>(k)))]);
  std::vector<int64_t> lengths{1};
  for (uint8_t c : cut) {
    if (c) lengths.push_back(1);
    else ++lengths.back();
  }
  return lengths;
}

}  // namespace

std::vector<int32_t> t5_sentinel_ids(int64_t vocab_size, int64_t extra_ids) {
  MEGADLM_CHECK(extra_ids >= 1 && extra_ids < vocab_size, "--vocab-extra-ids ", extra_ids,
                " must be at least 1 and below the vocabulary size ", vocab_size);
  std::vector<int32_t> ids;
  for (int64_t k = 0; k < extra_ids; ++k) ids.push_back(static_cast<int32_t>(vocab_size - extra_ids + k));
  return ids;
}

int64_t t5_decoder_length(int64_t n, double noise_density, double mean_noise_span_length) {
  const NoiseCounts c = noise_counts(n, noise_density, mean_noise_span_length);
  return c.noise + c.spans + 1;
}

std::vector<uint8_t> random_spans_noise_mask(int64_t n, double noise_density, double mean_noise_span_length,
                                             DrawStream& rng, int32_t* num_spans) {
  const NoiseCounts c = noise_counts(n, noise_density, mean_noise_span_length);
  const std::vector<int64_t> noise = random_segmentation(c.noise, c.spans, rng);
  const std::vector<int64_t> other = random_segmentation(c.length - c.noise, c.spans, rng);
  std::vector<uint8_t> mask;
  mask.reserve(static_cast<size_t>(c.length));
  for (int64_t k = 0; k < c.spans; ++k) {
    mask.insert(mask.end(), static_cast<size_t>(other[static_cast<size_t>(k)]), 0);
    mask.insert(mask.end(), static_cast<size_t>(noise[static_cast<size_t>(k)]), 1);
  }
  mask.resize(static_cast<size_t>(n));  // T5 pads a 1-token text to 2 and cuts the mask back
  int32_t spans = 0;
  for (size_t j = 0; j < mask.size(); ++j) spans += mask[j] && (j == 0 || !mask[j - 1]);
  if (num_spans) *num_spans = spans;
  return mask;
}

// ---- T5Dataset ----------------------------------------------------------------------------------------

T5Dataset::T5Dataset(std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split,
                     const T5DatasetConfig& config)
    : data_(std::move(data)), documents_(documents), split_(split), config_(config) {
  MEGADLM_CHECK(data_ != nullptr, "T5Dataset: no indexed dataset");
  check_config();
  const SegmentOptions o{static_cast<int32_t>(config_.encoder_seq_length), config_.short_seq_prob, 1,
                         config_.num_samples, config_.seed};
  segments_ = build_sentence_segments(*data_, documents_, o, nullptr);
  MEGADLM_CHECK(!segments_.empty(), data_->prefix(), ": the ", split_name(split_), " split gives no T5 sample (",
                describe_documents(*data_, documents_, 1), ")");
}

void T5Dataset::check_config() const {
  const T5DatasetConfig& c = config_;
  MEGADLM_CHECK(c.encoder_seq_length >= 2 && c.encoder_seq_length <= (int64_t{1} << 24), "--encoder-seq-length ",
                c.encoder_seq_length, " must be in [2, 2^24]");
  MEGADLM_CHECK(c.decoder_seq_length >= 2, "--decoder-seq-length ", c.decoder_seq_length, " must be at least 2");
  MEGADLM_CHECK(c.noise_density > 0 && c.noise_density < 1, "--mask-prob ", c.noise_density,
                " (T5's noise density) must be in (0, 1)");
  MEGADLM_CHECK(c.mean_noise_span_length >= 1 && std::isfinite(c.mean_noise_span_length),
                "the mean noise span length ", c.mean_noise_span_length, " must be at least 1");
  MEGADLM_CHECK(c.short_seq_prob >= 0 && c.short_seq_prob <= 1, "--short-seq-prob ", c.short_seq_prob,
                " must be in [0, 1]");
  MEGADLM_CHECK(c.pad >= 0 && c.bos >= 0 && c.eos >= 0, "T5 needs pad, bos and eos ids (got ", c.pad, ", ", c.bos,
                ", ", c.eos, ")");
  // The longest text decides the most spans and the longest decoder target.
  int64_t most_spans = 0, longest = 0, longest_at = 0;
  for (int64_t n = 1; n <= c.encoder_seq_length; ++n) {
    most_spans = std::max(most_spans, noise_counts(n, c.noise_density, c.mean_noise_span_length).spans);
    const int64_t len = t5_decoder_length(n, c.noise_density, c.mean_noise_span_length);
    if (len > longest) {
      longest = len;
      longest_at = n;
    }
  }
  MEGADLM_CHECK(static_cast<int64_t>(c.sentinels.size()) >= most_spans, "T5 samples of up to ",
                c.encoder_seq_length, " tokens (--encoder-seq-length) make up to ", most_spans, " noise spans, but only ",
                c.sentinels.size(), " sentinel ids are given (--vocab-extra-ids)");
  MEGADLM_CHECK(longest <= c.decoder_seq_length, "--decoder-seq-length ", c.decoder_seq_length,
                " is too short: a text of ", longest_at, " tokens (--encoder-seq-length ", c.encoder_seq_length,
                ") makes a decoder target of ", longest, " tokens (noise, one sentinel per span, eos)");
}

T5Sample T5Dataset::sample(int64_t i) const {
  T5Sample s;
  sample(i, s);
  return s;
}

void T5Dataset::sample(int64_t i, T5Sample& out) const {
  MEGADLM_CHECK(i >= 0 && i < size(), data_->prefix(), ": ", split_name(split_), " T5 sample ", i,
                " out of range [0, ", size(), ")");
  const T5DatasetConfig& c = config_;
  const SentenceSegment& seg = segments_[static_cast<size_t>(i)];
  std::vector<int32_t> text;
  std::vector<int64_t> ends;
  read_segment(*data_, seg, text, ends);
  text.resize(std::min(text.size(), static_cast<size_t>(seg.target)));
  DrawStream rng(c.seed, static_cast<uint64_t>(i), kSampleDraws);
  const auto n = static_cast<int64_t>(text.size());
  const std::vector<uint8_t> noise = random_spans_noise_mask(n, c.noise_density, c.mean_noise_span_length, rng,
                                                             &out.num_spans);
  out.encoder_tokens.assign(static_cast<size_t>(c.encoder_seq_length), c.pad);
  out.encoder_padding_mask.assign(static_cast<size_t>(c.encoder_seq_length), 0);
  out.decoder_input.assign(static_cast<size_t>(c.decoder_seq_length), c.pad);
  out.decoder_labels.assign(static_cast<size_t>(c.decoder_seq_length), -1);
  out.loss_mask.assign(static_cast<size_t>(c.decoder_seq_length), 0);
  out.decoder_padding_mask.assign(static_cast<size_t>(c.decoder_seq_length), 0);
  out.num_noise = 0;
  size_t enc = 0, dec = 0;
  int32_t span = -1;
  for (size_t j = 0; j < text.size(); ++j) {
    if (!noise[j]) {
      out.encoder_tokens[enc++] = text[j];
      continue;
    }
    if (j == 0 || !noise[j - 1]) {  // a span starts: its sentinel in both
      const int32_t sentinel = c.sentinels[static_cast<size_t>(++span)];
      out.encoder_tokens[enc++] = sentinel;
      out.decoder_labels[dec++] = sentinel;
    }
    out.decoder_labels[dec++] = text[j];
    ++out.num_noise;
  }
  out.decoder_labels[dec++] = c.eos;
  std::fill(out.encoder_padding_mask.begin(), out.encoder_padding_mask.begin() + static_cast<std::ptrdiff_t>(enc), 1);
  out.decoder_input[0] = c.bos;
  for (size_t k = 0; k + 1 < dec; ++k) out.decoder_input[k + 1] = out.decoder_labels[k];
  std::fill(out.loss_mask.begin(), out.loss_mask.begin() + static_cast<std::ptrdiff_t>(dec), 1);
  std::fill(out.decoder_padding_mask.begin(), out.decoder_padding_mask.begin() + static_cast<std::ptrdiff_t>(dec), 1);
}

}  // namespace megadlm
