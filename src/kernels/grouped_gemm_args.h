#pragma once
// The argument check every backend's grouped products (Backend::grouped_gemm_*) share: G groups of
// rows given by offsets [G+1], products of N columns over K.
#include <cstdint>

#include "core/error.h"

namespace megadlm {

inline void check_grouped_gemm_args(const char* who, int64_t G, const int64_t* offsets, int64_t N, int64_t K) {
  MEGADLM_CHECK(G >= 0 && N >= 1 && K >= 1, who, ": needs G >= 0, N >= 1 and K >= 1 (G=", G, ", N=", N, ", K=", K,
                ")");
  MEGADLM_CHECK(offsets[0] == 0, who, ": offsets must start at 0, got ", offsets[0]);
  for (int64_t g = 0; g < G; ++g)
    MEGADLM_CHECK(offsets[g + 1] >= offsets[g], who, ": offsets must not decrease (offsets[", g, "]=", offsets[g],
                  ", offsets[", g + 1, "]=", offsets[g + 1], ")");
}

}  // namespace megadlm
