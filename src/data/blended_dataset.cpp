#include "data/blended_dataset.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/sft_dataset.h"

namespace megadlm {

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  const auto k = static_cast<int64_t>(weights.size());
  MEGADLM_CHECK(k >= 1 && k <= std::numeric_limits<int16_t>::max(), "blend of ", k, " datasets (1 to 32767 allowed)");
  MEGADLM_CHECK(size >= 0, "blend size ", size, " is negative");
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    MEGADLM_CHECK(std::isfinite(weights[i]) && weights[i] > 0, "blend weight ", i, " = ", weights[i], " must be positive");
    sum += weights[i];
  }
  std::vector<double> w(k);
  for (int64_t i = 0; i < k; ++i) w[i] = weights[i] / sum;
  const double delta = k > 1 ? 1.0 / (2.0 * static_cast<double>(k - 1)) : 0.0;
  // A tiny slack on eligibility absorbs rounding in w_i * n; the theorem has 1/(2k-2) of room.
  const double eligible_at = delta - 1e-9;
  std::vector<int64_t> count(k, 0);
  dataset_index.resize(static_cast<size_t>(size));
  dataset_sample_index.resize(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n) {
    const double m = static_cast<double>(n + 1);  // the prefix length after this sample
    int64_t best = -1;
    double best_due = 0;
    for (int64_t i = 0; i < k; ++i) {
      if (w[i] * m - static_cast<double>(count[i]) < eligible_at) continue;
      const double due = (static_cast<double>(count[i]) + 1.0 - delta) / w[i];
      if (best < 0 || due < best_due) {
        best = i;
        best_due = due;
      }
    }
    // The eligible set is never empty (the errors add up to 1 >= delta); the fallback is for safety.
    if (best < 0) {
      double most = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < k; ++i)
        if (w[i] * m - static_cast<double>(count[i]) > most) most = w[i] * m - static_cast<double>(count[i]), best = i;
    }
    dataset_index[n] = static_cast<int16_t>(best);
    dataset_sample_index[n] = count[best]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)), size_(size) {
  MEGADLM_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), "blend of ", datasets_.size(),
                " datasets with ", weights.size(), " weights");
  build_blending_indices(weights, size, dataset_index_, dataset_sample_index_);
  double sum = 0;
  for (double x : weights) sum += x;
  for (double x : weights) weights_.push_back(x / sum);
  std::vector<int64_t> used(datasets_.size(), 0);
  for (int16_t d : dataset_index_) ++used[d];
  for (size_t i = 0; i < datasets_.size(); ++i) {
    MEGADLM_CHECK(datasets_[i] != nullptr, "blend dataset ", i, " is missing");
    MEGADLM_CHECK(datasets_[i]->seq_length() == datasets_[0]->seq_length(), "blend dataset ", i, " has seq_length ",
                  datasets_[i]->seq_length(), " but dataset 0 has ", datasets_[0]->seq_length());
    MEGADLM_CHECK(datasets_[i]->has_loss_mask() == datasets_[0]->has_loss_mask(), "blend dataset ", i,
                  datasets_[i]->has_loss_mask() ? " carries" : " lacks", " a loss mask but dataset 0 ",
                  datasets_[0]->has_loss_mask() ? "carries one" : "does not");
    MEGADLM_CHECK(used[i] <= datasets_[i]->size(), "blend dataset ", i, " (weight ", weights_[i], ") has ",
                  datasets_[i]->size(), " samples but the blend takes ", used[i]);
  }
}

void BlendedDataset::sample(int64_t i, int32_t* out) const {
  MEGADLM_CHECK(i >= 0 && i < size_, "blended sample ", i, " out of range [0, ", size_, ")");
  datasets_[dataset_index_[i]]->sample(dataset_sample_index_[i], out);
}

void BlendedDataset::sample_loss_mask(int64_t i, uint8_t* out) const {
  MEGADLM_CHECK(i >= 0 && i < size_, "blended sample ", i, " out of range [0, ", size_, ")");
  datasets_[dataset_index_[i]]->sample_loss_mask(dataset_sample_index_[i], out);
}

// ---- --data-path and the split builders -------------------------------------------------------------------

DataBlend parse_data_path(const std::vector<std::string>& tokens) {
  MEGADLM_CHECK(!tokens.empty(), "--data-path: no dataset given");
  DataBlend b;
  if (tokens.size() == 1) {
    b.prefixes.push_back(tokens[0]);
    b.weights.push_back(1.0);
    return b;
  }
  MEGADLM_CHECK(tokens.size() % 2 == 0, "--data-path: expected weight/prefix pairs or a single prefix, got ",
                tokens.size(), " values");
  for (size_t i = 0; i < tokens.size(); i += 2) {
    const std::string& t = tokens[i];
    char* end = nullptr;
    const double w = std::strtod(t.c_str(), &end);
    MEGADLM_CHECK(!t.empty() && end == t.c_str() + t.size(), "--data-path: '", t, "' is not a weight (expected W1 P1 W2 P2 ...)");
    MEGADLM_CHECK(std::isfinite(w) && w > 0, "--data-path: weight ", t, " of ", tokens[i + 1], " must be positive");
    b.weights.push_back(w);
    b.prefixes.push_back(tokens[i + 1]);
  }
  return b;
}

