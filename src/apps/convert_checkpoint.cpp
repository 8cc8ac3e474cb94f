// convert_checkpoint: native checkpoints <-> HuggingFace directories.
//
//   convert_checkpoint --from-hf HF_DIR --to-native SAVE_DIR [--model-type gpt|difflm|bert|t5|clip_vision|llava]
//                      [--mask-token ID]
//   convert_checkpoint --from-native CKPT --to-hf HF_DIR
//                      [--layout llama|qwen2|qwen3|gpt2|llada|mixtral|qwen3_moe|bert|t5|clip_vision|llava]
//                      [--dtype float32|bfloat16|float16] [--max-shard-size 5GB]
//
// HF -> native writes SAVE_DIR/iter_0000000 (loadable by generate and pretrain_difflm --load) and
// copies the tokenizer files into SAVE_DIR/tokenizer/, recording a tokenizer spec pointing at them.
// native -> HF writes config.json, weights in the source's dtype (recorded at import) or --dtype,
// and the tokenizer files. A diffusion model is written in LLaMA / Qwen3 layout with its mask token
// and bidirectional attention recorded in config.json, or in LLaDA's layout with --layout llada.
// BERT (BertForPreTraining, BertForMaskedLM: checkpoint/hf_bert.h) is recognised by its config.json and
// converts to a native checkpoint of --model-type bert and back with --layout bert (the default for it);
// T5 (T5ForConditionalGeneration, v1.0 and v1.1: checkpoint/hf_t5.h) likewise with t5, and CLIP's vision
// tower (CLIPVisionModel, or a CLIPModel's vision half: checkpoint/hf_clip.h) with clip_vision, and LLaVA
// (LlavaForConditionalGeneration with a LLaMA text model: checkpoint/hf_llava.h) with llava, to a native
// model_type llava checkpoint with the gpt backbone.
#include <cstdio>
#include <exception>
#include <filesystem>

#include "checkpoint/family_info.h"
#include "checkpoint/hf_bert.h"
#include "checkpoint/hf_clip.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_llava.h"
#include "checkpoint/hf_t5.h"
#include "checkpoint/hf_convert.h"
#include "checkpoint/hf_tokenizer.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/cli_flags.h"
#include "tokenizers/tokenizer.h"
#include "data/clip_image_processor.h"
#include "models/config_json.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/llava_model.h"
#include "models/t5_options_json.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

DType dtype_from_flag(const std::string& s) {
  if (s == "float32" || s == "fp32" || s == "F32") return DType::F32;
  if (s == "bfloat16" || s == "bf16" || s == "BF16") return DType::BF16;
  if (s == "float16" || s == "fp16" || s == "F16") return DType::F16;
  fail("--dtype: unknown value '", s, "' (float32, bfloat16, float16)");
}

// config.json of an HF directory, or null when it has none or it does not parse (the readers say why).
nlohmann::json hf_config_or_null(const std::string& dir) {
  try {
    return nlohmann::json::parse(read_file(dir + "/config.json"));
  } catch (const std::exception&) {
    return nullptr;
  }
}

// The tokenizer of an HF directory, built before anything is written: a corrupt or unsupported one is
// an Error naming its file, and the output directory is left without a checkpoint. Its vocabulary size,
// 0 without tokenizer files.
int64_t hf_tokenizer_vocab(const std::string& src) {
  const TokenizerSpec src_tok = hf_tokenizer_spec(src);
  return src_tok.type.empty() ? 0 : make_tokenizer(src_tok)->vocab_size();
}

void record_tokenizer(CheckpointState& st, const TokenizerSpec& tok, int64_t tokenizer_vocab) {
  if (tok.type.empty()) return;
  st.meta["tokenizer"] = tok.to_json();
  st.meta["tokenizer_vocab_size"] = tokenizer_vocab;
}

