// Data, tensor, pipeline, expert and context parallelism on --device cuda: two ranks, one GPU each, the
// gradients, the stages' activations, the tied embedding's gradient, the tensor-parallel activations,
// the rows sent to the experts and the ring attention's keys and values moved over the device
// communicator (NCCL; parallel/device_communicator.h). The trainer's losses and gradient norms on the device follow the
// same two-rank run on the CPU: data parallel for a dense and a MoE model (experts' gradients over the
// edp group), with overlapped buckets, and with the distributed optimizer; two pipeline stages (1F1B
// over four micro-batches, tied embeddings); two tensor-parallel ranks (vocab-parallel embedding and
// loss, column- and row-parallel projections), with and without sequence parallelism; two
// expert-parallel ranks of two experts each; two context-parallel ranks (the diffusion model with
// per-document masks, and a GPT). A run saved and resumed on the device continues as it
// would have.
//
// Run by ctest under `mpirun -np 2` (mpi_cuda_parallel_np2); alone, or with another number of ranks,
// they skip. CudaParallel.* need two visible GPUs; EmulatedCudaParallel.* run the same checks on the
// emulated device (emulated_device.h), whose device communicator runs MPI's collectives on its
// device memory and checks every pointer it is given.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "emulated_device.h"
#include "kernels/dispatch.h"
#include "parallel/device_communicator.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "ring_check.h"
#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

// Two ranks under mpirun, or the reason to skip.
std::string two_ranks_missing() {
  if (!launched_by_mpi()) return "needs mpirun -np 2 (ctest: mpi_cuda_parallel_np2)";
  init_distributed(nullptr, nullptr);
  if (world_size() != 2) return "needs exactly 2 ranks, got " + std::to_string(world_size());
  return "";
}

// One directory both ranks see: rank 0's TempDir, its path broadcast. Removed after both are done.
class SharedDir {
 public:
  explicit SharedDir(const std::string& tag = "shared") {
    char buf[1024] = {};
    if (world_rank() == 0) {
      owned_ = std::make_unique<test::TempDir>(tag);
      std::snprintf(buf, sizeof buf, "%s", owned_->str().c_str());
    }
    world_communicator()->broadcast(buf, sizeof buf, 0);
    path_ = buf;
  }
  ~SharedDir() { world_communicator()->barrier(); }  // before rank 0's TempDir goes
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

 private:
  std::unique_ptr<test::TempDir> owned_;
  std::string path_;
};

// flags with --name's value replaced (the flag parser refuses a flag given twice).
std::vector<std::string> with_flag(std::vector<std::string> flags, const std::string& name, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == name) {
      flags[i + 1] = value;
      return flags;
    }
  return test::plus(flags, {name, value});
}

// pretrain_difflm's flags of the robustness tests' tiny run on the counting data, with `extra`: two
// ranks of one micro-batch of 2 each, `iters` steps. The data is written by rank 0 alone into a
// directory both ranks read (every rank must be given the same flags, --data-path included).
std::vector<std::string> dp_flags(const SharedDir& data_dir, const std::vector<std::string>& extra,
                                  int iters = 3) {
  std::string data = data_dir / "toy_text_document";
  if (world_rank() == 0) data = test::make_counting_dataset(data_dir.str(), 60);
  world_communicator()->barrier();
  return test::plus(test::plus(test::plus({"pretrain_difflm"}, test::tiny_difflm_flags(data)), extra),
                    {"--train-iters", std::to_string(iters)});
}

// Two pipeline stages of one layer each, four micro-batches a step (1F1B's warm-up, steady state and
// cool-down), the embeddings tied across the stages.
std::vector<std::string> pp_flags(const SharedDir& data_dir, const std::vector<std::string>& extra,
                                  int iters = 3) {
  auto f = dp_flags(data_dir, test::plus({"--pipeline-model-parallel-size", "2"}, extra), iters);
  return with_flag(with_flag(f, "--num-layers", "2"), "--global-batch-size", "8");
}

