#include "train/arguments.h"

#include <cstdio>
#include <map>

#include "core/error.h"
#include "train/model_type_flags.h"
#include "core/cli_flags.h"
#include "models/context_parallel.h"
#include "parallel/mpi_communicator.h"
#include "train/flag_agreement.h"
#include "train/hf_init.h"
#include "train/moe_arguments.h"
#include "train/parallel_arguments.h"
#include "train/precision_arguments.h"
#include "train/signals.h"
#include "train/t5_arguments.h"
#include "train/tensorboard_arguments.h"

namespace megadlm {

namespace {

// Guide spellings -> Megatron's canonical names.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> a = {
      {"num-heads", "num-attention-heads"}, {"batch-size", "micro-batch-size"}, {"output-dir", "save"},
      {"max-steps", "train-iters"},
  };
  return a;
}

// Flags that MegaDLMs' guide writes with a value (`--moe-grouped-gemm true`) and Megatron as a bare
// switch (`--moe-grouped-gemm`): a bare one means true.
bool is_switch_or_value_flag(const std::string& name) { return name == "moe-grouped-gemm"; }

std::vector<std::string> canonical_args(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string tok = argv[i];
    if (tok.rfind("--", 0) == 0) {
      const size_t eq = tok.find('=');
      const std::string name = tok.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      auto it = aliases().find(name);
      if (it != aliases().end()) tok = "--" + it->second + (eq == std::string::npos ? "" : tok.substr(eq));
      const bool bare = eq == std::string::npos && (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0);
      if (is_switch_or_value_flag(name) && bare) {
        out.push_back(tok);
        out.push_back("true");
        continue;
      }
    }
    out.push_back(tok);
  }
  return out;
}

