#include "checkpoint/reshard.h"

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megadlm {

namespace {

constexpr int kTagHeader = 8101, kTagSize = 8102, kTagData = 8103;

// Copies local parameter p's elements (from src, laid out like the local store) to their places in
// the full tensor (dst, laid out like the full store at offset full_offset), or back when to_full is false.
void place(const ParamInfo& p, int64_t full_offset, const float* src_local, float* dst_full, bool to_full,
           float* dst_local = nullptr, const float* src_full = nullptr) {
  const int64_t n = p.shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = full_offset + p.global_index(i);
    if (to_full)
      dst_full[g] = src_local[p.offset + i];
    else
      dst_local[p.offset + i] = src_full[g];
  }
}

// Whether a rank's full shape and the single-process model's hold the same elements in the same order:
// equal, or the rank stacks fused blocks, [blocks, O/blocks, ...], where the single-process model has
// [O, ...] (a column-parallel Linear with fused blocks at tp > 1, SwiGLU's gate and up: nn/linear.cpp).
bool same_elements(const Shape& rank_full, const Shape& single) {
  if (rank_full == single) return true;
  if (rank_full.n != single.n + 1 || rank_full.d[0] * rank_full.d[1] != single.d[0]) return false;
  for (int i = 2; i < rank_full.n; ++i)
    if (rank_full.d[i] != single.d[i - 1]) return false;
  return true;
}

const ParamInfo& full_info(const ParamStore& full, const ParamInfo& p) {
  const int id = full.find(p.name);
  MEGADLM_CHECK(id >= 0, "checkpoint resharding: the single-process model has no parameter '", p.name, "'");
  const ParamInfo& f = full.info(id);
  MEGADLM_CHECK(same_elements(p.full_shape, f.shape), "checkpoint resharding: parameter '", p.name, "' has full shape ",
                p.full_shape.str(), " on this rank but ", f.shape.str(), " in the single-process model");
  return f;
}

// Merges one rank's parameters (described by `infos`, values in vals / m / v laid out like that rank's
// store) into the full store.
void merge(const std::vector<ParamInfo>& infos, const float* vals, const float* m, const float* v, ParamStore& full,
           MomentBuffers fm) {
  for (const ParamInfo& p : infos) {
    const ParamInfo& f = full_info(full, p);
    place(p, f.offset, vals, full.values(), true);
    if (m && fm.m) place(p, f.offset, m, fm.m, true);
    if (v && fm.v) place(p, f.offset, v, fm.v, true);
  }
}

nlohmann::json describe(const ParamStore& ps) {
  nlohmann::json a = nlohmann::json::array();
  for (const ParamInfo& p : ps.infos()) {
    std::vector<int64_t> shape(p.shape.d, p.shape.d + p.shape.n), full(p.full_shape.d, p.full_shape.d + p.full_shape.n);
    a.push_back({{"name", p.name}, {"offset", p.offset}, {"shape", shape}, {"full", full}, {"split", p.split_dim},
                 {"begin", p.shard_begin}});
  }
  return a;
}

std::vector<ParamInfo> parse_infos(const nlohmann::json& a) {
  std::vector<ParamInfo> out;
  for (const auto& j : a) {
    ParamInfo p;
    p.name = j["name"].get<std::string>();
    p.offset = j["offset"].get<int64_t>();
    auto to_shape = [](const std::vector<int64_t>& d) {
      Shape s;
      s.n = static_cast<int>(d.size());
      for (size_t i = 0; i < d.size(); ++i) s.d[i] = d[i];
      return s;
    };
    p.shape = to_shape(j["shape"].get<std::vector<int64_t>>());
    p.full_shape = to_shape(j["full"].get<std::vector<int64_t>>());
    p.split_dim = j["split"].get<int>();
    p.shard_begin = j["begin"].get<int64_t>();
    out.push_back(p);
  }
  return out;
}

}  // namespace

void gather_full_state(const ParamStore& local, MomentBuffers lm, const ParallelContext& ctx, ParamStore* full,
                       MomentBuffers fm) {
  const bool root = ctx.world_rank == 0;
  MEGADLM_CHECK(!root || full != nullptr, "gather_full_state: world rank 0 needs the full store");
  if (root) merge(local.infos(), local.values(), lm.m, lm.v, *full, fm);
  if (ctx.world_size == 1) return;
  Communicator& world = ctx.world.communicator();
  // Every rank says whether it sends (expert-data-parallel rank 0 of its tp / pp coordinate: dp rank 0,
  // and under expert parallelism the dp ranks that hold the other experts; context-parallel rank 0
  // only, the cp ranks holding the same parameters), so rank 0 knows whom to
  // wait for without recomputing the layout.
  std::vector<float> senders(static_cast<size_t>(ctx.world_size), 0.0f), mine(1, 0.0f);
  mine[0] = (ctx.edp.rank == 0 && ctx.cp.rank == 0 && !root) ? 1.0f : 0.0f;
  world.all_gather(mine.data(), senders.data(), 1);
  const bool moments = lm.m != nullptr && lm.v != nullptr;
  if (!root) {
    if (mine[0] == 0.0f) return;
    const std::string header = describe(local).dump();
    int64_t sizes[2] = {static_cast<int64_t>(header.size()), local.numel()};
    world.send(sizes, sizeof sizes, 0, kTagSize);
    world.send(header.data(), sizes[0], 0, kTagHeader);
    world.send(local.values(), 4 * sizes[1], 0, kTagData);
    if (moments) {
      world.send(lm.m, 4 * sizes[1], 0, kTagData);
      world.send(lm.v, 4 * sizes[1], 0, kTagData);
    }
    return;
  }
  for (int r = 1; r < ctx.world_size; ++r) {
    if (senders[static_cast<size_t>(r)] == 0.0f) continue;
    int64_t sizes[2] = {0, 0};
    world.recv(sizes, sizeof sizes, r, kTagSize);
    std::string header(static_cast<size_t>(sizes[0]), '\0');
    world.recv(header.data(), sizes[0], r, kTagHeader);
    std::vector<float> vals(static_cast<size_t>(sizes[1])), m, v;
    world.recv(vals.data(), 4 * sizes[1], r, kTagData);
    if (moments) {
      m.resize(vals.size());
      v.resize(vals.size());
      world.recv(m.data(), 4 * sizes[1], r, kTagData);
      world.recv(v.data(), 4 * sizes[1], r, kTagData);
    }
    merge(parse_infos(nlohmann::json::parse(header)), vals.data(), moments ? m.data() : nullptr,
          moments ? v.data() : nullptr, *full, fm);
  }
}

void take_local_state(const ParamStore& full, MomentBuffers fm, ParamStore& local, MomentBuffers lm) {
  for (const ParamInfo& p : local.infos()) {
    const ParamInfo& f = full_info(full, p);
    place(p, f.offset, nullptr, nullptr, false, local.values(), full.values());
    if (fm.m && lm.m) place(p, f.offset, nullptr, nullptr, false, lm.m, fm.m);
    if (fm.v && lm.v) place(p, f.offset, nullptr, nullptr, false, lm.v, fm.v);
  }
}

}  // namespace megadlm