std::vector<std::string> export_tokenizer(const nlohmann::json& meta, const std::string& dst) {
  if (!meta.contains("tokenizer")) return {};
  const TokenizerSpec spec = TokenizerSpec::from_json(meta["tokenizer"]);
  if (!spec.added_special_tokens.empty() && spec.type != "HuggingFaceTokenizer")
    log_info("note: the tokenizer has added special tokens (", spec.added_special_tokens.size(),
             ", e.g. a new mask token) that the copied ", spec.type, " files cannot list; the mask id is in config.json");
  return export_hf_tokenizer(spec, dst);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& t : v) s += " " + t;
  return s;
}

// Refuses the flags a family converted by its config.json does not take.
// family: "BERT" / "T5", its --model-type `type`.
void check_family_import_flags(const CliFlags& f, const std::string& src, const char* family, const char* type) {
  MEGADLM_CHECK(!f.given("model-type") || f.get_string("model-type") == type, src, " holds a ", family,
                " model: it converts to --model-type ", type, ", not ", f.get_string("model-type"));
  MEGADLM_CHECK(!f.given("mask-token"), "--mask-token is for difflm models; ", src, " holds a ", family, " model");
}

// The native checkpoint of a family converted from src (bert, t5, clip_vision, llava): its config, its
// options under meta[type], the tokenizer, the source's dtype, and `extra` merged into the state's meta.
// Returns the tokenizer line of the report.
std::string save_family_native(const std::string& src, const std::string& dst, ParamStore& params, const char* name,
                               const TransformerConfig& cfg, const nlohmann::json& options, DType dtype,
                               int64_t tokenizer_vocab, const nlohmann::json& extra = nlohmann::json::object()) {
  const TokenizerSpec tok = import_hf_tokenizer(src, dst + "/tokenizer");
  CheckpointState st;
  st.meta["model_type"] = name;
  st.meta["config"] = config_to_json(cfg);
  st.meta[name] = options;
  record_tokenizer(st, tok, tokenizer_vocab);
  st.meta["hf"] = {{"layout", name}, {"dtype", safetensors_dtype_name(dtype)}, {"source", fs::absolute(src).string()}};
  st.meta.merge_patch(extra);
  const std::string dir = save_checkpoint(dst, params, nullptr, st);
  std::printf("wrote %s (%s model, ", dir.c_str(), name);
  return tok.type.empty() ? "; no tokenizer files found" : "; tokenizer " + tok.type;
}

// An HF directory's preprocessor_config.json as a native checkpoint records it (meta "image_processor",
// what generate and evaluate then use), or null without one. A malformed one is an Error naming it,
// raised before anything is written.
nlohmann::json import_image_processor(const std::string& src) {
  const std::string path = src + "/preprocessor_config.json";
  if (!fs::exists(path)) return nullptr;
  return clip_image_config_json(read_clip_image_config(path));
}

// dst/preprocessor_config.json for a vision model of images S x S: the checkpoint's recorded settings (its
// training data's, or the HF model's it was imported from), else CLIP's processor at S. Returns the
// report's words.
std::string export_image_processor(const nlohmann::json& meta, const std::string& dir, int64_t S,
                                   const std::string& dst) {
  const bool recorded = meta.contains("image_processor") && !meta["image_processor"].is_null();
  const ClipImageConfig cfg =
      recorded ? clip_image_config_recorded(meta["image_processor"], dir + "/state.json: \"image_processor\"")
               : clip_image_config_for_size(S);
  write_file_atomic(dst + "/preprocessor_config.json", clip_preprocessor_config(cfg).dump(2) + "\n");
  return recorded ? "; preprocessor_config.json (the checkpoint's image processor)"
                  : "; preprocessor_config.json (CLIP's processor at the model's image size)";
}

// --dtype (default: the dtype the weights were imported from) and --max-shard-size of an export.
HfWriteOptions hf_write_options(const CliFlags& f, const nlohmann::json& hf, const std::string& dir) {
  HfWriteOptions opt;
  opt.dtype = f.given("dtype") ? dtype_from_flag(f.get_string("dtype"))
              : hf.contains("dtype")  ? safetensors_dtype_from_name(hf["dtype"].get<std::string>(), dir)
                                      : DType::F32;
  opt.max_shard_bytes = f.given("max-shard-size") ? parse_shard_size(f.get_string("max-shard-size")) : 0;
  return opt;
}

