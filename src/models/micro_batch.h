#pragma once
// One micro-batch as a model consumes it: what an objective makes from a SampleBatch (objectives/),
// what the samplers and scorers make from prompts (infer/). Host arrays of B*T entries each.
#include <cstdint>
#include <vector>

#include "nn/transformer_config.h"

namespace megadlm {

struct MicroBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;       // input ids (diffusion: with the masks applied)
  std::vector<int32_t> positions;    // position ids
  std::vector<int32_t> segment_ids;  // document ids for per-document attention, or empty
  std::vector<int32_t> targets;      // label ids, kIgnoreIndex where no loss (empty: forward only)
  std::vector<float> weights;        // per-token loss weights, or empty for 1
  // BERT (models/bert_model.h): the sentence (A/B) ids of the token-type embedding, and the [B] labels
  // of the binary head (kMlmIgnore: no loss). Empty for the other families.
  std::vector<int32_t> token_types;
  std::vector<int32_t> sequence_labels;
  // LLaVA (models/llava_model.h): the images of the micro-batch's placeholder runs, in their order (row-major
  // over the B x T positions), [images, 3, H, W] fp32; none when the micro-batch holds no image positions
  // (a KV-cached decode step after the prompt).
  std::vector<float> pixels;
  int64_t images = 0;
  // Context parallelism (models/context_parallel.h): the arrays above hold this rank's chunks of each
  // sequence, and this the whole sequences' document ids [B, T*cp] (empty without documents).
  std::vector<int32_t> sequence_segment_ids;
  // Block diffusion's training layout (objectives/block_diffusion.h): every row is [x_t ; x_0], 2 x the
  // sequence length, and self-attention takes MaskType::BlockDiffusion with blocks of this length in
  // place of the model's own mask. 0: the model's mask.
  int64_t block_diffusion = 0;
  // This micro-batch's share of the step (1 / the step's micro-batches): folded into the weights by
  // the objective, and the gradient scale of the MoE aux and z losses.
  float weight = 1.0f;

  // B sequences of T tokens with weight w: every array sized B*T (an objective's storage, reused from one
  // micro-batch to the next), segment_ids too, for the objective to fill or clear.
  void reset(int64_t batch, int64_t seq, float w) {
    B = batch;
    T = seq;
    weight = w;
    const size_t N = static_cast<size_t>(batch * seq);
    for (auto* v : {&tokens, &positions, &segment_ids, &targets}) v->resize(N);
    weights.resize(N);
    sequence_segment_ids.clear();
    token_types.clear();
    sequence_labels.clear();
    pixels.clear();
    images = 0;
    block_diffusion = 0;
  }

  const int32_t* segments() const { return segment_ids.empty() ? nullptr : segment_ids.data(); }
  const int32_t* sequence_segments() const {
    return sequence_segment_ids.empty() ? nullptr : sequence_segment_ids.data();
  }
  const float* weights_or_null() const { return weights.empty() ? nullptr : weights.data(); }
};

}  // namespace megadlm
