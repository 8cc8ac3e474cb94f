#pragma once
// Megatron's --data-path W1 P1 W2 P2 ...: a dataset that draws its samples from several datasets in
// the proportions of the weights.
//
// The blending order is a deterministic greedy schedule: sample n goes to a dataset that is behind
// its share. Megatron picks the dataset with the largest error w_i * n - c_i; simulating that rule
// gives prefixes where a dataset is off its share by up to ~1.9 samples with skewed weights. We use
// the earliest-deadline rule of Tijdeman's chairman-assignment theorem instead, which is the same
// kind of greedy but guarantees |c_i(n) - w_i * n| <= 1 - 1/(2k - 2) < 1 for every prefix n and k
// datasets: among the datasets with w_i * n - c_i >= delta (delta = 1/(2k-2)), take the one whose
// next sample is due first, i.e. with the smallest (c_i + 1 - delta) / w_i.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/token_dataset.h"

namespace megadlm {

// dataset_index[n] = which dataset sample n comes from, dataset_sample_index[n] = its running count
// there. weights must be positive and are normalised here.
void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public TokenDataset {
 public:
  // Every dataset must have the same seq_length and at least as many samples as the schedule takes
  // from it (Error naming the dataset otherwise).
  BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights, int64_t size);

  int64_t size() const override { return size_; }
  int64_t seq_length() const override { return datasets_[0]->seq_length(); }
  void sample(int64_t i, int32_t* out) const override;  // out: [T + 1]
  // Every part carries a loss mask, or none does (Error naming the part otherwise).
  bool has_loss_mask() const override { return datasets_[0]->has_loss_mask(); }
  void sample_loss_mask(int64_t i, uint8_t* out) const override;  // out: [T + 1]

  const std::vector<double>& weights() const { return weights_; }  // normalised
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const TokenDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// The parsed --data-path: one prefix without a weight, or weight/prefix pairs.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // as given (not normalised); all 1 for a single unweighted prefix
};
// Throws Error naming the offending token ("--data-path: 'x' is not a weight").
DataBlend parse_data_path(const std::vector<std::string>& tokens);

// Builds the dataset for one split with Megatron's rules: each prefix is cut by `split` (e.g.
// "969,30,1"); one prefix gives its GPTDataset with num_samples, several give a BlendedDataset of
// num_samples drawing ceil(ceil(num_samples * w_i) * 1.005) samples' worth from each (w_i normalised).
// With config.sft each prefix's loss mask is opened beside it (data/sft_dataset.h) and the prefix
// becomes a GPTDataset carrying it (packing) or an SftDataset (padding).
// A prefix whose part of the split holds no document is left out of the blend with its weight (a
// small dataset's test split); null when no prefix has a document in the split. With vocab_size > 0
// a token id at or above it is an Error naming the .bin when read.
std::shared_ptr<TokenDataset> build_gpt_split_dataset(const DataBlend& blend, const std::string& split, Split which,
                                                      int64_t num_samples, const GPTDatasetConfig& config,
                                                      int64_t vocab_size = 0);
// The same with every prefix used whole for `which` (Megatron's --train-data-path / --valid-data-path
// / --test-data-path).
std::shared_ptr<TokenDataset> build_gpt_dataset_whole(const DataBlend& blend, Split which, int64_t num_samples,
                                                      const GPTDatasetConfig& config, int64_t vocab_size = 0);

}  // namespace megadlm