void refuse_other_layout(const CliFlags& f, const std::string& dir, const char* type) {
  MEGADLM_CHECK(!f.given("layout") || f.get_string("layout") == type, "--layout ", f.get_string("layout"), ": ", dir,
                " holds a ", type, " model, which exports to --layout ", type, " only");
}

void bert_hf_to_native(const CliFlags& f, const std::string& src, const std::string& dst) {
  check_family_import_flags(f, src, "BERT", "bert");
  const int64_t tokenizer_vocab = hf_tokenizer_vocab(src);
  const HfBertCheckpoint ck = read_hf_bert_checkpoint(src);
  BertModel model(ck.info.config, bert_model_spec(ck.info.config, ck.info.options), ParallelContext::single());
  load_params_into(ck.params, model.params(), src);
  const nlohmann::json options = {
      {"pre_norm", ck.info.options.pre_norm},       {"binary_head", ck.info.options.binary_head},
      {"token_types", ck.info.options.token_types}, {"exact_gelu", ck.info.options.exact_gelu},
      {"pad_token_id", ck.info.pad_token_id}};
  const std::string tok = save_family_native(src, dst, model.params(), model_type_name(ModelType::BERT), ck.info.config,
                                             options, ck.dtype, tokenizer_vocab);
  std::printf("%s, %s weights, %lld parameters)%s\n",
              ck.info.options.binary_head ? "BertForPreTraining" : "BertForMaskedLM", safetensors_dtype_name(ck.dtype),
              static_cast<long long>(model.params().numel()), tok.c_str());
}

void bert_native_to_hf(const CliFlags& f, const std::string& dir, const CheckpointState& state,
                       const std::string& dst) {
  refuse_other_layout(f, dir, "bert");
  const nlohmann::json& meta = state.meta;
  const HfBertInfo info = bert_info_of(meta, dir + "/state.json");
  BertModel model(info.config, bert_model_spec(info.config, info.options), ParallelContext::single());
  load_checkpoint_tensors(dir, model.params(), nullptr);
  const HfWriteOptions opt = hf_write_options(f, meta.value("hf", nlohmann::json::object()), dir);
  write_hf_bert_checkpoint(dst, model_params(model.params()), info, opt);
  const std::vector<std::string> tok_files = export_tokenizer(meta, dst);
  std::printf("wrote %s (%s, %s)%s%s\n", dst.c_str(),
              info.options.binary_head ? "BertForPreTraining" : "BertForMaskedLM", dtype_name(opt.dtype), tok_files.empty() ? "; no tokenizer files" : "; tokenizer files:",
              joined(tok_files).c_str());
}

void t5_hf_to_native(const CliFlags& f, const std::string& src, const std::string& dst) {
  check_family_import_flags(f, src, "T5", "t5");
  const int64_t tokenizer_vocab = hf_tokenizer_vocab(src);
  const HfT5Checkpoint ck = read_hf_t5_checkpoint(src);
  T5Model model(ck.info.config, ck.info.options, ParallelContext::single());
  load_params_into(ck.params, model.params(), src);
  const T5Options& o = ck.info.options;
  nlohmann::json options = t5_options_to_json(o);
  options["pad_token_id"] = ck.info.pad_token_id;
  options["eos_token_id"] = ck.info.eos_token_id;
  options["decoder_start_token_id"] = ck.info.decoder_start_token_id;
  const std::string tok = save_family_native(src, dst, model.params(), model_type_name(ModelType::T5), ck.info.config,
                                             options, ck.dtype, tokenizer_vocab);
  std::printf("T5ForConditionalGeneration, %s, %s output, %s weights, %lld parameters)%s\n",
              t5_feed_forward_name(o.feed_forward), model.tied() ? "tied" : "untied", safetensors_dtype_name(ck.dtype),
              static_cast<long long>(model.params().numel()), tok.c_str());
}

