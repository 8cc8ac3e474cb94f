// LanguageModel: the precision policy hook and full activation recomputation (nn/recompute.h).
#include "models/language_model.h"

namespace megadlm {

void LanguageModel::set_precision(const PrecisionConfig& cfg) {
  precision_ = std::make_unique<MixedPrecision>(params_, cfg);
  MixedPrecision* p = cfg.mode == PrecisionMode::FP32 ? nullptr : precision_.get();
  for (auto& layer : layers_) layer->set_precision(p);
  if (post_process_) head_.set_precision(p);
}

void LanguageModel::set_recompute(const RecomputeConfig& cfg) {
  MEGADLM_CHECK(cfg.granularity != RecomputeGranularity::Full || !cfg_.moe.enabled(),
                "--recompute-granularity full is not available with MoE layers yet");
  recompute_start_ = recompute_group_starts(cfg, static_cast<int64_t>(layers_.size()));
  bool any = false;
  for (int64_t s : recompute_start_) any = any || s >= 0;
  if (!any) recompute_start_.clear();
}

Tensor LanguageModel::forward_layers(int64_t first, int64_t last, Tensor x, const BatchInfo& info) {
  for (int64_t l = first; l <= last; ++l) x = layers_[static_cast<size_t>(l)]->forward(arena_, x, info);
  return x;
}

// The last layer of the recomputed group that starts at `first`.
static int64_t group_end(const std::vector<int64_t>& start, int64_t first) {
  int64_t last = first;
  while (last + 1 < static_cast<int64_t>(start.size()) && start[static_cast<size_t>(last + 1)] == first) ++last;
  return last;
}

Tensor LanguageModel::forward_all_layers(Tensor x, const BatchInfo& info) {
  const int64_t L = static_cast<int64_t>(layers_.size());
  if (recompute_start_.empty()) return L > 0 ? forward_layers(0, L - 1, x, info) : x;
  group_inputs_.assign(layers_.size(), Tensor());
  for (int64_t l = 0; l < L;) {
    if (recompute_start_[static_cast<size_t>(l)] < 0) {
      x = layers_[static_cast<size_t>(l)]->forward(arena_, x, info);
      ++l;
      continue;
    }
    // A recomputed group: its output is copied below the mark and everything else it made is freed.
    // Layers read their input without changing it, so x is still the group's input in the backward.
    const int64_t last = group_end(recompute_start_, l);
    group_inputs_[static_cast<size_t>(l)] = x;
    Tensor out = arena_.tensor(x.shape());
    const size_t mark = arena_.mark();
    out.copy_from(forward_layers(l, last, x, info));
    arena_.release(mark);
    x = out;
    l = last + 1;
  }
  return x;
}

void LanguageModel::backward_all_layers(const BatchInfo& info, Tensor*& dy, Tensor*& dx) {
  for (int64_t l = static_cast<int64_t>(layers_.size()) - 1; l >= 0;) {
    const int64_t start = recompute_start_.empty() ? -1 : recompute_start_[static_cast<size_t>(l)];
    if (start < 0) {
      layers_[static_cast<size_t>(l)]->backward(arena_, *dy, *dx);
      notify_grads_ready(l);
      std::swap(dy, dx);
      --l;
      continue;
    }
    // Recompute the group's forward from its saved input (the same kernels on the same values give
    // the same activations), then run its backward, then free both.
    const size_t mark = arena_.mark();
    forward_layers(start, l, group_inputs_[static_cast<size_t>(start)], info);
    for (int64_t j = l; j >= start; --j) {
      layers_[static_cast<size_t>(j)]->backward(arena_, *dy, *dx);
      notify_grads_ready(j);
      std::swap(dy, dx);
    }
    arena_.release(mark);
    l = start - 1;
  }
}

}  // namespace megadlm
