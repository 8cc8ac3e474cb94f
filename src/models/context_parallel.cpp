#include "models/context_parallel.h"

#include "core/error.h"
#include "nn/ring_attention.h"

namespace megadlm {

void check_context_parallel_length(int64_t seq_length, int cp) {
  MEGADLM_CHECK(seq_length % (2 * cp) == 0, "--seq-length ", seq_length, " is not a multiple of 2 x ",
                "--context-parallel-size ", cp, " (each of the ", cp, " ranks holds two equal chunks of every sequence)");
}

namespace {

// dst[b, :] = src[b, chunk r] ++ src[b, chunk 2cp-1-r], each chunk c entries; src rows of length S.
template <class V>
void keep_rows(V& v, int64_t B, int64_t S, int64_t c, int cp, int rank) {
  if (v.empty()) return;
  V out(static_cast<size_t>(B * 2 * c));
  for (int64_t b = 0; b < B; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t x = context_chunk(cp, rank, half);
      std::copy(v.begin() + b * S + x * c, v.begin() + b * S + (x + 1) * c, out.begin() + (b * 2 + half) * c);
    }
  v.swap(out);
}

}  // namespace

void keep_context_parallel_rows(MicroBatch& mb, int cp, int cp_rank) {
  if (cp == 1) return;
  check_context_parallel_length(mb.T, cp);
  const int64_t S = mb.T, c = S / (2 * cp);
  mb.sequence_segment_ids = mb.segment_ids;
  for (auto* v : {&mb.tokens, &mb.positions, &mb.segment_ids, &mb.targets}) keep_rows(*v, mb.B, S, c, cp, cp_rank);
  keep_rows(mb.weights, mb.B, S, c, cp, cp_rank);
  mb.T = 2 * c;
}

}  // namespace megadlm
