#pragma once
// Rows of a language model's input embeddings that another module computes: LLaVA's projected image
// features (models/llava_model.h) at the image placeholders' positions, from the images the micro-batch
// carries. LanguageModel calls forward after its token embedding, which overwrites the rows the module
// owns, and backward before the token embedding's backward, which takes those rows' gradient into the
// module and zeroes it there (the token embedding's rows get nothing from positions whose input they did
// not make). A backward follows the forward of the same micro-batch (the pipeline schedule recomputes a
// micro-batch's forward just before its backward).
// Legend: N = B*T rows of the micro-batch, C the language model's hidden size.
#include <cstdint>
#include <functional>
#include <memory>

#include "core/parameters.h"
#include "core/tensor.h"
#include "models/micro_batch.h"
#include "parallel/parallel_context.h"
#include "nn/transformer_config.h"

namespace megadlm {

class EmbeddingInserts {
 public:
  virtual ~EmbeddingInserts() = default;
  // mb: the host micro-batch (its tokens [N] and what else the module reads); x [N, C]: the token
  // embedding's output (this rank's rows under sequence parallelism), rows overwritten in place.
  virtual void forward(const MicroBatch& mb, const BatchInfo& info, Tensor& x) = 0;
  // dx [N, C]: the gradient of the last forward's x; the owned rows are taken and zeroed.
  virtual void backward(const MicroBatch& mb, const BatchInfo& info, Tensor& dx) = 0;
};

// Builds the module into the language model's parameter store (registered before the model's own
// parameters), with the model's parallel context.
using EmbeddingInsertsFactory =
    std::function<std::unique_ptr<EmbeddingInserts>(ParamStore& store, const ParallelContext& ctx)>;

}  // namespace megadlm