void declare(CliFlags& f) {
  // model
  f.add_string("model-type", "difflm",
               "difflm (masked diffusion, bidirectional), gpt (autoregressive), bert (MLM + sentence order; "
               "CPU, fp32, data and tensor parallel: docs/bert.md), t5 (span corruption; CPU, fp32, data "
               "and tensor parallel: docs/t5.md) or llava (a vision tower and projector in front of a gpt or "
               "difflm backbone, --language-model-type; docs/llava.md)");
  f.add_bool("bert-no-binary-head", "--model-type bert: no pooler and binary (sentence-order) head");
  f.add_double("mask-prob", 0.15, "--model-type bert: share of a sample's tokens masked for the MLM loss; t5: the "
               "noise density (share of the text in the corrupted spans)", closed_open(0, 1));
  f.add_double("short-seq-prob", 0.1, "--model-type bert and t5: probability of a shorter segment target", closed(0, 1));
  declare_t5_flags(f);  // --encoder-seq-length, --decoder-seq-length, ... (train/t5_arguments.cpp)
  f.add_string("model-running-mode", "difflm-noshift", "difflm-noshift (predict masked tokens in place) or vanilla (shifted)");
  f.add_int("num-layers", 12, "transformer layers", at_least(1));
  f.add_int("hidden-size", 768, "hidden size C", at_least(1));
  f.add_int("num-attention-heads", 12, "attention heads H (guide spelling: --num-heads)", at_least(1));
  f.add_bool("group-query-attention", "use grouped-query attention with --num-query-groups");
  f.add_int("num-query-groups", 0, "key/value heads K under --group-query-attention", at_least(0));
  f.add_int("kv-channels", 0, "head dimension D (default hidden / heads)", at_least(0));
  f.add_int("ffn-hidden-size", 0, "MLP hidden size F (default 4C, also with --swiglu, as Megatron)", at_least(0));
  f.add_int("seq-length", 1024, "sequence length T", at_least(2));
  f.add_int("max-position-embeddings", 0, "position table size (default --seq-length)", at_least(0));
  f.add_string("normalization", "LayerNorm", "LayerNorm or RMSNorm");
  f.add_double("norm-epsilon", 1e-5, "epsilon of the norms", above(0));
  f.add_bool("swiglu", "SwiGLU MLP instead of GELU");
  f.add_string("position-embedding-type", "learned_absolute", "learned_absolute, rope or none");
  f.add_double("rotary-base", 10000, "RoPE base", above(0));
  f.add_bool("qk-layernorm", "per-head RMSNorm of queries and keys (Qwen3)");
  f.add_bool("disable-bias-linear", "no biases in linear layers");
  f.add_bool("add-qkv-bias", "biases on q/k/v even with --disable-bias-linear (Qwen2)");
  f.add_bool("untie-embeddings-and-output-weights", "separate output layer");
  f.add_double("init-method-std", 0.02, "std of the normal initialisation", above(0));
  f.add_int("make-vocab-size-divisible-by", 128, "pad the vocabulary to a multiple of this (whatever the tensor-parallel size; the padded rows get -inf logits)", at_least(1));
  f.add_double("hidden-dropout", 0.0, "dropout after attention and MLP (only 0 is supported yet)", closed_open(0, 1));
  f.add_double("attention-dropout", 0.0, "dropout on attention probabilities (only 0 is supported yet)", closed_open(0, 1));
  f.add_string("attention-mask-type", "", "no_mask, causal or block_causal (default: no_mask for difflm, causal for gpt)");
  f.add_int("block-length", 0, "block size of --attention-mask-type block_causal (and of --block-diffusion)", at_least(0));
  f.add_bool("block-diffusion", "train a block diffusion LM (BD3-LM) with blocks of --block-length (docs/block_diffusion.md)");
  f.add_double("bd3-clip-min", 1e-3, "--block-diffusion: lower end of the blocks' noise levels t ~ U[min, max] (default --dlm-eps)");
  f.add_double("bd3-clip-max", 1, "--block-diffusion: upper end of the blocks' noise levels", closed(0, 1));
  declare_moe_flags(f);  // --num-experts, --moe-* (train/moe_arguments.cpp)
  // diffusion
  f.add_string("mask-token", "", "mask token id or text (default: the tokenizer's, else a new <|mask|>)");
  f.add_double("dlm-eps", 1e-3, "minimum mask probability: p = (1 - eps) t + eps", closed_open(0, 1));
  f.add_string("dlm-loss", "llada", "llada, mdlm or megadlms");
  f.add_double("difflm-varilen-prob", 0.01, "share of samples trained at a random shorter length", closed(0, 1));
  // data
  f.add_list("data-path", {}, "[W1] PREFIX1 [W2 PREFIX2 ...] blended datasets (with --split)");
  f.add_string("split", "969,30,1", "train,valid,test proportions of --data-path documents");
  f.add_list("train-data-path", {}, "separate training data ([W] PREFIX ...)");
  f.add_list("valid-data-path", {}, "separate validation data");
  f.add_list("test-data-path", {}, "separate test data");
  f.add_string("data-cache-path", "", "where dataset indices are cached (default: beside the data)");
  f.add_string("tokenizer-type", "", "tokenizer (default: the one recorded beside the data)");
  f.add_string("vocab-file", "", "GPT2BPETokenizer vocab.json, or BertWordPiece* vocab.txt");
  f.add_string("merge-file", "", "GPT2BPETokenizer merges.txt");
  f.add_string("tokenizer-model", "", "tokenizer.json or SentencePiece .model");
  f.add_int("vocab-size", 0, "NullTokenizer vocabulary size", at_least(0));
  f.add_bool("reset-position-ids", "restart positions after each end-of-document token");
  f.add_bool("reset-attention-mask", "documents packed in a sample attend only within themselves");
  f.add_bool("eod-mask-loss", "no loss on end-of-document tokens (gpt)");
  f.add_bool("sft", "supervised fine-tuning: loss only on response tokens, from the loss mask <prefix>.loss_mask "
             "beside each data prefix (docs/sft.md)");
  f.add_bool("sft-packing", "with --sft: pack conversations into samples as pretraining does (default: one "
             "conversation per sample, padded with end-of-document tokens)");
  // training
  f.add_int("micro-batch-size", 8, "sequences per micro-batch (guide spelling: --batch-size)", at_least(1));
  f.add_int("global-batch-size", 0, "sequences per update (default: the micro-batch size)", at_least(0));
  f.add_int("train-iters", 1000, "updates to run (guide spelling: --max-steps)", at_least(1));
  f.add_double("lr", 3e-4, "peak learning rate", at_least(0));
  f.add_double("min-lr", 0.0, "final learning rate", at_least(0));
  f.add_int("lr-warmup-iters", 0, "linear warm-up iterations", at_least(0));
  f.add_double("lr-warmup-fraction", -1, "warm-up as a fraction of --lr-decay-iters", closed(0, 1));
  f.add_string("lr-decay-style", "cosine", "constant, linear, cosine, inverse-square-root or WSD");
  f.add_int("lr-decay-iters", 0, "decay window (default --train-iters)", at_least(0));
  f.add_int("lr-wsd-decay-iters", 0, "WSD: iterations of the final anneal", at_least(0));
  f.add_string("lr-wsd-decay-style", "exponential", "WSD anneal: exponential, linear or cosine");
  f.add_double("weight-decay", 0.01, "decoupled weight decay (not on norms and biases)", at_least(0));
  f.add_double("adam-beta1", 0.9, "AdamW beta1", closed_open(0, 1));
  f.add_double("adam-beta2", 0.999, "AdamW beta2", closed_open(0, 1));
  f.add_double("adam-eps", 1e-8, "AdamW epsilon", above(0));
  f.add_double("clip-grad", 1.0, "clip the global gradient norm (0 = off)", at_least(0));
  f.add_int("seed", 1234, "run seed: initialisation, data order, diffusion noise");
  f.add_string("device", "cpu",
               "cpu or cuda (one GPU per rank; data, tensor, pipeline and expert parallelism across ranks; docs/cuda.md)");
  // evaluation, logging
  f.add_int("eval-interval", 1000, "iterations between evaluations", at_least(0));
  f.add_int("eval-iters", 10, "validation micro-batches per evaluation", at_least(0));
  f.add_int("log-interval", 10, "iterations between log lines", at_least(0));
  declare_tensorboard_flags(f);  // --tensorboard-dir, ... (train/tensorboard_arguments.cpp)
  declare_llava_flags(f);  // --language-model-type, --img-h, --vision-*, ... (train/llava_arguments.cpp)
  // checkpoints
  f.add_string("save", "", "checkpoint directory (guide spelling: --output-dir)");
  f.add_int("save-interval", 0, "iterations between checkpoints (0 = only at the end)", at_least(0));
  f.add_string("load", "", "resume from this checkpoint directory");
  f.add_string("load-hf", "", "start from a HuggingFace checkpoint directory (model flags from its config.json)");
  f.add_bool("finetune", "load weights only (no optimizer state); iteration and data position start at 0");
  f.add_bool("no-load-optim", "do not load the optimizer state");
  f.add_bool("no-load-rng",
             "accepted for Megatron compatibility and has no effect: there is no RNG state to load (every random "
             "draw is Philox keyed by --seed and the sample and step indices)");
  f.add_int("exit-interval", 0, "exit (after saving) when the iteration is a multiple of this", at_least(0));
  f.add_double("exit-duration-in-mins", 0, "exit (after saving) after this many minutes", at_least(0));
  f.add_bool("exit-signal-handler", "on --exit-signal or SIGINT: finish the iteration, save, exit 0");
  f.add_string("exit-signal", "SIGTERM", "the signal --exit-signal-handler catches (besides SIGINT)");
  f.add_int("max-skipped-steps", 10, "stop with an error after this many consecutive non-finite steps (0 = never)", at_least(0));
  declare_parallel_flags(f);  // --tensor-model-parallel-size, ... (train/parallel_arguments.cpp)
  declare_precision_flags(f);  // --bf16, --fp16, --fp8-*, --recompute-* (train/precision_arguments.cpp)
}

