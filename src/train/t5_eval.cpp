#include "train/t5_eval.h"

#include <algorithm>

#include "kernels/types.h"

namespace megadlm {

T5Batch t5_batch_of(const T5Dataset& data, int64_t first, int64_t B, int64_t* labelled, T5Sample& scratch) {
  T5Batch b;
  b.B = B;
  *labelled = 0;
  for (int64_t i = 0; i < B; ++i) {
    data.sample((first + i) % data.size(), scratch);
    b.encoder_tokens.insert(b.encoder_tokens.end(), scratch.encoder_tokens.begin(), scratch.encoder_tokens.end());
    b.encoder_mask.insert(b.encoder_mask.end(), scratch.encoder_padding_mask.begin(), scratch.encoder_padding_mask.end());
    b.decoder_tokens.insert(b.decoder_tokens.end(), scratch.decoder_input.begin(), scratch.decoder_input.end());
    b.decoder_mask.insert(b.decoder_mask.end(), scratch.decoder_padding_mask.begin(), scratch.decoder_padding_mask.end());
    for (size_t p = 0; p < scratch.decoder_labels.size(); ++p) {
      const bool loss = scratch.loss_mask[p] != 0;
      b.labels.push_back(loss ? scratch.decoder_labels[p] : kIgnoreIndex);
      *labelled += loss;
    }
  }
  b.S = static_cast<int64_t>(scratch.encoder_tokens.size());
  b.T = static_cast<int64_t>(scratch.decoder_input.size());
  return b;
}

T5EvalResult evaluate_t5(T5Model& model, const T5Dataset& data, int64_t B, int64_t batches) {
  T5EvalResult r;
  batches = std::min(batches, data.size() / B);
  T5Sample scratch;
  for (int64_t i = 0; i < batches; ++i) {
    int64_t labelled = 0;
    const T5Batch batch = t5_batch_of(data, i * B, B, &labelled, scratch);
    r.loss += model.forward_loss(batch) / static_cast<double>(std::max<int64_t>(labelled, 1));
    r.labelled_tokens += labelled;
  }
  r.batches = batches;
  if (batches > 0) r.loss /= static_cast<double>(batches);
  return r;
}

}  // namespace megadlm
