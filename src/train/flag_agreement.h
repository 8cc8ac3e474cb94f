#pragma once
// The ranks of one run must be started with the same flags. Ranks that disagree on --train-iters
// wait for each other in a collective for ever, on --hidden-size fail inside one with a message that
// names no flag, and on --seed train different replicas without a word; so at start-up every rank
// compares its flags with rank 0's.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/cli_flags.h"
#include "parallel/communicator.h"

namespace megadlm {

// The index of the first entry of `mine` that differs from `reference` (both the same length: the
// flags of one program), or mine.size() when none does.
size_t first_differing_flag(const std::vector<uint64_t>& mine, const std::vector<uint64_t>& reference);

// Collective over `world`. When some rank's flags differ from rank 0's, throws the same Error on every
// rank, naming the first differing flag (in declaration order), its value on rank 0 and on the lowest
// rank that differs there.
void require_same_flags_on_every_rank(const CliFlags& flags, Communicator& world);

}  // namespace megadlm