void t5_native_to_hf(const CliFlags& f, const std::string& dir, const CheckpointState& state, const std::string& dst) {
  refuse_other_layout(f, dir, "t5");
  const nlohmann::json& meta = state.meta;
  const HfT5Info info = t5_info_of(meta, dir + "/state.json");
  T5Model model(info.config, info.options, ParallelContext::single());
  load_checkpoint_tensors(dir, model.params(), nullptr);
  const HfWriteOptions opt = hf_write_options(f, meta.value("hf", nlohmann::json::object()), dir);
  write_hf_t5_checkpoint(dst, model_params(model.params()), info, opt);  // with the special ids
  const std::vector<std::string> tok_files = export_tokenizer(meta, dst);
  std::printf("wrote %s (T5ForConditionalGeneration, %s)%s%s\n", dst.c_str(), dtype_name(opt.dtype),
              tok_files.empty() ? "; no tokenizer files" : "; tokenizer files:", joined(tok_files).c_str());
}

void clip_hf_to_native(const CliFlags& f, const std::string& src, const std::string& dst) {
  check_family_import_flags(f, src, "CLIP vision", "clip_vision");
  const nlohmann::json processor = import_image_processor(src);
  const HfClipVisionCheckpoint ck = read_hf_clip_vision_checkpoint(src);
  ClipVisionModel model(ck.info.config, ck.info.options, ParallelContext::single());
  load_params_into(ck.params, model.params(), src);
  const ClipVisionOptions& o = ck.info.options;
  const nlohmann::json options = {{"image_size", o.image_size},
                                  {"patch_size", o.patch_size},
                                  {"hidden_act", clip_activation_name(o.activation)},
                                  {"vision_feature_layer", o.feature_layer},
                                  {"hf_prefix", ck.info.prefix}};
  const std::string tok = save_family_native(src, dst, model.params(), "clip_vision", ck.info.config, options,
                                             ck.dtype, 0, {{"image_processor", processor}});
  std::printf("CLIPVisionModel, %s weights, %lld parameters)%s%s\n", safetensors_dtype_name(ck.dtype),
              static_cast<long long>(model.params().numel()), tok.c_str(),
              processor.is_null() ? "; no preprocessor_config.json" : "; preprocessor_config.json");
}

// A native CLIP vision checkpoint's tower, rebuilt from state.json's config and "clip_vision" options.
HfClipVisionInfo clip_info_of(const nlohmann::json& meta, const std::string& where) {
  const nlohmann::json& c = family_options(meta, "clip_vision", where);
  HfClipVisionInfo info;
  info.config = config_from_json(meta["config"], where);
  try {
    ClipVisionOptions& o = info.options;
    o.image_size = c.at("image_size").get<int64_t>();
    o.patch_size = c.at("patch_size").get<int64_t>();
    o.activation = clip_activation_from_name(c.at("hidden_act").get<std::string>(), where);
    o.feature_layer = c.value("vision_feature_layer", int64_t{-2});
    info.prefix = c.value("hf_prefix", std::string("vision_model."));
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": the \"clip_vision\" options are malformed (", e.what(), ")");
  }
  return info;
}

void clip_native_to_hf(const CliFlags& f, const std::string& dir, const CheckpointState& state,
                       const std::string& dst) {
  refuse_other_layout(f, dir, "clip_vision");
  const HfClipVisionInfo info = clip_info_of(state.meta, dir + "/state.json");
  ClipVisionModel model(info.config, info.options, ParallelContext::single());
  load_checkpoint_tensors(dir, model.params(), nullptr);
  const HfWriteOptions opt = hf_write_options(f, state.meta.value("hf", nlohmann::json::object()), dir);
  write_hf_clip_vision_checkpoint(dst, model_params(model.params()), info, opt);
  const std::string processor = export_image_processor(state.meta, dir, info.options.image_size, dst);
  std::printf("wrote %s (CLIPVisionModel, %s)%s\n", dst.c_str(), dtype_name(opt.dtype), processor.c_str());
}

