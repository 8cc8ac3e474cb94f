#pragma once
// pretrain_difflm's arguments: MegaDLMs' guide spellings (--num-heads, --batch-size, --output-dir,
// --max-steps, --moe-grouped-gemm true) and Megatron's names for the same things
// (--num-attention-heads, --micro-batch-size, --save, --train-iters), plus the DLM flags.
#include <cstdint>
#include <string>
#include <vector>

#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "nn/transformer_config.h"
#include "objectives/masked_diffusion.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/llava_arguments.h"
#include "train/parallel_arguments.h"
#include "train/precision_arguments.h"
#include "train/t5_arguments.h"
#include "train/tensorboard_arguments.h"

namespace megadlm {

struct TrainArgs {
  // model
  ModelType model_type = ModelType::DiffLM;
  std::string model_running_mode = "difflm-noshift";
  TransformerConfig model;             // vocab_size filled from the tokenizer
  int64_t seq_length = 1024;
  int64_t make_vocab_size_divisible_by = 128;
  std::string attention_mask_type;     // "" = the model type's default
  int64_t num_experts = 0;
  // diffusion
  std::string mask_token;              // id or token text; "" = the tokenizer's or a new <|mask|>
  DiffusionOptions diffusion;
  // --block-diffusion (model.block_diffusion): the BD3-LM objective's clipped schedule, t_b ~ U[min, max]
  double bd3_clip_min = 1e-3, bd3_clip_max = 1.0;
  // --model-type bert (train/bert_trainer.h): the BERT dataset's masking and segments, and the heads
  double mask_prob = 0.15;             // --mask-prob
  double short_seq_prob = 0.1;         // --short-seq-prob
  bool bert_binary_head = true;        // false: --bert-no-binary-head
  // --model-type t5 (train/t5_trainer.h): --mask-prob is the noise density, --short-seq-prob as BERT's
  T5Args t5;                           // --encoder-seq-length, ... (train/t5_arguments.h)
  // --model-type llava (train/llava_arguments.h): model_type is then the language backbone's
  LlavaArgs llava;
  // data
  std::vector<std::string> data_path;  // [W1] P1 [W2 P2 ...]
  std::string split = "969,30,1";
  std::vector<std::string> train_data_path, valid_data_path, test_data_path;
  std::string data_cache_path;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  int64_t null_vocab_size = 0;
  bool reset_position_ids = false, reset_attention_mask = false, eod_mask_loss = false;
  // supervised fine-tuning (docs/sft.md): loss masks beside the data; one conversation per sample
  // padded with end-of-document tokens, or packed with --sft-packing
  bool sft = false, sft_packing = false;
  // training
  int64_t micro_batch_size = 8;
  int64_t global_batch_size = 0;       // 0 = micro_batch_size (no accumulation)
  int64_t train_iters = 1000;
  LrSchedule lr;
  double lr_warmup_fraction = -1;
  AdamWConfig adam;
  uint64_t seed = 1234;
  Device device = Device::CPU;  // --device cpu|cuda: where parameters, activations and AdamW live
  // evaluation, logging
  int64_t eval_interval = 1000, eval_iters = 10, log_interval = 10;
  TensorBoardArgs tensorboard;        // --tensorboard-dir, --tensorboard-log-interval, ... (train/tensorboard_arguments.h)
  // checkpoints
  std::string save, load;
  std::string load_hf;                 // --load-hf: start from a HuggingFace checkpoint directory
  int64_t save_interval = 0;
  bool finetune = false, no_load_optim = false, no_load_rng = false;
  // limits
  int64_t exit_interval = 0;
  double exit_duration_in_mins = 0;
  bool exit_signal_handler = false;    // --exit-signal-handler: save and exit 0 on --exit-signal / SIGINT
  int exit_signal = 15;                // --exit-signal (SIGTERM)
  ParallelArgs parallel;              // --tensor-model-parallel-size ... (train/parallel_arguments.h)
  PrecisionArgs precision;            // --bf16, --fp16, --fp8-format, --recompute-* (train/precision_arguments.h)
  int64_t max_skipped_steps = 10;     // --max-skipped-steps: consecutive non-finite steps that stop the run
};

// Parses argv; returns false when --help was printed. Throws Error naming a bad or inconsistent flag.
bool parse_train_args(int argc, const char* const* argv, TrainArgs& out);

}  // namespace megadlm
