#include "tokenizers/bpe_merges.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

namespace megadlm {

namespace {
using Pair = uint64_t;
inline Pair make_pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
inline int32_t pair_first(Pair p) { return static_cast<int32_t>(p >> 32); }
inline int32_t pair_second(Pair p) { return static_cast<int32_t>(p & 0xFFFFFFFFu); }
}  // namespace

void run_bpe_merges(std::vector<std::vector<int32_t>>& words, const std::vector<int64_t>& count,
                    int64_t min_frequency, const std::function<bool()>& full,
                    const std::function<int32_t(int32_t, int32_t)>& merge) {
  std::unordered_map<Pair, int64_t> pair_count;
  std::unordered_map<Pair, std::vector<int32_t>> where;  // pair -> words that have (or had) it
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const Pair p = make_pair_key(words[w][i], words[w][i + 1]);
      pair_count[p] += count[w];
      auto& list = where[p];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }

  // Max-heap on (count, then the smaller pair); entries go stale when counts drop and are re-pushed
  // with the current count when they surface.
  struct Entry {
    int64_t count;
    Pair pair;
  };
  auto lower = [](const Entry& x, const Entry& y) { return x.count != y.count ? x.count < y.count : x.pair > y.pair; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower)> heap(lower);
  for (const auto& [p, c] : pair_count)
    if (c > 0) heap.push({c, p});

  std::vector<Pair> touched;
  while (!full() && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const int64_t current = pair_count[top.pair];
    if (top.count != current) {
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < 1 || current < min_frequency) break;
    const int32_t a = pair_first(top.pair), b = pair_second(top.pair);
    const int32_t merged = merge(a, b);

    std::vector<int32_t> in_words = std::move(where[top.pair]);
    where.erase(top.pair);
    pair_count[top.pair] = 0;
    std::sort(in_words.begin(), in_words.end());
    in_words.erase(std::unique(in_words.begin(), in_words.end()), in_words.end());
    touched.clear();
    auto change = [&](int32_t x, int32_t y, int delta, int32_t w) {
      const Pair p = make_pair_key(x, y);
      pair_count[p] += delta * count[w];
      if (delta > 0) {
        auto& list = where[p];
        if (list.empty() || list.back() != w) list.push_back(w);
        touched.push_back(p);
      }
    };
    for (const int32_t w : in_words) {
      std::vector<int32_t>& s = words[w];
      // Left to right, non-overlapping; a merged symbol can pair with the next occurrence ("aaaa").
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != a || s[i + 1] != b) continue;
        if (i > 0) change(s[i - 1], a, -1, w), change(s[i - 1], merged, +1, w);
        s[i] = merged;
        s.erase(s.begin() + i + 1);
        if (i + 1 < s.size()) change(b, s[i + 1], -1, w), change(merged, s[i + 1], +1, w);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const Pair p : touched)
      if (pair_count[p] > 0) heap.push({pair_count[p], p});
  }
}

}  // namespace megadlm