// --sft and its layout. The variable-length draw of diffusion pretraining would cut conversations and
// their loss masks at random, so --sft turns it off and refuses it when asked for.
void read_sft_flags(const CliFlags& f, TrainArgs& a) {
  a.sft = f.get_bool("sft");
  a.sft_packing = f.get_bool("sft-packing");
  MEGADLM_CHECK(a.sft || !a.sft_packing, "--sft-packing needs --sft (it chooses how --sft data fills samples)");
  if (!a.sft) return;
  MEGADLM_CHECK(!f.given("difflm-varilen-prob") || a.diffusion.varilen_prob == 0, "--sft with --difflm-varilen-prob ",
                a.diffusion.varilen_prob, ": supervised fine-tuning trains on whole conversations (give 0 or leave ",
                "the flag out; --sft turns it off)");
  a.diffusion.varilen_prob = 0;
}

void require_unsupported_off(const CliFlags& f) {
  MEGADLM_CHECK(f.get_double("hidden-dropout") == 0.0, "--hidden-dropout ", f.get_double("hidden-dropout"),
                ": dropout is not available in this build yet (use 0)");
  MEGADLM_CHECK(f.get_double("attention-dropout") == 0.0, "--attention-dropout ", f.get_double("attention-dropout"),
                ": dropout is not available in this build yet (use 0)");
}

