// convert_checkpoint: native checkpoints <-> HuggingFace directories.
//
//   convert_checkpoint --from-hf HF_DIR --to-native SAVE_DIR [--model-type gpt|difflm] [--mask-token ID]
//   convert_checkpoint --from-native CKPT --to-hf HF_DIR [--layout llama|qwen2|qwen3|gpt2|llada|mixtral|qwen3_moe]
//                      [--dtype float32|bfloat16|float16] [--max-shard-size 5GB]
//
// HF -> native writes SAVE_DIR/iter_0000000 (loadable by generate and pretrain_difflm --load) and
// copies the tokenizer files into SAVE_DIR/tokenizer/, recording a tokenizer spec pointing at them.
// native -> HF writes config.json, weights in the source's dtype (recorded at import) or --dtype,
// and the tokenizer files. A diffusion model is written in LLaMA / Qwen3 layout with its mask token
// and bidirectional attention recorded in config.json, or in LLaDA's layout with --layout llada.
#include <cstdio>
#include <exception>
#include <filesystem>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_convert.h"
#include "checkpoint/hf_tokenizer.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/log.h"
#include "core/cli_flags.h"
#include "tokenizers/tokenizer.h"
#include "models/config_json.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

DType dtype_from_flag(const std::string& s) {
  if (s == "float32" || s == "fp32" || s == "F32") return DType::F32;
  if (s == "bfloat16" || s == "bf16" || s == "BF16") return DType::BF16;
  if (s == "float16" || s == "fp16" || s == "F16") return DType::F16;
  fail("--dtype: unknown value '", s, "' (float32, bfloat16, float16)");
}

void hf_to_native(const CliFlags& f) {
  const std::string src = f.get_string("from-hf"), dst = f.get_string("to-native");
  // The tokenizer is built before anything is written: a corrupt or unsupported one is an Error naming
  // its file, and the output directory is left without a checkpoint.
  const TokenizerSpec src_tok = hf_tokenizer_spec(src);
  const int64_t tokenizer_vocab = src_tok.type.empty() ? 0 : make_tokenizer(src_tok)->vocab_size();
  HfCheckpoint ck = read_hf_checkpoint(src);
  const ModelType type = f.given("model-type") ? model_type_from_name(f.get_string("model-type"))
                                               : (ck.info.diffusion ? ModelType::DiffLM : ModelType::GPT);
  TransformerConfig cfg = ck.info.config;
  if (type == ModelType::GPT) cfg.attention_mask = MaskType::Causal;
  else if (!ck.info.diffusion) cfg.attention_mask = MaskType::None;  // an AR model adapted: bidirectional
  LanguageModel model(cfg, model_spec(type, cfg), ParallelContext::single());
  load_params_into(ck.params, model, src);
  const TokenizerSpec tok = import_hf_tokenizer(src, dst + "/tokenizer");
  int32_t mask = f.given("mask-token") ? static_cast<int32_t>(f.get_int("mask-token")) : ck.info.mask_token_id;
  if (type == ModelType::DiffLM) {
    MEGADLM_CHECK(mask >= 0, src, ": a diffusion model needs a mask token: give --mask-token ID (config.json has no mask_token_id)");
    MEGADLM_CHECK(mask < cfg.vocab_size, "--mask-token ", mask, " is outside the vocabulary of ", cfg.vocab_size);
  }
  CheckpointState st;
  st.meta["model_type"] = model_type_name(type);
  st.meta["model_running_mode"] = "difflm-noshift";
  st.meta["config"] = config_to_json(cfg);
  if (!tok.type.empty()) {
    st.meta["tokenizer"] = tok.to_json();
    st.meta["tokenizer_vocab_size"] = tokenizer_vocab;
  }
  st.meta["mask_token"] = type == ModelType::DiffLM ? mask : -1;
  st.meta["eod"] = ck.info.eos_token_id;
  st.meta["hf"] = {{"layout", hf_layout_name(ck.info.layout)},
                   {"dtype", safetensors_dtype_name(ck.dtype)},
                   {"bos_token_id", ck.info.bos_token_id},
                   {"eos_token_id", ck.info.eos_token_id},
                   {"source", fs::absolute(src).string()}};
  const std::string dir = save_checkpoint(dst, model, nullptr, st);
  std::printf("wrote %s (%s model, %s, %s weights, %lld parameters)%s\n", dir.c_str(), model_type_name(type),
              hf_architecture_name(ck.info.layout), safetensors_dtype_name(ck.dtype),
              static_cast<long long>(model.params().numel()),
              tok.type.empty() ? "; no tokenizer files found" : ("; tokenizer " + tok.type).c_str());
}

