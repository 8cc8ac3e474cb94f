#pragma once
// Supervised fine-tuning data (--sft): conversations tokenized into an ordinary MMIDIDX dataset, one
// document per conversation, with a loss mask beside it (data/loss_mask.h: 1 on response tokens).
//
// Two layouts (GPTDatasetConfig::sft):
//   packing  the GPTDataset's concatenation of shuffled conversations, the loss mask cut the same way
//            (GPTDataset::attach_loss_mask);
//   padding  one conversation per sample (LLaDA's SFT recipe): conversation k of the shuffled order
//            fills sample k from its first token, the rest of the T + 1 positions are the end-of-document
//            id with loss mask pad_loss_mask. The conversation's own tokens after its last response token
//            (the template's closing tokens) take pad_loss_mask too: with 1 (diffusion) everything after
//            the prompt is what the sampler writes, so none of it is shown to the model unmasked.
//            A conversation is never truncated: one longer than T + 1 tokens is an Error naming the
//            data prefix, the conversation and --seq-length.
// The padding layout's order: the split's conversations repeated for as many epochs as num_samples
// needs, shuffled with Philox (RngPurpose::DataShuffle) under the seed, all epochs together except a
// final epoch that contributes fewer than 80% of an epoch's samples, which is shuffled on its own (the
// GPTDataset's rule). The order depends only on (seed, data, num_samples): never on ranks, threads or a
// resume.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/token_dataset.h"

namespace megadlm {

// Opens the loss mask of `tokens` (at loss_mask_prefix(tokens.prefix())). Throws Error naming --sft and
// the missing file, or the file whose sequence or document lengths differ from the tokens'.
std::shared_ptr<const IndexedDataset> open_loss_mask(const IndexedDataset& tokens);

// out[0..count) = loss-mask values [offset, offset + count) of sequence `seq`. Throws Error naming the
// .bin when a value is not 0 or 1.
void read_loss_mask(const IndexedDataset& mask, int64_t seq, int64_t offset, int64_t count, uint8_t* out);

// The 0-based document that holds sequence `seq` (the document index's boundaries, binary search).
int64_t document_of_sequence(const IndexedDataset& data, int64_t seq);

class SftDataset : public TokenDataset {
 public:
  // config: seq_length, num_samples (<= 0: one epoch), seed, pad_token, pad_loss_mask.
  SftDataset(std::shared_ptr<const IndexedDataset> data, std::shared_ptr<const IndexedDataset> loss_mask,
             SequenceRange range, Split split, const GPTDatasetConfig& config);

  int64_t size() const override { return static_cast<int64_t>(order_.size()); }
  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t i, int32_t* out) const override;  // out: [T + 1]
  bool has_loss_mask() const override { return true; }
  void sample_loss_mask(int64_t i, uint8_t* out) const override;  // out: [T + 1]

  int64_t num_epochs() const { return num_epochs_; }
  // order()[k]: the sequence (conversation) of sample k.
  const std::vector<int32_t>& order() const { return order_; }
  const IndexedDataset& data() const { return *data_; }

 private:
  int32_t sequence_of(int64_t i) const;  // checks i
  void check_lengths() const;            // no conversation longer than T + 1

  std::shared_ptr<const IndexedDataset> data_, loss_mask_;
  SequenceRange range_;
  Split split_;
  GPTDatasetConfig config_;
  int64_t num_epochs_ = 0;
  std::vector<int32_t> order_;
};

}  // namespace megadlm
