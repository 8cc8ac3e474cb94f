#pragma once
// T5's evaluation over a T5Dataset: the sequence-to-sequence loss (each micro-batch's mean
// cross-entropy over its labelled decoder rows, averaged over the micro-batches) of the first
// micro-batches. T5Trainer's validation and the evaluate app share it.
// Letters: B samples a micro-batch, S encoder tokens, T decoder tokens (the dataset's lengths).
#include <cstdint>

#include "data/t5_dataset.h"
#include "models/t5_model.h"

namespace megadlm {

struct T5EvalResult {
  double loss = 0;  // mean over the batches of each batch's mean cross-entropy over its labelled rows
  int64_t batches = 0;
  int64_t labelled_tokens = 0;
};

// Samples [first, first + B) of `data` (modulo its size) as one batch (encoder [B, S], decoder
// [B, T]); *labelled gets its rows with a label; `scratch` is the storage each sample is read into.
T5Batch t5_batch_of(const T5Dataset& data, int64_t first, int64_t B, int64_t* labelled, T5Sample& scratch);

// The first `batches` micro-batches of B samples (at most data.size() / B of them).
T5EvalResult evaluate_t5(T5Model& model, const T5Dataset& data, int64_t B, int64_t batches);

}  // namespace megadlm