// --block-diffusion: the model keeps block_causal attention with blocks of --block-length (what a block
// sees when it is sampled); the objective builds the 2T layout. Flags it cannot honour are refused.
void read_block_diffusion_flags(const CliFlags& f, TrainArgs& a) {
  const bool on = f.get_bool("block-diffusion");
  for (const char* flag : {"bd3-clip-min", "bd3-clip-max"})
    MEGADLM_CHECK(on || !f.given(flag), "--", flag, " needs --block-diffusion");
  if (!on) return;
  MEGADLM_CHECK(a.model_type == ModelType::DiffLM, "--block-diffusion needs --model-type difflm");
  const int64_t L = f.get_int("block-length");
  MEGADLM_CHECK(L > 0, "--block-diffusion needs --block-length > 0 (the block length L')");
  MEGADLM_CHECK(a.seq_length % L == 0, "--block-diffusion: --seq-length ", a.seq_length,
                " is not a multiple of --block-length ", L);
  MEGADLM_CHECK(a.attention_mask_type.empty() || a.attention_mask_type == "block_causal",
                "--block-diffusion trains block_causal attention; --attention-mask-type ", a.attention_mask_type,
                " does not apply");
  MEGADLM_CHECK(a.model_running_mode == "difflm-noshift", "--block-diffusion predicts masked tokens in place; ",
                "--model-running-mode ", a.model_running_mode, " does not apply");
  MEGADLM_CHECK(f.get_int("context-parallel-size") == 1, "--block-diffusion does not run with --context-parallel-size ",
                f.get_int("context-parallel-size"), " (its two halves of a sequence are not chunked)");
  MEGADLM_CHECK(!f.given("difflm-varilen-prob") || f.get_double("difflm-varilen-prob") == 0,
                "--difflm-varilen-prob does not apply to --block-diffusion (every row is trained at full length)");
  MEGADLM_CHECK(!f.given("dlm-loss") || f.get_string("dlm-loss") == "llada", "--dlm-loss ", f.get_string("dlm-loss"),
                " does not apply to --block-diffusion (its loss weights each block by 1 / t)");
  for (const char* flag : {"reset-position-ids", "reset-attention-mask"})
    MEGADLM_CHECK(!f.get_bool(flag), "--", flag, " does not apply to --block-diffusion (documents are not separated)");
  a.model.attention_mask = MaskType::BlockCausal;
  a.model.attention_block_size = L;
  a.model.block_diffusion = true;
  a.diffusion.varilen_prob = 0;
  a.bd3_clip_min = f.given("bd3-clip-min") ? f.get_double("bd3-clip-min") : a.diffusion.eps;
  a.bd3_clip_max = f.get_double("bd3-clip-max");
  MEGADLM_CHECK(a.bd3_clip_min >= 0 && a.bd3_clip_min < a.bd3_clip_max, "--bd3-clip-min ", a.bd3_clip_min,
                " must be in [0, --bd3-clip-max ", a.bd3_clip_max, ")");
}