// The same two-rank run on the CPU and on the device, saved under dir/cpu and dir/gpu; rank 0 (which
// alone writes metrics) checks that the device run's `keys` follow the CPU's (1e-3, as the one-GPU
// trainer cases) and that its gradients crossed the dp group. Both ranks return the device run's lines
// as rank 0 read them (empty on rank 1).
std::vector<nlohmann::json> run_follows_the_cpu(const std::vector<std::string>& flags,
                                                const std::vector<std::string>& keys, const std::string& group) {
  SharedDir dir;
  test::run_training(flags, {"--save", dir / "cpu"});
  test::run_training(flags, {"--save", dir / "gpu", "--device", "cuda"});
  if (world_rank() != 0) return {};
  const auto cpu = test::training_lines(dir / "cpu/metrics.jsonl");
  const auto gpu = test::training_lines(dir / "gpu/metrics.jsonl");
  EXPECT_EQ(cpu.size(), 3u);
  EXPECT_EQ(gpu.size(), 3u);
  for (size_t i = 0; i < std::min(cpu.size(), gpu.size()); ++i) {
    for (const std::string& key : keys) {
      if (!cpu[i].contains(key)) {
        ADD_FAILURE() << key << " missing from the CPU run's metrics";
        continue;
      }
      const double a = cpu[i][key].get<double>(), b = gpu[i][key].get<double>();
      EXPECT_NEAR(b, a, 1e-3 * std::abs(a)) << key << " at iteration " << i + 1;
    }
    // The device bytes (gradients, or the stages' activations) were counted on the group.
    if (!gpu[i].contains("comm") || !gpu[i]["comm"].contains(group)) {
      ADD_FAILURE() << "no " << group << " traffic counted: " << gpu[i].dump();
      continue;
    }
    EXPECT_GE(gpu[i]["comm"][group]["bytes_per_step"].get<double>(),
              cpu[i]["comm"][group]["bytes_per_step"].get<double>() * 0.99);
  }
  return gpu;
}

std::vector<nlohmann::json> dp_run_follows_the_cpu(const std::vector<std::string>& extra,
                                                   const std::vector<std::string>& keys) {
  SharedDir data_dir("data");
  return run_follows_the_cpu(dp_flags(data_dir, extra), keys, "dp");
}

// Dense: several buckets launched during the backward.
void dense_trainer_follows_the_cpu() {
  dp_run_follows_the_cpu({"--overlap-grad-reduce", "--ddp-bucket-size", "2000"}, {"loss", "grad_norm"});
}

// A MoE model of four experts, top-2, with an aux loss.
const std::vector<std::string> kMoE = {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "24",
                                       "--moe-aux-loss-coeff", "1e-2"};

// MoE (ep = 1): the experts' gradients go over the edp group, its own device communicator.
void moe_trainer_follows_the_cpu() {
  dp_run_follows_the_cpu(test::plus(kMoE, {"--ddp-bucket-size", "3000"}), {"loss", "grad_norm", "moe_aux_loss"});
}

// Expert parallelism (dp = ep = 2, two experts a rank): each layer's routed rows go to the rank of their
// expert and back, and their gradients likewise, over the ep group's device communicator; the row
// counts over its MPI one.
std::vector<std::string> ep_flags(const SharedDir& data_dir, const std::vector<std::string>& extra,
                                  int iters = 3) {
  return dp_flags(data_dir, test::plus(test::plus(kMoE, {"--expert-model-parallel-size", "2"}), extra), iters);
}

void expert_parallel_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(ep_flags(data_dir, {}), {"loss", "grad_norm", "moe_aux_loss"}, "ep");
}

// --use-distributed-optimizer: the gradient shards reduce-scattered, the moments and the update on
// each rank's shard, the parameters all-gathered, all on the device.
void distributed_optimizer_follows_the_cpu() {
  dp_run_follows_the_cpu({"--use-distributed-optimizer"}, {"loss", "grad_norm"});
}

// Pipeline: activations and their gradients between the stages, the tied embedding's gradient over the
// embedding group, the loss broadcast from the last stage, the norm's partial sums over pp.
void pipeline_trainer_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(pp_flags(data_dir, {}), {"loss", "grad_norm"}, "pp");
}

