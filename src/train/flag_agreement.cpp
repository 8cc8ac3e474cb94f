#include "train/flag_agreement.h"

#include "core/error.h"
#include "core/hash.h"

namespace megadlm {

namespace {

uint64_t flag_hash(const std::pair<std::string, std::string>& flag) {
  const uint64_t h = fnv1a64_update(kFnv1a64Offset, flag.first.data(), flag.first.size());
  return fnv1a64_update(fnv1a64_update(h, "=", 1), flag.second.data(), flag.second.size());
}

// `value` as sent by `root` (its length first, then its bytes).
std::string broadcast_string(std::string value, int root, Communicator& world) {
  int64_t n = static_cast<int64_t>(value.size());
  world.broadcast(&n, sizeof n, root);
  value.resize(static_cast<size_t>(n));
  if (n > 0) world.broadcast(value.data(), n, root);
  return value;
}

}  // namespace

size_t first_differing_flag(const std::vector<uint64_t>& mine, const std::vector<uint64_t>& reference) {
  MEGADLM_CHECK(mine.size() == reference.size(), "flag lists of different lengths (", mine.size(), " and ",
                reference.size(), "): the ranks run different programs");
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i] != reference[i]) return i;
  return mine.size();
}

void require_same_flags_on_every_rank(const CliFlags& flags, Communicator& world) {
  if (world.size() <= 1) return;
  const auto values = flags.canonical_values();
  const size_t n = values.size();
  std::vector<uint64_t> mine(n), reference(n);
  for (size_t i = 0; i < n; ++i) mine[i] = reference[i] = flag_hash(values[i]);
  world.broadcast(reference.data(), static_cast<int64_t>(n * sizeof(uint64_t)), 0);

  // The first differing flag over all ranks (a max of n - index), then the lowest rank differing there
  // (a max of size - rank). Counts stay far below 2^24, exact in float.
  const size_t mine_first = first_differing_flag(mine, reference);
  float score = static_cast<float>(n - mine_first);
  world.all_reduce_max(&score, 1);
  const size_t first = n - static_cast<size_t>(score);
  if (first == n) return;
  float rank_score = mine_first == first ? static_cast<float>(world.size() - world.rank()) : 0.0f;
  world.all_reduce_max(&rank_score, 1);
  const int other = world.size() - static_cast<int>(rank_score);

  const std::string& name = values[first].first;
  const std::string on_rank0 = broadcast_string(values[first].second, 0, world);
  const std::string on_other = broadcast_string(values[first].second, other, world);
  fail("--", name, " differs between ranks: '", on_rank0, "' on rank 0, '", on_other, "' on rank ", other,
       " (every rank of a run must be given the same flags)");
}

}  // namespace megadlm
