#include "train/parallel_arguments.h"

#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace megadlm {

void declare_parallel_flags(CliFlags& f) {
  f.add_int("tensor-model-parallel-size", 1, "tensor-parallel size (ranks splitting each layer)", at_least(1));
  f.add_int("pipeline-model-parallel-size", 1, "pipeline-parallel size (stages splitting the layers)", at_least(1));
  f.add_int("expert-model-parallel-size", 1, "expert-parallel size (ranks splitting the experts; divides dp)", at_least(1));
  f.add_int("context-parallel-size", 1, "context-parallel size (ranks splitting every sequence; CPU only)", at_least(1));
  f.add_bool("sequence-parallel", "split activations between blocks along the sequence over the tp group");
  f.add_bool("use-distributed-optimizer", "shard AdamW state and the update over the data-parallel group");
  f.add_bool("overlap-grad-reduce", "all-reduce each gradient bucket while the backward still runs");
  f.add_int("ddp-bucket-size", 0, "gradient elements per data-parallel bucket (0 = 40M, Megatron's default)", at_least(0));
}

void read_parallel_flags(const CliFlags& f, ParallelArgs& p) {
  p.layout.tp = static_cast<int>(f.get_int("tensor-model-parallel-size"));
  p.layout.pp = static_cast<int>(f.get_int("pipeline-model-parallel-size"));
  p.layout.ep = static_cast<int>(f.get_int("expert-model-parallel-size"));
  p.layout.cp = static_cast<int>(f.get_int("context-parallel-size"));
  p.sequence_parallel = f.get_bool("sequence-parallel");
  p.use_distributed_optimizer = f.get_bool("use-distributed-optimizer");
  p.overlap_grad_reduce = f.get_bool("overlap-grad-reduce");
  p.ddp_bucket_size = f.get_int("ddp-bucket-size");
  MEGADLM_CHECK(p.ddp_bucket_size >= 0, "--ddp-bucket-size must be 0 (default) or positive, got ", p.ddp_bucket_size);
  if (p.ddp_bucket_size == 0) p.ddp_bucket_size = 40000000;
  // The sizes against the world right away (the model's checks come with the model): an error here
  // names the flag before anything is loaded.
  (void)data_parallel_size(p.layout, world_size());
}

void validate_parallel_layout(const ParallelArgs& p, int world, const TransformerConfig& c, int64_t micro,
                              int64_t global) {
  const ParallelLayout& l = p.layout;
  const int dp = data_parallel_size(l, world);  // names --*-parallel-size when the world does not divide
  MEGADLM_CHECK(c.num_attention_heads % l.tp == 0, "--num-attention-heads ", c.num_attention_heads,
                " is not divisible by --tensor-model-parallel-size ", l.tp);
  MEGADLM_CHECK(c.num_query_groups % l.tp == 0, "--num-query-groups ", c.num_query_groups,
                " (kv groups) is not divisible by --tensor-model-parallel-size ", l.tp);
  MEGADLM_CHECK(c.ffn_hidden_size % l.tp == 0, "--ffn-hidden-size ", c.ffn_hidden_size,
                " is not divisible by --tensor-model-parallel-size ", l.tp);
  MEGADLM_CHECK(c.vocab_size >= l.tp, "the padded vocabulary ", c.vocab_size, " is smaller than --tensor-model-parallel-size ",
                l.tp, ": every tensor-parallel rank needs a row of it");
  MEGADLM_CHECK(c.num_layers % l.pp == 0, "--num-layers ", c.num_layers,
                " is not divisible by --pipeline-model-parallel-size ", l.pp);
  if (l.ep > 1) {
    MEGADLM_CHECK(c.moe.enabled(), "--expert-model-parallel-size ", l.ep, " needs a MoE model (--num-experts)");
    MEGADLM_CHECK(c.moe.num_experts % l.ep == 0, "--num-experts ", c.moe.num_experts,
                  " is not divisible by --expert-model-parallel-size ", l.ep);
  }
  // Under cp the router sums its top-k counts over the cp group; a capacity or expert choice would rank
  // all of a batch's tokens together, which cp splits.
  if (l.cp > 1 && c.moe.enabled()) {
    MEGADLM_CHECK(c.moe.router_type == MoERouterType::TopK, "--context-parallel-size ", l.cp,
                  " with --moe-router-type expert_choice is not supported: an expert would choose among one rank's ",
                  "chunks only");
    MEGADLM_CHECK(c.moe.capacity_factor <= 0, "--context-parallel-size ", l.cp, " with --moe-expert-capacity-factor ",
                  c.moe.capacity_factor, " is not supported: the capacity would rank one rank's chunks only");
  }
  MEGADLM_CHECK(global % (micro * dp) == 0, "--global-batch-size ", global, " is not a multiple of --micro-batch-size ",
                micro, " x data-parallel size ", dp, " (world ", world, " / tp ", l.tp, " / pp ", l.pp, ")");
}

}  // namespace megadlm