// Two tensor-parallel ranks (dp = 1, two micro-batches a step): the embedding's and the row-parallel
// projections' all-reduces, the column-parallel input gradients', and the vocab-parallel loss's row
// maxima and sums over the tp group's device communicator. `extra` picks the model.
std::vector<std::string> tp_flags(const SharedDir& data_dir, const std::vector<std::string>& extra,
                                  int iters = 3) {
  return dp_flags(data_dir, test::plus({"--tensor-model-parallel-size", "2"}, extra), iters);
}

// GPT-style (LayerNorm, GELU, learned positions, tied output layer).
void tensor_parallel_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(tp_flags(data_dir, {}), {"loss", "grad_norm"}, "tp");
}

// Llama/Qwen3-style (RMSNorm, SwiGLU, RoPE, grouped queries, per-head q/k norms whose weight gradients
// are summed over tp, a separate output layer) under --sequence-parallel: the rows between the blocks
// gathered and reduce-scattered, the norms' weight gradients summed over the ranks' rows.
void sequence_parallel_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(tp_flags(data_dir, {"--sequence-parallel", "--normalization", "RMSNorm", "--swiglu",
                                          "--ffn-hidden-size", "48", "--position-embedding-type", "rope",
                                          "--group-query-attention", "--num-query-groups", "2", "--qk-layernorm",
                                          "--disable-bias-linear", "--untie-embeddings-and-output-weights"}),
                      {"loss", "grad_norm"}, "tp");
}

// Two context-parallel ranks (dp = 1, two micro-batches a step, 32-token sequences: chunks of 8): the
// ring attention's keys and values and their gradients go round the cp group's device communicator,
// and the gradients are summed over it. `extra` picks the model.
std::vector<std::string> cp_flags(const SharedDir& data_dir, const std::vector<std::string>& extra,
                                  int iters = 3) {
  return with_flag(dp_flags(data_dir, test::plus({"--context-parallel-size", "2"}, extra), iters), "--seq-length",
                   "32");
}

// The diffusion model (bidirectional) with per-document masks: the keys' document ids of another
// rank's chunk reach the device kernel apart from the queries'.
void context_parallel_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(cp_flags(data_dir, {"--reset-attention-mask"}), {"loss", "grad_norm"}, "cp");
}

// A GPT (causal): the ring skips the later key chunks and pairs the rest whole.
void causal_context_parallel_follows_the_cpu() {
  SharedDir data_dir("data");
  run_follows_the_cpu(with_flag(cp_flags(data_dir, {}), "--model-type", "gpt"), {"loss", "grad_norm"}, "cp");
}

// The ring attention alone on two cp ranks: each rank's rows on the device follow the CPU ring's
// (bit for bit on the emulated device, whose kernels are the CPU's), every mask kind.
void ring_attention_follows_the_cpu() {
  ParallelLayout layout;
  layout.cp = 2;
  ParallelContext ctx = make_parallel_context(layout);
  backend_for(Device::CUDA);  // started first: it registers the device communicator factory
  ctx.cp.device_comm = make_device_communicator(Device::CUDA, ctx.cp.communicator(), "cp");
  test::ring_on_device_matches_the_cpu(Device::CUDA, ctx, cuda_available() ? 1e-4 : 0.0);
}

// The layouts resume_continues_the_run trains under (dp_flags, pp_flags, tp_flags, ep_flags, cp_flags).
enum class Layout { Data, Pipeline, Tensor, Expert, Context };