// --model-type bert and t5 train on the CPU in fp32 or bf16 (train/family_trainer.h), BERT under data,
// tensor and pipeline parallelism (T5 under data and tensor parallelism without sequence parallelism):
// what that does not build is an Error naming the flag, MoE first (both are dense only).
void read_family_flags(const CliFlags& f, TrainArgs& a) {
  const bool bert = a.model_type == ModelType::BERT, t5 = a.model_type == ModelType::T5;
  refuse_flags_for_other_models(f, bert, std::initializer_list<const char*>{"bert-no-binary-head"}, "--model-type bert");
  refuse_flags_for_other_models(f, bert || t5, std::initializer_list<const char*>{"mask-prob", "short-seq-prob"},
                                "--model-type bert or t5");
  if (!bert && !t5) return;
  const std::string type = model_type_name(a.model_type);
  MEGADLM_CHECK(f.get_int("num-experts") == 0, "--model-type ", type, " is dense only: --num-experts ",
                f.get_int("num-experts"), " is not available for it");
  const std::string why = bert ? " (pretrain_difflm trains BERT on the CPU, in fp32 or bf16, under data, tensor and pipeline parallelism: docs/bert.md)"
                               : " (pretrain_difflm trains T5 on the CPU, in fp32 or bf16, under data and tensor parallelism: docs/t5.md)";
  for (const char* flag : {"pipeline-model-parallel-size", "context-parallel-size", "expert-model-parallel-size"})
    MEGADLM_CHECK(f.get_int(flag) == 1 || (bert && std::string(flag) == "pipeline-model-parallel-size"), "--", flag, " ",
                  f.get_int(flag), " is not available with --model-type ", type, why);
  MEGADLM_CHECK(f.get_string("device") == "cpu", "--device ", f.get_string("device"),
                " is not available with --model-type ", type, why);
  // The other model types' objectives and inputs; --load-hf imports decoders (convert_checkpoint
  // imports BERT and T5); the heads take the tokenizer's vocabulary unpadded; the samples are built in
  // memory (no index cache).
  for (const char* flag : {"sft", "sft-packing", "block-diffusion", "mask-token", "dlm-eps", "dlm-loss",
                           "difflm-varilen-prob", "model-running-mode", "attention-mask-type", "block-length",
                           "reset-position-ids", "reset-attention-mask", "eod-mask-loss", "load-hf",
                           "make-vocab-size-divisible-by", "data-cache-path"})
    MEGADLM_CHECK(!f.given(flag), "--", flag, " does not apply to --model-type ", type);
  // Not built for these families: fp16 (its loss scaler is the decoders' trainer's) and fp8, the
  // overlapped gradient reduction, the other data sources, TensorBoard, the exit signal handler (and for
  // T5 sequence parallelism).
  for (const char* flag : {"fp16", "fp8-format", "overlap-grad-reduce", "train-data-path", "valid-data-path",
                           "test-data-path", "tensorboard-dir", "exit-signal-handler"})
    MEGADLM_CHECK(!f.given(flag), "--", flag, " is not available with --model-type ", type, why);
  MEGADLM_CHECK(bert || !f.given("sequence-parallel"), "--sequence-parallel is not available with --model-type t5", why);
  MEGADLM_CHECK(f.get_list("data-path").size() == 1, "--data-path: --model-type ", type, " takes one sentence-split ",
                "prefix (preprocess_data --split-sentences), not a blend", why);
  a.mask_prob = f.get_double("mask-prob");
  MEGADLM_CHECK(a.mask_prob > 0, "--mask-prob ", a.mask_prob, " must be in (0, 1): ",
                bert ? "the MLM loss needs masked tokens" : "the noise density of T5's span corruption");
  a.short_seq_prob = f.get_double("short-seq-prob");
  a.bert_binary_head = bert && !f.get_bool("bert-no-binary-head");
}

