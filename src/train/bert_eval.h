#pragma once
// BERT's evaluation over a BertDataset: the masked-LM loss, the masked-token accuracy and (with the
// binary head) the sentence-order loss of the first micro-batches. BertTrainer's validation and the
// evaluate app share it, so both report the same numbers on the same samples.
// Letters: B sequences a micro-batch, T tokens a sequence (the dataset's seq_length), V vocabulary.
#include <cstdint>

#include "data/bert_dataset.h"
#include "models/bert_model.h"

namespace megadlm {

struct BertEvalResult {
  double mlm_loss = 0;      // mean over the batches of each batch's mean cross-entropy over its masked tokens
  double sop_loss = 0;      // mean sentence-order cross-entropy per sequence (0 without the binary head)
  double mlm_accuracy = 0;  // share of masked tokens whose argmax is the original id
  int64_t batches = 0;
  int64_t masked_tokens = 0;
  double sop_accuracy = 0;  // share of sequences whose order the binary head predicts (binary head only)
};

// Samples [first, first + B) of `data` (modulo its size) as one batch [B, T]; `scratch` is the storage
// each sample is read into.
BertBatch bert_batch_of(const BertDataset& data, int64_t first, int64_t B, bool binary_head, BertSample& scratch);

// The first `batches` micro-batches of B samples (at most data.size() / B of them).
BertEvalResult evaluate_bert(BertModel& model, const BertDataset& data, int64_t B, int64_t batches, bool binary_head);

}  // namespace megadlm