// A device run of 4 steps stopped after iteration 2 (saved by rank 0 into the shared directory) and
// resumed by both ranks takes iterations 3 and 4 as the uninterrupted device run did (with `extra`
// flags). Iteration 3's loss reads the loaded parameters; iteration 4's also the loaded AdamW moments
// and step count, through iteration 3's update.
void resume_continues_the_run(const std::vector<std::string>& extra, Layout layout = Layout::Data) {
  SharedDir dir;
  SharedDir data_dir("data");
  const auto on_device = test::plus({"--device", "cuda"}, extra);
  const auto flags = layout == Layout::Pipeline ? pp_flags(data_dir, on_device, 4)
                     : layout == Layout::Tensor ? tp_flags(data_dir, on_device, 4)
                     : layout == Layout::Expert  ? ep_flags(data_dir, on_device, 4)
                     : layout == Layout::Context ? cp_flags(data_dir, on_device, 4)
                                                 : dp_flags(data_dir, on_device, 4);
  test::run_training(flags, {"--save", dir / "whole"});
  test::run_training(flags, {"--exit-interval", "2", "--save", dir / "half"});
  test::run_training(flags, {"--save", dir / "half", "--load", dir / "half"});
  if (world_rank() != 0) return;
  const auto whole = test::training_lines(dir / "whole/metrics.jsonl");
  const auto resumed = test::training_lines(dir / "half/metrics.jsonl");
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(resumed.size(), 4u);  // 2 lines of the first run, then the resumed iterations 3 and 4
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(resumed[i]["iteration"].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(resumed[i]["loss"].get<double>(), whole[i]["loss"].get<double>()) << "iteration " << i + 1 << " differs";
  }
}

#define SKIP_UNLESS_TWO_RANKS()                              \
  do {                                                       \
    const std::string why = two_ranks_missing();             \
    if (!why.empty()) GTEST_SKIP() << why;                   \
  } while (0)

#define BOTH_DEVICES(name, ...)                                                                       \
  TEST(CudaParallel, name) {                                                                      \
    SKIP_UNLESS_TWO_RANKS();                                                                          \
    if (cuda_device_count() < 2)                                                                      \
      GTEST_SKIP() << "needs a GPU per rank (" << cuda_device_count() << " visible): NCCL refuses two " \
                   << "ranks on one GPU";                                                             \
    __VA_ARGS__;                                                                                      \
  }                                                                                                   \
  TEST(EmulatedCudaParallel, name) {                                                              \
    SKIP_UNLESS_TWO_RANKS();                                                                          \
    if (cuda_available()) GTEST_SKIP() << "a GPU is visible: CudaParallel runs on it instead";    \
    test::EmulatedCudaScope emulated;                                                                 \
    const int64_t before = test::emulated_collectives();                                              \
    __VA_ARGS__;                                                                                      \
    EXPECT_GT(test::emulated_collectives(), before) << "the device communicator was not used";      \
  }

BOTH_DEVICES(DenseTrainerFollowsTheCpu, dense_trainer_follows_the_cpu())
BOTH_DEVICES(MoETrainerFollowsTheCpu, moe_trainer_follows_the_cpu())
BOTH_DEVICES(DistributedOptimizerFollowsTheCpu, distributed_optimizer_follows_the_cpu())
BOTH_DEVICES(ResumeContinuesTheRun, resume_continues_the_run({}))
BOTH_DEVICES(DistributedOptimizerResumes, resume_continues_the_run({"--use-distributed-optimizer"}))
BOTH_DEVICES(PipelineTrainerFollowsTheCpu, pipeline_trainer_follows_the_cpu())
BOTH_DEVICES(PipelineResumes, resume_continues_the_run({}, Layout::Pipeline))
BOTH_DEVICES(TensorParallelFollowsTheCpu, tensor_parallel_follows_the_cpu())
BOTH_DEVICES(SequenceParallelFollowsTheCpu, sequence_parallel_follows_the_cpu())
BOTH_DEVICES(TensorParallelResumes, resume_continues_the_run({"--sequence-parallel"}, Layout::Tensor))
BOTH_DEVICES(ExpertParallelFollowsTheCpu, expert_parallel_follows_the_cpu())
BOTH_DEVICES(ExpertParallelResumes, resume_continues_the_run({}, Layout::Expert))
BOTH_DEVICES(RingAttentionFollowsTheCpu, ring_attention_follows_the_cpu())
BOTH_DEVICES(ContextParallelFollowsTheCpu, context_parallel_follows_the_cpu())
BOTH_DEVICES(CausalContextParallelFollowsTheCpu, causal_context_parallel_follows_the_cpu())
BOTH_DEVICES(ContextParallelResumes, resume_continues_the_run({"--reset-attention-mask"}, Layout::Context))

}  // namespace
