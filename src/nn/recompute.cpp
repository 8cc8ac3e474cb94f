#include "nn/recompute.h"

#include "core/error.h"

namespace megadlm {

RecomputeGranularity recompute_granularity_from_name(const std::string& name) {
  if (name.empty() || name == "none") return RecomputeGranularity::None;
  if (name == "full") return RecomputeGranularity::Full;
  if (name == "selective") return RecomputeGranularity::Selective;
  fail("--recompute-granularity: unknown value '", name, "' (expected full or selective)");
}

RecomputeMethod recompute_method_from_name(const std::string& name) {
  if (name == "uniform") return RecomputeMethod::Uniform;
  if (name == "block") return RecomputeMethod::Block;
  fail("--recompute-method: unknown value '", name, "' (expected uniform or block)");
}

std::vector<int64_t> recompute_group_starts(const RecomputeConfig& c, int64_t L) {
  std::vector<int64_t> start(static_cast<size_t>(L), -1);
  if (c.granularity != RecomputeGranularity::Full) return start;
  MEGADLM_CHECK(c.num_layers >= 1, "--recompute-num-layers must be at least 1, got ", c.num_layers);
  for (int64_t l = 0; l < L; ++l) {
    if (c.method == RecomputeMethod::Uniform) start[static_cast<size_t>(l)] = l - l % c.num_layers;
    else if (l < c.num_layers) start[static_cast<size_t>(l)] = l;
  }
  return start;
}

std::vector<int64_t> recomputed_group_starts(const RecomputeConfig& c, int64_t L) {
  std::vector<int64_t> start = recompute_group_starts(c, L);
  for (int64_t s : start)
    if (s >= 0) return start;
  return {};
}

namespace {

// The last layer of the group that starts at layer `first`.
int64_t recompute_group_end(const std::vector<int64_t>& starts, int64_t first) {
  int64_t last = first;
  while (last + 1 < static_cast<int64_t>(starts.size()) && starts[static_cast<size_t>(last + 1)] == first) ++last;
  return last;
}

}  // namespace

Tensor forward_with_recompute(Arena& arena, const std::vector<int64_t>& starts, int64_t L, Tensor x,
                              std::vector<Tensor>& group_inputs, const RunLayers& run) {
  if (starts.empty()) return L > 0 ? run(0, L - 1, x) : x;
  group_inputs.assign(static_cast<size_t>(L), Tensor());
  for (int64_t l = 0; l < L;) {
    if (starts[static_cast<size_t>(l)] < 0) {
      x = run(l, l, x);
      ++l;
      continue;
    }
    const int64_t last = recompute_group_end(starts, l);
    group_inputs[static_cast<size_t>(l)] = x;
    Tensor out = arena.tensor(x.shape());
    const size_t mark = arena.mark();
    out.copy_from(run(l, last, x));
    arena.release(mark);
    x = out;
    l = last + 1;
  }
  return x;
}

void backward_with_recompute(Arena& arena, const std::vector<int64_t>& starts, int64_t L,
                             const std::vector<Tensor>& group_inputs, const RunLayers& run,
                             const std::function<void(int64_t)>& backward) {
  for (int64_t l = L - 1; l >= 0;) {
    const int64_t start = starts.empty() ? -1 : starts[static_cast<size_t>(l)];
    if (start < 0) {
      backward(l);
      --l;
      continue;
    }
    const size_t mark = arena.mark();
    run(start, l, group_inputs[static_cast<size_t>(start)]);
    for (int64_t j = l; j >= start; --j) backward(j);
    arena.release(mark);
    l = start - 1;
  }
}

std::string describe_recompute(const RecomputeConfig& c) {
  switch (c.granularity) {
    case RecomputeGranularity::None: return "none";
    case RecomputeGranularity::Selective: return "selective (the attention core, as always here)";
    case RecomputeGranularity::Full:
      return std::string("full, ") + (c.method == RecomputeMethod::Uniform ? "uniform" : "block") + ", " +
             std::to_string(c.num_layers) + " layer(s)";
  }
  return "?";
}

}  // namespace megadlm