void llava_hf_to_native(const CliFlags& f, const std::string& src, const std::string& dst) {
  check_family_import_flags(f, src, "LLaVA", "llava");
  const nlohmann::json processor = import_image_processor(src);
  const int64_t tokenizer_vocab = hf_tokenizer_vocab(src);
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(src);
  const TransformerConfig& cfg = ck.info.text.config;
  const auto model = make_llava_model(cfg, gpt_model_spec(cfg), ck.info.options, ParallelContext::single());
  load_params_into(ck.params, model->params(), src);
  // What generate and pretrain_difflm --load read of a trained LLaVA checkpoint (Trainer::checkpoint_meta).
  const nlohmann::json extra = {{"language_model_type", model_type_name(ModelType::GPT)},
                                {"model_running_mode", "difflm-noshift"},
                                {"mask_token", -1},
                                {"eod", ck.info.text.eos_token_id},
                                {"hf", {{"bos_token_id", ck.info.text.bos_token_id},
                                        {"eos_token_id", ck.info.text.eos_token_id}}},
                                {"image_processor", processor}};
  const std::string tok = save_family_native(src, dst, model->params(), "llava", cfg, llava_to_json(ck.info.options),
                                             ck.dtype, tokenizer_vocab, extra);
  std::printf("LlavaForConditionalGeneration, gpt backbone, %s weights, %lld parameters)%s%s\n",
              safetensors_dtype_name(ck.dtype), static_cast<long long>(model->params().numel()), tok.c_str(),
              processor.is_null() ? "; no preprocessor_config.json" : "; preprocessor_config.json");
}

void llava_native_to_hf(const CliFlags& f, const std::string& dir, const CheckpointState& state,
                        const std::string& dst) {
  refuse_other_layout(f, dir, "llava");
  const nlohmann::json hf = state.meta.value("hf", nlohmann::json::object());
  LoadedModel lm = load_model(dir);
  HfLlavaInfo info;
  info.text.config = lm.model->config();
  info.text.layout = default_hf_layout(info.text.config);  // llama, or qwen2 with q/k/v biases
  info.text.diffusion = lm.diffusion;
  info.text.mask_token_id = lm.mask_token;
  info.text.eos_token_id = hf.contains("eos_token_id") ? hf["eos_token_id"].get<int32_t>() : lm.eod;
  info.text.bos_token_id = hf.value("bos_token_id", -1);
  info.options = llava_vision(*lm.model).options();
  const HfWriteOptions opt = hf_write_options(f, hf, dir);
  write_hf_llava_checkpoint(dst, model_params(lm.model->params()), info, opt);
  const std::vector<std::string> tok_files = export_tokenizer(state.meta, dst);
  const std::string processor = export_image_processor(state.meta, dir, info.options.clip.image_size, dst);
  std::printf("wrote %s (LlavaForConditionalGeneration, %s)%s%s%s\n", dst.c_str(), dtype_name(opt.dtype),
              tok_files.empty() ? "; no tokenizer files" : "; tokenizer files:", joined(tok_files).c_str(),
              processor.c_str());
}