void native_to_hf(const CliFlags& f) {
  const std::string src = f.get_string("from-native"), dst = f.get_string("to-hf");
  LoadedModel lm = load_model(src);
  const nlohmann::json& meta = lm.state.meta;
  const nlohmann::json hf = meta.value("hf", nlohmann::json::object());
  HfModelInfo info;
  info.config = lm.model->config();
  info.layout = f.given("layout") ? hf_layout_from_name(f.get_string("layout"))
                : hf.contains("layout")  ? hf_layout_from_name(hf["layout"].get<std::string>())
                                         : default_hf_layout(info.config);
  info.diffusion = lm.diffusion;
  info.mask_token_id = lm.mask_token;
  info.eos_token_id = hf.contains("eos_token_id") ? hf["eos_token_id"].get<int32_t>() : lm.eod;
  info.bos_token_id = hf.value("bos_token_id", -1);
  if (info.layout == HfLayout::LLaDA)
    MEGADLM_CHECK(lm.diffusion, "--layout llada is for diffusion models; ", lm.dir, " holds a ",
                  meta.value("model_type", "?"), " model");
  HfWriteOptions opt;
  opt.dtype = f.given("dtype") ? dtype_from_flag(f.get_string("dtype"))
              : hf.contains("dtype")  ? safetensors_dtype_from_name(hf["dtype"].get<std::string>(), lm.dir)
                                      : DType::F32;
  opt.max_shard_bytes = f.given("max-shard-size") ? parse_shard_size(f.get_string("max-shard-size")) : 0;
  write_hf_checkpoint(dst, model_params(*lm.model), info, opt);
  std::vector<std::string> tok_files;
  if (meta.contains("tokenizer")) {
    const TokenizerSpec spec = TokenizerSpec::from_json(meta["tokenizer"]);
    if (!spec.added_special_tokens.empty() && spec.type != "HuggingFaceTokenizer")
      log_info("note: the tokenizer has added special tokens (", spec.added_special_tokens.size(),
               ", e.g. a new mask token) that the copied ", spec.type, " files cannot list; the mask id is in config.json");
    tok_files = export_hf_tokenizer(spec, dst);
  }
  std::printf("wrote %s (%s, %s, %s%s)%s%s\n", dst.c_str(), hf_architecture_name(info.layout), dtype_name(opt.dtype),
              lm.diffusion ? "diffusion, mask token " : "autoregressive",
              lm.diffusion ? std::to_string(lm.mask_token).c_str() : "",
              tok_files.empty() ? "; no tokenizer files" : "; tokenizer files:",
              [&] {
                std::string s;
                for (const auto& t : tok_files) s += " " + t;
                return s;
              }().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("convert_checkpoint", "Convert between native checkpoints and HuggingFace directories.");
    f.add_string("from-hf", "", "HuggingFace directory to import (config.json, safetensors, tokenizer files)");
    f.add_string("to-native", "", "save directory for the native checkpoint");
    f.add_string("model-type", "", "gpt or difflm (default: difflm when config.json records a diffusion model)");
    f.add_int("mask-token", -1, "difflm: the mask token id (default: config.json's mask_token_id)", at_least(0));
    f.add_string("from-native", "", "native checkpoint (a directory or a --save directory)");
    f.add_string("to-hf", "", "HuggingFace directory to write");
    f.add_string("layout", "", "gpt2, llama, qwen2, qwen3, llada, mixtral or qwen3_moe (default: the source layout, else from the config)");
    f.add_string("dtype", "", "float32, bfloat16 or float16 (default: the dtype the weights were imported from)");
    f.add_string("max-shard-size", "", "split the weights into shards of at most this size (e.g. 5GB)");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    const bool from_hf = f.given("from-hf"), from_native = f.given("from-native");
    MEGADLM_CHECK(from_hf != from_native, "give exactly one of --from-hf and --from-native");
    if (from_hf) {
      MEGADLM_CHECK(f.given("to-native"), "--from-hf needs --to-native");
      hf_to_native(f);
    } else {
      MEGADLM_CHECK(f.given("to-hf"), "--from-native needs --to-hf");
      native_to_hf(f);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "convert_checkpoint: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_checkpoint: internal error: %s\n", e.what());
    return 2;
  }
}
