#include "train/bert_eval.h"

#include <algorithm>

#include "train/pipeline_schedule.h"

namespace megadlm {

BertBatch bert_batch_of(const BertDataset& data, int64_t first, int64_t B, bool binary_head, BertSample& scratch) {
  BertBatch b;
  b.B = B;
  for (int64_t i = 0; i < B; ++i) {
    data.sample((first + i) % data.size(), scratch);
    b.tokens.insert(b.tokens.end(), scratch.tokens.begin(), scratch.tokens.end());
    b.token_types.insert(b.token_types.end(), scratch.token_types.begin(), scratch.token_types.end());
    b.mlm_labels.insert(b.mlm_labels.end(), scratch.labels.begin(), scratch.labels.end());
    b.attention_mask.insert(b.attention_mask.end(), scratch.padding_mask.begin(), scratch.padding_mask.end());
    if (binary_head) b.binary_labels.push_back(scratch.is_random);
  }
  b.T = static_cast<int64_t>(scratch.tokens.size());
  return b;
}

namespace {

// Masked tokens of the batch and how many of them the MLM logits [B T, V] argmax to their label.
void count_masked(const BertBatch& batch, const float* mlm_logits, int64_t V, double* masked, double* correct) {
  for (size_t n = 0; n < batch.mlm_labels.size(); ++n) {
    if (batch.mlm_labels[n] == kMlmIgnore) continue;
    const float* row = mlm_logits + static_cast<int64_t>(n) * V;
    *correct += static_cast<double>(std::max_element(row, row + V) - row == batch.mlm_labels[n]);
    *masked += 1;
  }
}

// Sequences whose binary logits [B, 2] argmax to their sentence-order label.
double count_order_correct(const BertBatch& batch, const float* binary_logits) {
  double correct = 0;
  for (size_t b = 0; b < batch.binary_labels.size(); ++b) {
    const int32_t guess = binary_logits[2 * b + 1] > binary_logits[2 * b] ? 1 : 0;
    correct += static_cast<double>(guess == batch.binary_labels[b]);
  }
  return correct;
}

}  // namespace

// Through the pipeline (one stage at pp = 1): the last stage scores each batch, and its sums go to
// every stage at the end.
BertEvalResult evaluate_bert(BertModel& model, const BertDataset& data, int64_t B, int64_t batches, bool binary_head) {
  BertEvalResult r;
  batches = std::min(batches, data.size() / B);
  BertSample scratch;
  MicroBatch mb;
  double masked = 0, correct = 0, order_correct = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const BertBatch batch = bert_batch_of(data, i * B, B, binary_head, scratch);
    BertModel::micro_batch_of(batch, mb);
    pipeline_forward(model, model.context(), mb, [&](const Tensor& out) {
      BertModel::Logits logits;
      const BertLosses l = model.stage_losses(mb, out, &logits);
      r.sop_loss += l.binary / static_cast<double>(B);
      double batch_masked = 0;
      count_masked(batch, logits.mlm.data<float>(), logits.mlm.size(1), &batch_masked, &correct);
      if (binary_head) order_correct += count_order_correct(batch, logits.binary.data<float>());
      masked += batch_masked;
      r.mlm_loss += l.mlm / std::max(batch_masked, 1.0);
    });
  }
  double sums[5] = {r.mlm_loss, r.sop_loss, masked, correct, order_correct};
  broadcast_from_last_stage(model.context(), sums, 5);
  r.mlm_loss = sums[0];
  r.sop_loss = sums[1];
  masked = sums[2];
  correct = sums[3];
  order_correct = sums[4];
  r.batches = batches;
  r.masked_tokens = static_cast<int64_t>(masked);
  if (batches > 0) {
    r.mlm_loss /= static_cast<double>(batches);
    r.sop_loss /= static_cast<double>(batches);
    r.sop_accuracy = order_correct / static_cast<double>(batches * B);
  }
  r.mlm_accuracy = masked > 0 ? correct / masked : 0;
  return r;
}

}  // namespace megadlm
