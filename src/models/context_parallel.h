#pragma once
// The micro-batch of one context-parallel rank: Megatron's load-balanced split of every sequence into
// 2cp chunks of T / (2cp) tokens, rank r keeping chunks r and 2cp-1-r (nn/ring_attention.h).
//
// Every cp rank prepares the whole micro-batch from the same samples first (the objective's noise,
// labels and loss weights are keyed by global sample and position, and the weights are normalised over
// the whole micro-batch), then keeps its rows: the per-token losses of the cp ranks add up to the
// single-process loss, and a diffusion label stays with its token.
#include "models/micro_batch.h"

namespace megadlm {

// Throws Error naming --seq-length when T is not a multiple of 2cp.
void check_context_parallel_length(int64_t seq_length, int cp);

// mb (whole sequences, B x T) -> this rank's B x T/cp rows, in place; mb.sequence_segment_ids gets the
// whole sequences' document ids when the micro-batch has any. Nothing changes at cp = 1.
void keep_context_parallel_rows(MicroBatch& mb, int cp, int cp_rank);

}  // namespace megadlm
