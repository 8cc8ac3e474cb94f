#pragma once
// pretrain_difflm's parallelism flags (Megatron's names), declared and read here so that
// arguments.cpp only calls these functions:
//   --tensor-model-parallel-size, --pipeline-model-parallel-size, --expert-model-parallel-size,
//   --context-parallel-size (only 1), --sequence-parallel, --use-distributed-optimizer,
//   --overlap-grad-reduce, --ddp-bucket-size.
// Data parallel is what remains of the world (mpirun -np N / srun) after tp x pp x cp.
#include <cstdint>

#include "core/cli_flags.h"
#include "nn/transformer_config.h"
#include "parallel/layout.h"

namespace megadlm {

struct ParallelArgs {
  ParallelLayout layout;
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;  // start each bucket's all-reduce as soon as its gradients are final
  int64_t ddp_bucket_size = 0;       // elements per gradient bucket; 0 = Megatron's default 40M / 1 bucket
};

void declare_parallel_flags(CliFlags& f);
// Throws an Error naming the flag at fault (sizes below 1, --context-parallel-size > 1, sizes that do
// not divide the world of this process: parallel/layout.h data_parallel_size).
void read_parallel_flags(const CliFlags& f, ParallelArgs& out);

// Checks the layout against the world and the model, with an Error naming the flag and the size that
// does not divide: the world (tp x pp x cp), dp by ep, heads and kv groups by tp, layers by pp,
// experts by ep, the (padded) vocabulary by tp, the global batch by micro x dp.
void validate_parallel_layout(const ParallelArgs& p, int world, const TransformerConfig& model,
                              int64_t micro_batch_size, int64_t global_batch_size);

}  // namespace megadlm