// Context parallelism splits every sequence into 2cp equal chunks (models/context_parallel.h) that the
// ring attention pairs whole (nn/ring_attention.h): a block of a block-causal mask must not straddle two.
void check_context_parallel_flags(const TrainArgs& a, int cp) {
  check_context_parallel_length(a.seq_length, cp);
  const int64_t chunk = a.seq_length / (2 * cp);
  MEGADLM_CHECK(a.model.attention_mask != MaskType::BlockCausal || chunk % a.model.attention_block_size == 0,
                "--block-length ", a.model.attention_block_size, " does not divide the context-parallel chunk of ",
                chunk, " tokens (--seq-length ", a.seq_length, " / (2 x --context-parallel-size ", cp, "))");
}

}  // namespace

bool parse_train_args(int argc, const char* const* argv, TrainArgs& a) {
  CliFlags f("pretrain_difflm", "Pretrain a masked diffusion LM (--model-type difflm), a GPT (--model-type gpt), a BERT (--model-type bert) "
             "or a T5 (--model-type t5).");
  declare(f);
  f.parse(canonical_args(argc, argv));
  if (f.help_requested()) {
    std::fputs(f.help().c_str(), stdout);
    std::fputs("\nGuide spellings accepted: --num-heads, --batch-size, --output-dir, --max-steps.\n", stdout);
    return false;
  }
  require_unsupported_off(f);
  require_same_flags_on_every_rank(f, *world_communicator());

  a.llava = read_llava_flags(f, f.get_string("model-type"), static_cast<float>(f.get_double("init-method-std")));
  a.model_type = a.llava.enabled ? a.llava.language : model_type_from_name(f.get_string("model-type"));
  read_family_flags(f, a);
  a.model_running_mode = f.get_string("model-running-mode");
  MEGADLM_CHECK(a.model_running_mode == "difflm-noshift" || a.model_running_mode == "vanilla",
                "--model-running-mode: unknown value '", a.model_running_mode, "' (expected difflm-noshift or vanilla)");
  TransformerConfig& m = a.model;
  m.num_layers = f.get_int("num-layers");
  m.hidden_size = f.get_int("hidden-size");
  m.num_attention_heads = f.get_int("num-attention-heads");
  // With --load-hf the shape comes from config.json (checked there), not from these flags' defaults.
  MEGADLM_CHECK(f.given("kv-channels") || f.given("load-hf") || m.hidden_size % m.num_attention_heads == 0, "--num-attention-heads ",
                m.num_attention_heads, " does not divide --hidden-size ", m.hidden_size);
  m.num_query_groups = m.num_attention_heads;
  if (f.get_bool("group-query-attention")) {
    MEGADLM_CHECK(f.get_int("num-query-groups") > 0, "--group-query-attention needs --num-query-groups");
    m.num_query_groups = f.get_int("num-query-groups");
  }
  MEGADLM_CHECK(m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups == 0, "--num-query-groups ",
                m.num_query_groups, " does not divide --num-attention-heads ", m.num_attention_heads);
  m.kv_channels = f.get_int("kv-channels") > 0 ? f.get_int("kv-channels") : m.hidden_size / m.num_attention_heads;
  m.normalization = norm_kind_from_name(f.get_string("normalization"));
  m.norm_epsilon = static_cast<float>(f.get_double("norm-epsilon"));
  m.activation = f.get_bool("swiglu") ? Activation::SwiGLU : Activation::Gelu;
  if (f.get_int("ffn-hidden-size") > 0) {
    m.ffn_hidden_size = f.get_int("ffn-hidden-size");
  } else {
    m.ffn_hidden_size = 4 * m.hidden_size;  // Megatron's default, also with --swiglu
  }
  const std::string pos = f.get_string("position-embedding-type");
  if (pos == "learned_absolute") m.position_embedding = PositionEmbedding::LearnedAbsolute;
  else if (pos == "rope") m.position_embedding = PositionEmbedding::Rope;
  else if (pos == "none") m.position_embedding = PositionEmbedding::None;
  else fail("--position-embedding-type: unknown value '", pos, "' (expected learned_absolute, rope or none)");
  m.rotary_base = f.get_double("rotary-base");
  m.qk_layernorm = f.get_bool("qk-layernorm");
  m.add_bias_linear = !f.get_bool("disable-bias-linear");
  m.add_qkv_bias = f.get_bool("add-qkv-bias");
  m.untie_embeddings_and_output_weights = f.get_bool("untie-embeddings-and-output-weights");
  m.init_method_std = static_cast<float>(f.get_double("init-method-std"));
  a.seq_length = f.get_int("seq-length");
  m.max_position_embeddings = f.get_int("max-position-embeddings") > 0 ? f.get_int("max-position-embeddings") : a.seq_length;
  MEGADLM_CHECK(m.max_position_embeddings >= a.seq_length, "--max-position-embeddings ", m.max_position_embeddings,
                " is smaller than --seq-length ", a.seq_length);
  a.make_vocab_size_divisible_by = f.get_int("make-vocab-size-divisible-by");
  a.attention_mask_type = f.get_string("attention-mask-type");
  const MaskType mask = a.attention_mask_type.empty()
                                 ? (a.model_type == ModelType::GPT ? MaskType::Causal : MaskType::None)
                                 : attention_mask_type_from_name(a.attention_mask_type);
  MEGADLM_CHECK(a.model_type != ModelType::GPT || mask == MaskType::Causal,
                "--model-type gpt needs causal attention, got --attention-mask-type ", a.attention_mask_type);
  m.attention_mask = mask;
  m.attention_block_size = f.get_int("block-length");
  a.load_hf = f.get_string("load-hf");
  read_moe_flags(f, m);
  a.num_experts = m.moe.num_experts;
  read_t5_flags(f, a.model_type == ModelType::T5, m, &a.seq_length, a.t5);

  a.mask_token = f.get_string("mask-token");
  a.diffusion.eps = static_cast<float>(f.get_double("dlm-eps"));
  MEGADLM_CHECK(a.diffusion.eps >= 0 && a.diffusion.eps < 1, "--dlm-eps must be in [0, 1), got ", a.diffusion.eps);
  a.diffusion.loss = diffusion_loss_from_name(f.get_string("dlm-loss"));
  a.diffusion.varilen_prob = static_cast<float>(f.get_double("difflm-varilen-prob"));
  MEGADLM_CHECK(a.diffusion.varilen_prob >= 0 && a.diffusion.varilen_prob <= 1, "--difflm-varilen-prob must be in [0, 1]");
  a.diffusion.shift = a.model_running_mode == "vanilla";

  a.data_path = f.get_list("data-path");
  a.split = f.get_string("split");
  a.train_data_path = f.get_list("train-data-path");
  a.valid_data_path = f.get_list("valid-data-path");
  a.test_data_path = f.get_list("test-data-path");
  MEGADLM_CHECK(!a.data_path.empty() || !a.train_data_path.empty(), "no training data: give --data-path (or --train-data-path)");
  a.data_cache_path = f.get_string("data-cache-path");
  a.tokenizer_type = f.get_string("tokenizer-type");
  a.vocab_file = f.get_string("vocab-file");
  a.merge_file = f.get_string("merge-file");
  a.tokenizer_model = f.get_string("tokenizer-model");
  a.null_vocab_size = f.get_int("vocab-size");
  if (!a.load_hf.empty()) apply_hf_config(a, f);  // model (and tokenizer) from its config.json
  a.reset_position_ids = f.get_bool("reset-position-ids");
  a.reset_attention_mask = f.get_bool("reset-attention-mask");
  a.eod_mask_loss = f.get_bool("eod-mask-loss");
  read_sft_flags(f, a);
  read_block_diffusion_flags(f, a);
  MEGADLM_CHECK(!a.llava.enabled || (a.sft && !a.sft_packing), "--model-type llava trains on --sft data from ",
                "preprocess_data --image-key --chat-template, one conversation per sample (give --sft, without --sft-packing)");
  MEGADLM_CHECK(!a.llava.enabled || a.load_hf.empty(), "--load-hf does not apply to --model-type llava (no ",
                "LLaVA HuggingFace import yet)");
  MEGADLM_CHECK(!(a.sft && f.get_bool("block-diffusion")), "--sft with --block-diffusion is not supported: the block diffusion ",
                "objective takes no loss mask");

  a.micro_batch_size = f.get_int("micro-batch-size");
  a.global_batch_size = f.get_int("global-batch-size") > 0 ? f.get_int("global-batch-size") : a.micro_batch_size;
  MEGADLM_CHECK(a.global_batch_size % a.micro_batch_size == 0, "--global-batch-size ", a.global_batch_size,
                " is not a multiple of --micro-batch-size ", a.micro_batch_size);
  a.train_iters = f.get_int("train-iters");
  a.lr.lr = f.get_double("lr");
  a.lr.min_lr = f.get_double("min-lr");
  a.lr.style = lr_decay_style_from_name(f.get_string("lr-decay-style"));
  a.lr.decay_iters = f.get_int("lr-decay-iters") > 0 ? f.get_int("lr-decay-iters") : a.train_iters;
  a.lr.warmup_iters = f.get_int("lr-warmup-iters");
  a.lr_warmup_fraction = f.get_double("lr-warmup-fraction");
  if (a.lr_warmup_fraction >= 0) {
    MEGADLM_CHECK(!f.given("lr-warmup-iters"), "give --lr-warmup-iters or --lr-warmup-fraction, not both");
    a.lr.warmup_iters = static_cast<int64_t>(a.lr_warmup_fraction * static_cast<double>(a.lr.decay_iters));
  }
  a.lr.wsd_decay_iters = f.get_int("lr-wsd-decay-iters");
  a.lr.wsd_style = wsd_decay_style_from_name(f.get_string("lr-wsd-decay-style"));
  if (a.lr.style == LrDecayStyle::WSD)
    MEGADLM_CHECK(a.lr.wsd_decay_iters > 0 && a.lr.wsd_decay_iters <= a.lr.decay_iters,
                  "--lr-decay-style WSD needs 0 < --lr-wsd-decay-iters <= --lr-decay-iters");
  a.adam.weight_decay = static_cast<float>(f.get_double("weight-decay"));
  a.adam.beta1 = static_cast<float>(f.get_double("adam-beta1"));
  a.adam.beta2 = static_cast<float>(f.get_double("adam-beta2"));
  a.adam.eps = static_cast<float>(f.get_double("adam-eps"));
  a.adam.clip_grad = static_cast<float>(f.get_double("clip-grad"));
  a.seed = static_cast<uint64_t>(f.get_int("seed"));
  a.device = device_from_name(f.get_string("device"), "--device");
  a.diffusion.seed = a.seed;
  a.diffusion.global_batch_size = a.global_batch_size;
  a.diffusion.reset_position_ids = a.reset_position_ids;
  a.diffusion.reset_attention_mask = a.reset_attention_mask;

  a.eval_interval = f.get_int("eval-interval");
  a.eval_iters = f.get_int("eval-iters");
  a.log_interval = std::max<int64_t>(1, f.get_int("log-interval"));
  a.tensorboard = read_tensorboard_flags(f);
  a.save = f.get_string("save");
  a.save_interval = f.get_int("save-interval");
  a.load = f.get_string("load");
  a.finetune = f.get_bool("finetune");
  a.no_load_optim = f.get_bool("no-load-optim");
  a.no_load_rng = f.get_bool("no-load-rng");
  a.exit_interval = f.get_int("exit-interval");
  a.exit_duration_in_mins = f.get_double("exit-duration-in-mins");
  a.exit_signal_handler = f.get_bool("exit-signal-handler");
  a.exit_signal = parse_signal_name(f.get_string("exit-signal"));
  // Before the sizes are checked against the world, so that these errors name their flags on any launch.
  const int64_t cp = f.get_int("context-parallel-size");
  if (cp > 1) check_context_parallel_flags(a, static_cast<int>(cp));
  read_parallel_flags(f, a.parallel);
  read_precision_flags(f, a.precision, a.device);
  a.max_skipped_steps = f.get_int("max-skipped-steps");
  MEGADLM_CHECK(a.max_skipped_steps >= 0, "--max-skipped-steps ", a.max_skipped_steps, " must be 0 (no limit) or positive");
  return true;
}

}  // namespace megadlm
