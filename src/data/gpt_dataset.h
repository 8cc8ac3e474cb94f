#pragma once
// Megatron's GPTDataset: fixed-length samples cut from the concatenation of shuffled documents.
//
// Three indices, built as in megatron/core/datasets/gpt_dataset.py + helpers.cpp:
//   document index  the split's sequences repeated for as many epochs as num_samples needs, shuffled
//                   (all epochs together; a final epoch that would contribute fewer than 80% of an
//                   epoch's samples is shuffled separately, so that it does not dilute the others);
//   sample index    for each sample the (document-index position, token offset) where it starts;
//                   consecutive starts are seq_length tokens apart and each sample reads one token
//                   more, so that labels are the inputs shifted by one; samples run across documents
//                   (the eod token, when preprocessing appended one, marks the boundary);
//   shuffle index   a permutation of the samples (again with the final epoch kept separate).
// Differences from Megatron, on purpose: shuffles come from Philox (RngPurpose::DataShuffle) instead
// of numpy's Mersenne Twister, so results depend only on (seed, data, seq_length, num_samples), never
// on threads or ranks; the last partial sample is always dropped.
//
// The indices are cached under cache_dir in one file named by a hash of everything they depend on,
// written under a temporary name and renamed, and validated when loaded (a stale or corrupt file is
// rebuilt, never trusted).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/token_dataset.h"

namespace megadlm {

enum class Split { Train = 0, Valid = 1, Test = 2 };
const char* split_name(Split s);  // "train", "valid", "test"

// A half-open range of sequence indices of an IndexedDataset.
struct SequenceRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Megatron's --split "969,30,1": weights for train/valid/test (missing ones are 0), normalised; split
// k gets the sequences [round(c_k * S), round(c_{k+1} * S)) with c the cumulative weights and round
// half to even (Python's round). A split with zero weight is nullopt. Throws Error naming the string.
std::array<std::optional<SequenceRange>, 3> split_ranges(const std::string& split, int64_t num_sequences);

// Supervised fine-tuning (--sft) data layouts: Packing concatenates the conversations as pretraining
// does (a GPTDataset carrying the loss mask); Padding gives each conversation a sample of its own,
// padded with end-of-document tokens (SftDataset, data/sft_dataset.h).
enum class SftLayout : uint8_t { Off, Packing, Padding };

struct GPTDatasetConfig {
  int64_t seq_length = 0;   // T
  int64_t num_samples = 0;  // samples wanted; <= 0: one epoch's worth
  uint64_t seed = 1234;
  std::string cache_dir;    // "" = build in memory only
  SftLayout sft = SftLayout::Off;  // Off: no loss mask is read
  int32_t pad_token = -1;          // Padding: the end-of-document id that fills a sample
  uint8_t pad_loss_mask = 0;       // Padding: the loss mask of the padding tokens (1 for diffusion, 0 for AR)
};

class GPTDataset : public TokenDataset {
 public:
  GPTDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange range, Split split, const GPTDatasetConfig& config);

  int64_t size() const override { return static_cast<int64_t>(shuffle_index_.size()); }  // >= num_samples
  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t i, int32_t* out) const override;  // out: [T + 1]
  bool has_loss_mask() const override { return loss_mask_ != nullptr; }
  void sample_loss_mask(int64_t i, uint8_t* out) const override;  // out: [T + 1]
  // Carries `mask` (the loss mask of the tokens, same lengths: data/sft_dataset.h open_loss_mask) along.
  void attach_loss_mask(std::shared_ptr<const IndexedDataset> mask) { loss_mask_ = std::move(mask); }

  int64_t num_epochs() const { return num_epochs_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  const std::string& cache_file() const { return cache_file_; }  // "" without a cache_dir
  const std::string& description() const { return description_; }
  const IndexedDataset& indexed() const { return *data_; }

  const std::vector<int32_t>& document_index() const { return document_index_; }
  const std::vector<int64_t>& sample_index() const { return sample_index_; }  // [(samples + 1) * 2]
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }

 private:
  void build();
  bool try_load(const std::string& path);
  void save(const std::string& path) const;
  // Calls read(sequence, offset, count, written) for the pieces of documents that make sample i.
  template <typename Read>
  void walk_sample(int64_t i, Read&& read) const;

  std::shared_ptr<const IndexedDataset> data_, loss_mask_;
  SequenceRange range_;
  Split split_;
  GPTDatasetConfig config_;
  int64_t tokens_per_epoch_ = 0, num_epochs_ = 0, samples_total_ = 0, samples_sans_final_ = 0;
  bool separate_final_epoch_ = false, loaded_from_cache_ = false;
  std::string description_, cache_file_;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_, shuffle_index_;
};

// Permutes a[0..n) in place with Fisher-Yates driven by Philox(seed, DataShuffle); `stream` separates
// independent shuffles under one seed. Depends only on (seed, stream, n).
template <typename T>
void philox_shuffle(T* a, int64_t n, uint64_t seed, uint32_t stream);

}  // namespace megadlm