namespace {

// One prefix's dataset for the split: the GPTDataset, carrying the loss mask under --sft packing, or
// the SftDataset of --sft padding.
std::shared_ptr<TokenDataset> build_part(const std::shared_ptr<const IndexedDataset>& data,
                                         const std::shared_ptr<const IndexedDataset>& mask, SequenceRange range,
                                         Split which, const GPTDatasetConfig& c) {
  if (c.sft == SftLayout::Padding) return std::make_shared<SftDataset>(data, mask, range, which, c);
  auto gpt = std::make_shared<GPTDataset>(data, range, which, c);
  if (c.sft == SftLayout::Packing) gpt->attach_loss_mask(mask);
  return gpt;
}

// The prefixes' token datasets and, under --sft, their loss masks (every prefix's, also one whose part
// of the split is empty, so that a missing mask is found on the first run).
struct OpenedData {
  std::vector<std::shared_ptr<const IndexedDataset>> tokens, masks;
};

OpenedData open_prefixes(const DataBlend& blend, const GPTDatasetConfig& config, int64_t vocab_size) {
  OpenedData d;
  for (const std::string& p : blend.prefixes) {
    d.tokens.push_back(std::make_shared<IndexedDataset>(p, vocab_size));
    d.masks.push_back(config.sft == SftLayout::Off ? nullptr : open_loss_mask(*d.tokens.back()));
  }
  return d;
}

std::shared_ptr<TokenDataset> build_blend(const DataBlend& blend, Split which, int64_t num_samples,
                                          const GPTDatasetConfig& config,
                                          const std::vector<std::optional<SequenceRange>>& ranges,
                                          const OpenedData& data) {
  auto has_documents = [&](size_t i) { return ranges[i] && ranges[i]->size() > 0; };
  if (blend.prefixes.size() == 1) {
    if (!has_documents(0)) return nullptr;
    GPTDatasetConfig c = config;
    c.num_samples = num_samples;
    return build_part(data.tokens[0], data.masks[0], *ranges[0], which, c);
  }
  MEGADLM_CHECK(num_samples > 0, "a blend of several datasets needs a number of samples for the ", split_name(which),
                " split");
  double sum = 0;
  for (size_t i = 0; i < blend.prefixes.size(); ++i)
    if (has_documents(i)) sum += blend.weights[i];
  std::vector<std::shared_ptr<const TokenDataset>> parts;
  std::vector<double> weights;
  for (size_t i = 0; i < blend.prefixes.size(); ++i) {
    if (!has_documents(i)) continue;
    GPTDatasetConfig c = config;
    const double share = std::ceil(static_cast<double>(num_samples) * (blend.weights[i] / sum));
    c.num_samples = static_cast<int64_t>(std::ceil(share * 1.005));
    parts.push_back(build_part(data.tokens[i], data.masks[i], *ranges[i], which, c));
    weights.push_back(blend.weights[i]);
  }
  if (parts.empty()) return nullptr;
  return std::make_shared<BlendedDataset>(std::move(parts), std::move(weights), num_samples);
}

}  // namespace

std::shared_ptr<TokenDataset> build_gpt_split_dataset(const DataBlend& blend, const std::string& split, Split which,
                                                      int64_t num_samples, const GPTDatasetConfig& config,
                                                      int64_t vocab_size) {
  const OpenedData data = open_prefixes(blend, config, vocab_size);
  std::vector<std::optional<SequenceRange>> ranges;
  for (const auto& d : data.tokens) ranges.push_back(split_ranges(split, d->num_sequences())[static_cast<int>(which)]);
  return build_blend(blend, which, num_samples, config, ranges, data);
}

std::shared_ptr<TokenDataset> build_gpt_dataset_whole(const DataBlend& blend, Split which, int64_t num_samples,
                                                      const GPTDatasetConfig& config, int64_t vocab_size) {
  const OpenedData data = open_prefixes(blend, config, vocab_size);
  std::vector<std::optional<SequenceRange>> ranges;
  for (const auto& d : data.tokens) ranges.push_back(SequenceRange{0, d->num_sequences()});
  return build_blend(blend, which, num_samples, config, ranges, data);
}

}  // namespace megadlm
