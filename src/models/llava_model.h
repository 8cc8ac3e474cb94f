#pragma once
// The LLaVA model (models/llava_spec.h): a LanguageModel (gpt or difflm spec) whose input embeddings at
// the image placeholder's positions are LlavaVision's rows: CLIP's tower over the micro-batch's images,
// the selected layer's patch features (class token dropped), the projector. One store holds every
// parameter: vision_tower.* (the tower, HuggingFace's CLIPVisionModel names under that prefix), then
// multi_modal_projector.linear_{1,2}, then the language model's own (embed_tokens, layers.N, norm, ...).
//
// A micro-batch's images come in the micro-batch (MicroBatch::pixels: the trainer, the scorers and the
// samplers put them there), in the order of their placeholder runs (row-major over the B x T
// positions): image k fills the k-th P placeholder positions. The backward takes the gradient of those
// rows through the projector into the tower (nothing reaches the placeholder's token-embedding row from
// them). It keeps one micro-batch's rows and activations: a backward needs the forward of the same
// micro-batch just before it, as the pipeline schedule's recomputation gives it
// (train/pipeline_schedule.h). Under pipeline parallelism LlavaVision and the tower's and
// projector's parameters exist on the first stage only, with the token embedding. Under tensor
// parallelism every tp rank runs the tower and the projector over all of the micro-batch's images (each
// splitting its heads and MLP columns, nn/vision_projector.h, models/clip_vision_model.h) and writes the
// rows it holds: all of them, or under --sequence-parallel its N/tp, whose gradients are summed over tp
// before the backward. Freezing:
// freeze_vision makes the tower compute no gradient; the optimizer leaves frozen ranges untouched
// (AdamW::freeze over tower_params() / language_params()).
// Legend: n images, P patches an image, C_v the tower's hidden size, C_t the language model's,
// N = B*T rows.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "models/clip_vision_model.h"
#include "models/embedding_inserts.h"
#include "models/language_model.h"
#include "models/llava_spec.h"
#include "nn/vision_projector.h"

namespace megadlm {

class LlavaVision : public EmbeddingInserts {
 public:
  LlavaVision(ParamStore& store, const ParallelContext& ctx, const LlavaOptions& opt, int64_t text_hidden,
              float init_std);
  LlavaVision(const LlavaVision&) = delete;
  LlavaVision& operator=(const LlavaVision&) = delete;

  int64_t patches() const { return tower_.patches(); }  // P
  const LlavaOptions& options() const { return opt_; }
  // Parameter id ranges [first, end) of the tower and of the projector in the store.
  std::pair<int, int> tower_params() const { return tower_ids_; }
  std::pair<int, int> projector_params() const { return projector_ids_; }
  void freeze_vision(bool frozen) { tower_.set_frozen(frozen); }

  // mb.tokens [N], x [N, C_t]: the image rows (tokens == image_token) overwritten with
  // projector(tower(mb.pixels)).
  void forward(const MicroBatch& mb, const BatchInfo& info, Tensor& x) override;
  // dx [N, C_t]: the image rows' gradient into the projector and the tower, then zeroed in dx.
  void backward(const MicroBatch& mb, const BatchInfo& info, Tensor& dx) override;

 private:
  LlavaOptions opt_;
  ParallelContext ctx_;  // the tower's and the projector's: one pipeline stage, rows not split
  bool rows_split_;      // the language model's rows are split by --sequence-parallel: x holds N/tp of them
  int first_id_;  // the store's first id of the tower
  ClipVisionModel tower_;
  VisionProjector projector_;
  Arena arena_;  // the projector's activations and the image rows' gradients
  std::vector<int64_t> rows_;  // the last forward's image rows, in order
  std::pair<int, int> tower_ids_, projector_ids_;

  // The first of the N = B*T rows that this rank's x holds (rank r's N/tp under sequence parallelism).
  int64_t first_local_row(int64_t N) const;
};

// The whole model: validate_llava, then a LanguageModel of `spec` with LlavaVision's rows inserted.
std::unique_ptr<LanguageModel> make_llava_model(const TransformerConfig& cfg, const ModelSpec& spec,
                                                const LlavaOptions& opt, const ParallelContext& ctx);
// The model's LlavaVision; an Error when it has none.
LlavaVision& llava_vision(LanguageModel& model);

}  // namespace megadlm
