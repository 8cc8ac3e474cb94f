#include "data/sft_dataset.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "data/loss_mask.h"

namespace megadlm {

namespace {

// Streams of the DataShuffle purpose used by SftDataset (GPTDataset's use 0 to 3).
constexpr uint32_t kStreamConversations = 4, kStreamConversationsFinal = 5;

void require_file(const std::string& path, const std::string& data_prefix) {
  std::error_code ec;
  MEGADLM_CHECK(std::filesystem::is_regular_file(path, ec), "--sft: ", path, " is missing: every data prefix needs its ",
                "loss mask beside it (", loss_mask_prefix(data_prefix), ".bin/.idx, dtype uint8, 1 on response tokens)",
                " and ", data_prefix, " has none");
}

}  // namespace

std::shared_ptr<const IndexedDataset> open_loss_mask(const IndexedDataset& tokens) {
  const std::string prefix = loss_mask_prefix(tokens.prefix());
  require_file(idx_path(prefix), tokens.prefix());
  require_file(bin_path(prefix), tokens.prefix());
  auto mask = std::make_shared<IndexedDataset>(prefix);
  MEGADLM_CHECK(mask->num_sequences() == tokens.num_sequences() && mask->num_documents() == tokens.num_documents(),
                "--sft: ", idx_path(prefix), " holds ", mask->num_sequences(), " sequences in ", mask->num_documents(),
                " documents but the tokens ", idx_path(tokens.prefix()), " hold ", tokens.num_sequences(), " in ",
                tokens.num_documents(), ": the loss mask was made for other data");
  for (int64_t s = 0; s < tokens.num_sequences(); ++s)
    MEGADLM_CHECK(mask->sequence_length(s) == tokens.sequence_length(s), "--sft: ", idx_path(prefix), ": sequence ", s,
                  " has ", mask->sequence_length(s), " values but its tokens (", idx_path(tokens.prefix()), ") number ",
                  tokens.sequence_length(s), ": the loss mask was made for other data");
  for (int64_t d = 0; d <= tokens.num_documents(); ++d)
    MEGADLM_CHECK(mask->document_index(d) == tokens.document_index(d), "--sft: ", idx_path(prefix),
                  ": document boundary ", d, " is sequence ", mask->document_index(d), " but ", tokens.document_index(d),
                  " in ", idx_path(tokens.prefix()), ": the loss mask was made for other data");
  return mask;
}

void read_loss_mask(const IndexedDataset& mask, int64_t seq, int64_t offset, int64_t count, uint8_t* out) {
  thread_local std::vector<int32_t> values;
  values.resize(static_cast<size_t>(count));
  mask.read(seq, offset, count, values.data());
  for (int64_t k = 0; k < count; ++k) {
    const int32_t v = values[k];
    MEGADLM_CHECK(v == 0 || v == 1, bin_path(mask.prefix()), ": sequence ", seq, " holds loss-mask value ", v,
                  " at token ", offset + k, " (expected 0 or 1)");
    out[k] = static_cast<uint8_t>(v);
  }
}

int64_t document_of_sequence(const IndexedDataset& data, int64_t seq) {
  // The last document d with document_index(d) <= seq (empty documents share a boundary with the next).
  int64_t lo = 0, hi = data.num_documents() - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (data.document_index(mid) <= seq) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

SftDataset::SftDataset(std::shared_ptr<const IndexedDataset> data, std::shared_ptr<const IndexedDataset> loss_mask,
                       SequenceRange range, Split split, const GPTDatasetConfig& config)
    : data_(std::move(data)), loss_mask_(std::move(loss_mask)), range_(range), split_(split), config_(config) {
  MEGADLM_CHECK(data_ != nullptr && loss_mask_ != nullptr, "SftDataset: no data or no loss mask");
  const std::string& prefix = data_->prefix();
  MEGADLM_CHECK(config_.seq_length >= 1, "--seq-length ", config_.seq_length, " must be at least 1");
  MEGADLM_CHECK(config_.pad_token >= 0, prefix, ": --sft padding needs an end-of-document token to pad with");
  MEGADLM_CHECK(range_.begin >= 0 && range_.begin < range_.end && range_.end <= data_->num_sequences(), prefix,
                ": the ", split_name(split_), " split's conversations [", range_.begin, ", ", range_.end,
                ") are empty or outside the ", data_->num_sequences(), " sequences");
  check_lengths();

  const int64_t n = range_.size();
  num_epochs_ = config_.num_samples <= 0 ? 1 : (config_.num_samples + n - 1) / n;
  MEGADLM_CHECK(num_epochs_ <= (int64_t(1) << 40) / n, prefix, ": ", config_.num_samples, " samples need ", num_epochs_,
                " epochs over ", n, " conversations, which is more than can be indexed");
  order_.resize(static_cast<size_t>(num_epochs_ * n));
  for (int64_t e = 0; e < num_epochs_; ++e)
    for (int64_t k = 0; k < n; ++k) order_[e * n + k] = static_cast<int32_t>(range_.begin + k);
  // The final epoch stands apart when it contributes fewer than 80% of an epoch's samples.
  const int64_t from_final = config_.num_samples - (num_epochs_ - 1) * n;
  const bool separate_final =
      num_epochs_ > 1 && from_final < static_cast<int64_t>(0.8 * static_cast<double>(n));
  if (separate_final) {
    philox_shuffle(order_.data(), (num_epochs_ - 1) * n, config_.seed, kStreamConversations);
    philox_shuffle(order_.data() + (num_epochs_ - 1) * n, n, config_.seed, kStreamConversationsFinal);
  } else {
    philox_shuffle(order_.data(), num_epochs_ * n, config_.seed, kStreamConversations);
  }
}

void SftDataset::check_lengths() const {
  const int64_t T = config_.seq_length;
  for (int64_t s = range_.begin; s < range_.end; ++s) {
    const int64_t len = data_->sequence_length(s);
    if (len <= T + 1) continue;
    const int64_t doc = document_of_sequence(*data_, s) + 1;
    fail(data_->prefix(), ": conversation ", doc, " (document ", doc, "; line ", doc,
         " of the jsonl when it holds one conversation per line) has ", len, " tokens, more than --seq-length ", T,
         " + 1; --sft pads and never truncates a conversation: raise --seq-length or leave it out");
  }
}

int32_t SftDataset::sequence_of(int64_t i) const {
  MEGADLM_CHECK(i >= 0 && i < size(), data_->prefix(), ": ", split_name(split_), " sample ", i, " out of range [0, ",
                size(), ")");
  return order_[static_cast<size_t>(i)];
}

void SftDataset::sample(int64_t i, int32_t* out) const {
  const int32_t seq = sequence_of(i);
  const int64_t len = data_->sequence_length(seq), T = config_.seq_length;
  data_->read(seq, 0, len, out);
  std::fill(out + len, out + T + 1, config_.pad_token);
}

void SftDataset::sample_loss_mask(int64_t i, uint8_t* out) const {
  const int32_t seq = sequence_of(i);
  const int64_t len = data_->sequence_length(seq), T = config_.seq_length;
  read_loss_mask(*loss_mask_, seq, 0, len, out);
  // The tail after the last response token belongs to the padding: the chat template's closing tokens
  // of the last turn (chatml's "\n" after "<|im_end|>") are what a diffusion sampler must write after the
  // answer, so they take the padding's mask. A tail left unmasked would show the model, at training
  // only, where the answer ends.
  int64_t tail = len;
  while (tail > 0 && out[tail - 1] == 0) --tail;
  if (tail == 0) tail = len;  // no response token at all: nothing to extend
  std::fill(out + tail, out + T + 1, config_.pad_loss_mask);
}

}  // namespace megadlm
