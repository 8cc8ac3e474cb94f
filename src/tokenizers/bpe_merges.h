#pragma once
// The merge loop of BPE training, shared by the byte-level BPE trainer (tokenizer_hf.h) and the
// WordPiece trainer (wordpiece.h): `tokenizers`' BpeTrainer order, the most frequent adjacent pair
// first and, among equal counts, the pair of smaller ids.
#include <cstdint>
#include <functional>
#include <vector>

namespace megadlm {

// words[w]: the symbol ids of a distinct word, seen count[w] times; rewritten in place as pairs merge.
// Each step merges the best pair (a, b) everywhere, left to right and non-overlapping, into the id
// merge(a, b) returns (the caller adds the merged token to its vocabulary). Stops when full() is true,
// when no pair is left, or when the best pair is seen fewer than min_frequency times (or never).
void run_bpe_merges(std::vector<std::vector<int32_t>>& words, const std::vector<int64_t>& count,
                    int64_t min_frequency, const std::function<bool()>& full,
                    const std::function<int32_t(int32_t, int32_t)>& merge);

}  // namespace megadlm