void hf_to_native(const CliFlags& f) {
  const std::string src = f.get_string("from-hf"), dst = f.get_string("to-native");
  const nlohmann::json cfg_json = hf_config_or_null(src);
  if (is_hf_bert_config(cfg_json)) return bert_hf_to_native(f, src, dst);
  if (is_hf_t5_config(cfg_json)) return t5_hf_to_native(f, src, dst);
  if (is_hf_clip_vision_config(cfg_json)) return clip_hf_to_native(f, src, dst);
  if (is_hf_llava_config(cfg_json)) return llava_hf_to_native(f, src, dst);
  for (const char* flag : {"model-type", "layout"}) {
    MEGADLM_CHECK(!f.given(flag) || f.get_string(flag) != "llava", "--", flag, " llava: ", src,
                  "/config.json is not a LLaVA model (LlavaForConditionalGeneration)");
    MEGADLM_CHECK(!f.given(flag) || f.get_string(flag) != "clip_vision", "--", flag, " clip_vision: ", src,
                  "/config.json is not a CLIP vision model (CLIPVisionModel or CLIPModel)");
    MEGADLM_CHECK(!f.given(flag) || f.get_string(flag) != "bert", "--", flag, " bert: ", src,
                  "/config.json is not a BERT model (BertForPreTraining or BertForMaskedLM)");
    MEGADLM_CHECK(!f.given(flag) || f.get_string(flag) != "t5", "--", flag, " t5: ", src,
                  "/config.json is not a T5 model (T5ForConditionalGeneration)");
  }
  const int64_t tokenizer_vocab = hf_tokenizer_vocab(src);
  HfCheckpoint ck = read_hf_checkpoint(src);
  const ModelType type = f.given("model-type") ? model_type_from_name(f.get_string("model-type"))
                                               : (ck.info.diffusion ? ModelType::DiffLM : ModelType::GPT);
  TransformerConfig cfg = ck.info.config;
  if (type == ModelType::GPT) cfg.attention_mask = MaskType::Causal;
  else if (!ck.info.diffusion) cfg.attention_mask = MaskType::None;  // an AR model adapted: bidirectional
  LanguageModel model(cfg, model_spec(type, cfg), ParallelContext::single());
  load_params_into(ck.params, model.params(), src);
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
  record_tokenizer(st, tok, tokenizer_vocab);
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
  const std::string dir = resolve_checkpoint_dir(src);
  if (!dir.empty()) {
    const CheckpointState state = read_checkpoint_state(dir);
    const std::string type = state.meta.value("model_type", "");
    if (type == "bert") return bert_native_to_hf(f, dir, state, dst);
    if (type == "t5") return t5_native_to_hf(f, dir, state, dst);
    if (type == "clip_vision") return clip_native_to_hf(f, dir, state, dst);
    if (type == "llava") return llava_native_to_hf(f, dir, state, dst);
    for (const char* family : {"bert", "t5", "clip_vision", "llava"})
      MEGADLM_CHECK(!f.given("layout") || f.get_string("layout") != family, "--layout ", family, " is for ", family,
                    " models; ", dir, " holds a ", type.empty() ? "?" : type, " model");
  }
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
  const HfWriteOptions opt = hf_write_options(f, hf, lm.dir);
  write_hf_checkpoint(dst, model_params(lm.model->params()), info, opt);
  const std::vector<std::string> tok_files = export_tokenizer(meta, dst);
  std::printf("wrote %s (%s, %s, %s%s)%s%s\n", dst.c_str(), hf_architecture_name(info.layout), dtype_name(opt.dtype),
              lm.diffusion ? "diffusion, mask token " : "autoregressive",
              lm.diffusion ? std::to_string(lm.mask_token).c_str() : "",
              tok_files.empty() ? "; no tokenizer files" : "; tokenizer files:", joined(tok_files).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("convert_checkpoint", "Convert between native checkpoints and HuggingFace directories.");
    f.add_string("from-hf", "", "HuggingFace directory to import (config.json, safetensors, tokenizer files)");
    f.add_string("to-native", "", "save directory for the native checkpoint");
    f.add_string("model-type", "",
                 "gpt, difflm, bert, t5, clip_vision or llava (default: bert, t5, clip_vision or llava for a BERT, "
                 "T5, CLIP or LLaVA config.json, difflm when config.json records a diffusion model)");
    f.add_int("mask-token", -1, "difflm: the mask token id (default: config.json's mask_token_id)", at_least(0));
    f.add_string("from-native", "", "native checkpoint (a directory or a --save directory)");
    f.add_string("to-hf", "", "HuggingFace directory to write");
    f.add_string("layout", "",
                 "gpt2, llama, qwen2, qwen3, llada, mixtral, qwen3_moe, bert, t5, clip_vision or llava (default: the "
                 "source layout, else from the config)");
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
