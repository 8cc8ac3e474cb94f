#include "models/llava_model.h"

#include <algorithm>
#include <cstring>

#include "parallel/tp_mappings.h"

namespace megadlm {

namespace {

// The tower and the projector run whole on the first pipeline stage: to them the pipeline is one stage. Their
// rows are the images' patches, never split by --sequence-parallel.
ParallelContext vision_context(const ParallelContext& ctx) {
  ParallelContext c = ctx;
  c.pp = ParallelGroup{};
  c.sequence_parallel = false;
  return c;
}

}  // namespace

LlavaVision::LlavaVision(ParamStore& store, const ParallelContext& ctx, const LlavaOptions& opt, int64_t text_hidden,
                         float init_std)
    : opt_(opt),
      ctx_(vision_context(ctx)),
      rows_split_(sequence_parallel(ctx)),
      first_id_(store.count()),
      tower_(opt.vision, opt.clip, ctx_, &store, "vision_tower."),
      tower_ids_{first_id_, store.count()} {
  projector_ = VisionProjector(store, ctx_, "multi_modal_projector", opt.projector, opt.vision.hidden_size,
                               text_hidden, init_std);
  projector_ids_ = {tower_ids_.second, store.count()};
}

void LlavaVision::forward(const MicroBatch& mb, const BatchInfo& info, Tensor& x) {
  const int64_t N = info.B * info.T, C = x.size(1), P = patches(), S = opt_.clip.image_size;
  rows_.clear();
  for (int64_t i = 0; i < N; ++i)
    if (mb.tokens[static_cast<size_t>(i)] == opt_.image_token) rows_.push_back(i);
  const int64_t images = mb.images;
  MEGADLM_CHECK(static_cast<int64_t>(mb.pixels.size()) == images * 3 * S * S, "LLaVA: the micro-batch's ", images,
                " images of ", S, " x ", S, " come with ", mb.pixels.size(), " pixel values");
  // No image rows: nothing to insert (a KV-cached decode step after the prompt).
  MEGADLM_CHECK(rows_.empty() || static_cast<int64_t>(rows_.size()) == images * P, "LLaVA: the micro-batch has ",
                rows_.size(), " image positions (token ", opt_.image_token, ") but ", images, " images of ", P,
                " patches were given for it");
  arena_.reset();
  if (rows_.empty()) return;
  // The tower reads the micro-batch's pixels in place (it does not write them).
  const Tensor pixels = Tensor::borrow(const_cast<float*>(mb.pixels.data()), {images, 3, S, S}, DType::F32);
  const Tensor features = tower_.forward(pixels, false).features;  // [n*P, C_v]
  const Tensor y = projector_.forward(arena_, features);           // [n*P, C_t]
  const int64_t first = first_local_row(N);
  for (size_t k = 0; k < rows_.size(); ++k)
    if (rows_[k] >= first && rows_[k] < first + x.size(0))
      std::memcpy(x.data<float>() + (rows_[k] - first) * C, y.data<float>() + static_cast<int64_t>(k) * C,
                  sizeof(float) * C);
}

int64_t LlavaVision::first_local_row(int64_t N) const {
  return rows_split_ ? ctx_.tp.rank * (N / ctx_.tp.size) : 0;
}

void LlavaVision::backward(const MicroBatch& mb, const BatchInfo& info, Tensor& dx) {
  (void)mb;
  if (rows_.empty()) return;
  const int64_t R = static_cast<int64_t>(rows_.size()), C = dx.size(1);
  const int64_t first = first_local_row(info.B * info.T);
  Tensor dy = arena_.tensor({R, C});
  dy.zero_();
  for (int64_t k = 0; k < R; ++k) {
    if (rows_[k] < first || rows_[k] >= first + dx.size(0)) continue;
    float* row = dx.data<float>() + (rows_[k] - first) * C;
    std::memcpy(dy.data<float>() + k * C, row, sizeof(float) * C);
    std::fill(row, row + C, 0.0f);
  }
  // Under sequence parallelism each tp rank holds its own rows' gradients: their sum is every image row's,
  // which the replicated projector and tower need whole on every rank.
  if (rows_split_) tp_all_reduce_sum(ctx_, dy.data<float>(), R * C);
  Tensor dfeatures = arena_.tensor({R, opt_.vision.hidden_size});
  projector_.backward(arena_, dy, dfeatures);
  tower_.backward(dfeatures);
  arena_.reset();
}

std::unique_ptr<LanguageModel> make_llava_model(const TransformerConfig& cfg, const ModelSpec& spec,
                                                const LlavaOptions& opt, const ParallelContext& ctx) {
  validate_llava(cfg, opt, ctx, Device::CPU);
  return std::make_unique<LanguageModel>(
      cfg, spec, ctx, true, true, Device::CPU,
      [opt, hidden = cfg.hidden_size, std = cfg.init_method_std](ParamStore& store, const ParallelContext& c) {
        return std::make_unique<LlavaVision>(store, c, opt, hidden, std);
      });
}

LlavaVision& llava_vision(LanguageModel& model) {
  auto* v = dynamic_cast<LlavaVision*>(model.inserts());
  MEGADLM_CHECK(v != nullptr, "the model is not a LLaVA model (it has no vision tower)");
  return *v;
}

}  // namespace megadlm
