// generate: sample text from a checkpoint written by pretrain_difflm, batched.
// Diffusion models: LLaDA's reverse process (--gen-length, --steps, --block-length, --remasking,
// --temperature) with classifier-free guidance (--cfg-scale), Fast-dLLM's confidence-threshold
// parallel decoding (--threshold) and approximate prefix KV cache (--prefix-cache), or MDLM's
// ancestral sampler (--sampler mdlm). Block-diffusion models (attention mask block_causal) sample
// block by block with an exact KV cache of the committed blocks (--sampler bd3, --block-length,
// --steps per block, --max-new-tokens, --commit-rule; --no-kv-cache re-runs the committed blocks at
// every step; docs/block_diffusion.md). GPT models sample left to right with a KV cache
// (--max-new-tokens, --temperature, --top-k, --top-p; --no-kv-cache re-runs the prefix each token).
//
//   generate --load runs/dlm --prompt "The jury said" --gen-length 64 --steps 64 --block-length 16
//   generate --load runs/dlm --prompt-file prompts.jsonl --threshold 0.9 --prefix-cache --output out.jsonl
//   generate --load runs/bd3 --prompt "The jury said" --sampler bd3 --steps 8 --max-new-tokens 256
//   generate --load runs/gpt --prompt "Once" --max-new-tokens 128 --temperature 0.8 --top-p 0.95
// LLaVA checkpoints (--model-type llava, docs/llava.md) take images: --image FILE for the --prompt
// prompts, or an "image" key on each --prompt-file line; each "<image>" in a prompt stands for one
// image, expanded into the model's P positions of the image token. AR LLaVA prompts decode one at a time.
//   generate --load runs/llava --image pic.png --prompt $'<|im_start|>user\n<image>\nWhat is in the picture?...'
// T5 checkpoints (--model-type t5, docs/t5.md) take each prompt as the encoder's input and decode from the
// decoder start id (--max-new-tokens, --temperature, --top-k, --top-p, --seed; --no-kv-cache re-runs the
// whole model on the prefix each token); the output is the decoder's text, sentinels included.
//   generate --load runs/t5 --prompt "the jury said <extra_id_0> the election" --max-new-tokens 16
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/model_loader.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/cli_flags.h"
#include "models/llava_model.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/unicode.h"
#include "infer/block_sampling.h"
#include "infer/llava_prompts.h"
#include "infer/sampling.h"
#include "infer/t5_generation.h"

using namespace megadlm;

namespace {

// The prompts of a .jsonl file, and each line's "image" path ("" when it has none) in `images`.
std::vector<std::string> read_prompts(const std::string& path, std::vector<std::string>& images) {
  std::vector<std::string> prompts;
  std::ifstream in = open_input_file(path, "--prompt-file", false);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", n, ": invalid JSON (", e.what(), ")");
    }
    const char* key = j.contains("prompt") ? "prompt" : "text";
    MEGADLM_CHECK(j.contains(key) && j[key].is_string(), path, ":", n, ": no string \"prompt\" or \"text\" key");
    prompts.push_back(j[key].get<std::string>());
    MEGADLM_CHECK(!j.contains("image") || j["image"].is_string(), path, ":", n, ": \"image\" is not a path");
    images.push_back(j.value("image", std::string()));
  }
  return prompts;
}

// The sampler `name` (--sampler, or bd3 for a block-diffusion checkpoint when --sampler is not given):
// llada and mdlm (diffusion_sampler_from_name), or bd3; --commit-rule belongs to bd3.
void check_sampler_flags(const CliFlags& f, const std::string& name) {
  MEGADLM_CHECK(name == "llada" || name == "mdlm" || name == "bd3", "--sampler: unknown value '", name,
                "' (expected llada, mdlm or bd3)");
  MEGADLM_CHECK(name == "bd3" || !f.given("commit-rule"), "--commit-rule applies to --sampler bd3 only (--sampler ",
                name, " is its own rule)");
  const std::string rule = f.get_string("commit-rule");
  MEGADLM_CHECK(rule == "llada" || rule == "mdlm", "--commit-rule: unknown value '", rule,
                "' (expected mdlm or llada)");
}

// Flags of the other samplers that --sampler bd3 does not take: an Error naming the first one given.
void check_bd3_flags(const CliFlags& f) {
  const std::pair<const char*, const char*> others[] = {
      {"gen-length", "its length is --max-new-tokens"},
      {"cfg-scale", "no classifier-free guidance"},
      {"prefix-cache", "its KV cache is exact and on by default; --no-kv-cache turns it off"},
      {"top-k", "a gpt flag"},
      {"top-p", "a gpt flag"}};
  for (const auto& [flag, why] : others)
    MEGADLM_CHECK(!f.given(flag), "--", flag, " does not apply to --sampler bd3 (", why, ")");
}

// Block diffusion: the checkpoint must be a block_causal diffusion model whose block size is
// --block-length (default: the checkpoint's).
BlockSampleOptions bd3_options(const CliFlags& f, const LoadedModel& lm, int64_t vocab_limit) {
  MEGADLM_CHECK(lm.diffusion, "--sampler bd3 needs a diffusion checkpoint; ", lm.dir,
                " holds an autoregressive model");
  const TransformerConfig& cfg = lm.model->config();
  BlockSampleOptions o;
  o.block_length = f.given("block-length") ? f.get_int("block-length") : cfg.attention_block_size;
  check_block_diffusion_model(cfg, o.block_length, lm.dir);
  o.steps = f.given("steps") ? f.get_int("steps") : o.block_length;
  o.max_new_tokens = f.get_int("max-new-tokens");
  o.rule = diffusion_sampler_from_name(f.get_string("commit-rule"));
  o.remasking = remasking_from_name(f.get_string("remasking"));
  o.threshold = static_cast<float>(f.get_double("threshold"));
  o.temperature = static_cast<float>(f.get_double("temperature"));
  o.mask_token = lm.mask_token;
  o.eod = lm.eod;
  o.vocab_limit = vocab_limit;
  o.kv_cache = !f.get_bool("no-kv-cache");
  return o;
}

// The --prompt prompts then the --prompt-file ones, with each one's image path ("" for none) in `images`.
std::vector<std::string> all_prompts(const CliFlags& f, std::vector<std::string>& images) {
  std::vector<std::string> prompts = f.get_list("prompt");
  images.assign(prompts.size(), f.get_string("image"));
  if (!f.get_string("prompt-file").empty()) {
    const std::vector<std::string> more = read_prompts(f.get_string("prompt-file"), images);
    prompts.insert(prompts.end(), more.begin(), more.end());
  }
  return prompts;
}

// What was generated for each prompt: its ids, its batch's wall time, the diffusion model calls (-1: not
// a diffusion sampler).
struct Generations {
  std::vector<std::vector<int32_t>> ids;
  std::vector<double> batch_seconds;
  std::vector<int64_t> denoising_steps;
};

// The generations to stdout, or to --output as one JSON object a line. continuation: the text goes on
// from the prompt (GPT, diffusion), printed after it; else (T5) it is printed on its own.
void write_generations(const CliFlags& f, const Tokenizer& tok, const std::vector<std::string>& prompts,
                       const std::vector<std::string>& images, const Generations& g, bool continuation,
                       double seconds) {
  // --output is written whole at the end (write_file_atomic): a failed write leaves no cut file and
  // any previous output intact.
  std::ostringstream out_file;
  const bool to_file = !f.get_string("output").empty();
  int64_t new_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    new_tokens += static_cast<int64_t>(g.ids[i].size());
    // A byte-level BPE sample may end inside a character and a prompt may hold any bytes: both are
    // decoded as HuggingFace's decode does, ill-formed UTF-8 becoming U+FFFD, so the JSON is valid.
    const std::string text = unicode::replace_invalid_utf8(tok.decode(g.ids[i]));
    const std::string prompt = unicode::replace_invalid_utf8(prompts[i]);
    nlohmann::json j = {{"prompt", prompt}, {"generation", text}, {"tokens", g.ids[i].size()},
                        {"batch_seconds", g.batch_seconds[i]}};
    if (g.denoising_steps[i] >= 0) j["denoising_steps"] = g.denoising_steps[i];
    if (!images[i].empty()) j["image"] = images[i];
    if (to_file) out_file << j.dump() << "\n";
    else std::cout << "=== prompt: " << prompt << "\n" << (continuation ? prompt : std::string()) << text << "\n";
  }
  if (to_file) write_file_atomic(f.get_string("output"), out_file.str());
  log_info("generated ", new_tokens, " tokens for ", prompts.size(), " prompt(s) in ", seconds, " s (",
           static_cast<double>(new_tokens) / std::max(seconds, 1e-9), " tokens/s)");
}

// The diffusion, block-diffusion and LLaVA flags, and a device, which a T5 checkpoint does not take.
void check_t5_flags(const CliFlags& f) {
  for (const char* flag : {"gen-length", "steps", "block-length", "remasking", "sampler", "commit-rule", "cfg-scale",
                           "threshold", "prefix-cache", "image", "image-processor"})
    MEGADLM_CHECK(!f.given(flag), "--", flag, " does not apply to a t5 checkpoint (its flags: --max-new-tokens, ",
                  "--temperature, --top-k, --top-p, --seed, --no-kv-cache, --batch-size)");
  MEGADLM_CHECK(f.get_string("device") == "cpu", "--device ", f.get_string("device"),
                ": a t5 checkpoint runs on the CPU (--device cpu)");
  MEGADLM_CHECK(f.get_int("max-new-tokens") >= 1, "--max-new-tokens ", f.get_int("max-new-tokens"),
                ": a t5 checkpoint generates one token at least");
}

// A t5 checkpoint: each prompt is the encoder's input, tokenized as T5Dataset's encoder text (no eos
// appended), decoded in batches of --batch-size (infer/t5_generation.h).
void generate_t5(const CliFlags& f) {
  check_t5_flags(f);
  Timer total;
  const LoadedT5Model lm = load_t5_model(f.get_string("load"));
  MEGADLM_CHECK(lm.state.meta.contains("tokenizer"), lm.dir, "/state.json: no tokenizer recorded");
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));
  std::vector<std::string> images;
  const std::vector<std::string> prompts = all_prompts(f, images);
  MEGADLM_CHECK(!prompts.empty(), "generate: a t5 checkpoint needs --prompt or --prompt-file (the encoder's input)");
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(tok->encode(prompts[i]));
    MEGADLM_CHECK(!ids.back().empty(), "generate: prompt ", i, " encodes to no tokens (a t5 checkpoint's prompt is ",
                  "the encoder's input)");
  }
  T5GenerateOptions o;
  o.sampling.max_new_tokens = f.get_int("max-new-tokens");
  o.sampling.temperature = static_cast<float>(f.get_double("temperature"));
  o.sampling.top_k = f.get_int("top-k");
  o.sampling.top_p = static_cast<float>(f.get_double("top-p"));
  o.sampling.eod = lm.info.eos_token_id;
  o.sampling.vocab_limit = tok->vocab_size();
  o.sampling.kv_cache = !f.get_bool("no-kv-cache");
  o.decoder_start = lm.info.decoder_start_token_id;
  o.pad = lm.info.pad_token_id;
  const auto seed = static_cast<uint64_t>(f.get_int("seed"));
  const auto batch = static_cast<size_t>(f.get_int("batch-size"));
  Generations g;
  g.ids.resize(ids.size());
  g.batch_seconds.resize(ids.size());
  g.denoising_steps.assign(ids.size(), -1);
  for (size_t s = 0; s < ids.size(); s += batch) {
    Timer t;
    const size_t e = std::min(ids.size(), s + batch);
    const std::vector<std::vector<int32_t>> in(ids.begin() + static_cast<std::ptrdiff_t>(s),
                                               ids.begin() + static_cast<std::ptrdiff_t>(e));
    o.sampling.seeds.clear();
    for (size_t i = s; i < e; ++i) o.sampling.seeds.push_back(seed + i);  // prompt i uses seed + i
    const auto out = t5_generate_batch(*lm.model, in, o);
    for (size_t i = s; i < e; ++i) {
      g.ids[i] = out[i - s];
      g.batch_seconds[i] = t.seconds();
    }
  }
  write_generations(f, *tok, prompts, images, g, false, total.seconds());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("generate", "Sample text from a MegaDLMs checkpoint (diffusion or autoregressive).");
    f.add_string("load", "", "checkpoint directory (or the --save directory of a run)", true);
    f.add_string("device", "cpu", "cpu or cuda (one GPU): where the model runs");
    f.add_list("prompt", {}, "prompt text(s)");
    f.add_string("prompt-file", "", ".jsonl file with a \"prompt\" (or \"text\") key per line");
    f.add_string("output", "", ".jsonl output (default: print to stdout)");
    f.add_int("batch-size", 8, "prompts decoded together (diffusion: prompts of equal token length)", at_least(1));
    f.add_int("gen-length", 64, "diffusion: tokens to generate", at_least(1));
    f.add_int("steps", 64,
              "diffusion: denoising steps (ignored with --threshold); bd3: per block (default --block-length)",
              at_least(1));
    f.add_int("block-length", 0,
              "diffusion: block size (default --gen-length); bd3: must be the checkpoint's (its default)", at_least(0));
    f.add_string("remasking", "low_confidence", "diffusion: low_confidence or random");
    f.add_string("sampler", "llada",
                 "diffusion: llada (reverse process), mdlm (ancestral) or bd3 (block diffusion, block_causal "
                 "checkpoints; the default for a --block-diffusion checkpoint)");
    f.add_string("commit-rule", "mdlm",
                 "bd3: how a step commits tokens: mdlm (ancestral) or llada (most confident first)");
    f.add_double("cfg-scale", 0.0, "diffusion: classifier-free guidance scale (0 = off)", at_least(0));
    f.add_double("threshold", 0.0, "diffusion: commit every token above this confidence per step (0 = off)", closed_open(0, 1));
    f.add_bool("prefix-cache", "diffusion: reuse the prefix keys/values within a block (approximate)");
    f.add_int("max-new-tokens", 64,
              "gpt, t5 and bd3: tokens to generate (at most: generation stops at end-of-document; t5: at its eos, and "
              "1 at least)",
              at_least(0));
    f.add_bool("no-kv-cache",
               "gpt and t5: re-run the whole prefix for every token; bd3: re-run the committed blocks at every step "
               "(the references)");
    f.add_double("temperature", 0.0, "sampling temperature (0 = greedy)", at_least(0));
    f.add_int("top-k", 0, "gpt and t5: keep the k most likely tokens (0 = all)", at_least(0));
    f.add_double("top-p", 1.0, "gpt and t5: nucleus sampling threshold", open_closed(0, 1));
    f.add_int("seed", 0, "sampling seed (prompt i uses seed + i)");
    f.add_string("image", "", "llava: the image of the --prompt prompts (PNG or JPEG)");
    f.add_string("image-processor", "",
                 "llava: a preprocessor_config.json for the images (default: the checkpoint's, as its training "
                 "data or HuggingFace model had it; else CLIP's, resized and cropped to the model's image size)");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    if (!f.get_string("output").empty()) check_creatable("--output", f.get_string("output"));
    const Device device = device_from_name(f.get_string("device"), "--device");
    check_device_available(device);  // before the checkpoint is read
    if (checkpoint_model_type(f.get_string("load")) == "t5") {
      generate_t5(f);
      return 0;
    }
    LoadedModel lm = load_model(f.get_string("load"), device);
    // A block-diffusion checkpoint (trained with --block-diffusion) samples block by block unless told otherwise.
    const std::string sampler =
        !f.given("sampler") && lm.model->config().block_diffusion ? std::string("bd3") : f.get_string("sampler");
    check_sampler_flags(f, sampler);
    const bool bd3 = sampler == "bd3";
    if (bd3) check_bd3_flags(f);
    MEGADLM_CHECK(!(lm.diffusion && lm.state.meta.value("model_running_mode", std::string()) == "vanilla"), lm.dir,
                  ": a shifted (--model-running-mode vanilla) diffusion model is not supported by generate yet");
    MEGADLM_CHECK(lm.state.meta.contains("tokenizer"), lm.dir, "/state.json: no tokenizer recorded");
    std::unique_ptr<Tokenizer> tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));
    const BlockSampleOptions bd3_base = bd3 ? bd3_options(f, lm, tok->vocab_size()) : BlockSampleOptions{};

    std::vector<std::string> prompt_images;
    std::vector<std::string> prompts = all_prompts(f, prompt_images);
    if (prompts.empty()) {
      prompts.push_back("");
      prompt_images.push_back("");
    }
    LlavaPrompts llava(lm, f.get_string("image-processor"));
    for (const char* flag : {"image", "image-processor"})
      MEGADLM_CHECK(llava.active() || !f.given(flag), "--", flag, " needs a llava checkpoint; ", lm.dir,
                    " holds a language model without a vision tower");
    MEGADLM_CHECK(!(llava.active() && bd3), "--sampler bd3 does not take llava checkpoints");
    // Sampled ids stay in the tokenizer's vocabulary; a LLaVA model's image token, when it is the last id
    // there, is left out (it is an input only).
    int64_t vocab_limit = tok->vocab_size();
    if (llava.active() && llava.vision()->options().image_token == vocab_limit - 1) vocab_limit -= 1;
    const int64_t batch = f.get_int("batch-size");
    const uint64_t seed = static_cast<uint64_t>(f.get_int("seed"));

    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string& p = prompts[i];
      ids.push_back(llava.encode(*tok, p, prompt_images[i], "generate"));
      if (!lm.diffusion && ids.back().empty()) ids.back().push_back(lm.eod);  // AR needs a first token
    }
    // Batches: lists of prompt indices. Diffusion canvases share one length, so group by it.
    std::vector<std::vector<size_t>> batches;
    if (lm.diffusion) {
      std::map<size_t, std::vector<size_t>> by_len;
      for (size_t i = 0; i < ids.size(); ++i) by_len[ids[i].size()].push_back(i);
      for (auto& [len, idx] : by_len)
        for (size_t s = 0; s < idx.size(); s += static_cast<size_t>(batch))
          batches.emplace_back(idx.begin() + s, idx.begin() + std::min(idx.size(), s + static_cast<size_t>(batch)));
    } else {
      for (size_t s = 0; s < ids.size(); s += static_cast<size_t>(batch)) {
        batches.emplace_back();
        for (size_t i = s; i < std::min(ids.size(), s + static_cast<size_t>(batch)); ++i) batches.back().push_back(i);
      }
    }

    Generations g;
    g.ids.resize(ids.size());
    g.batch_seconds.resize(ids.size());
    g.denoising_steps.assign(ids.size(), -1);
    Timer total;
    for (const auto& idx : batches) {
      Timer t;
      std::vector<std::vector<int32_t>> in;
      std::vector<uint64_t> seeds;  // prompt i uses seed + i whatever batch it lands in
      for (size_t i : idx) {
        in.push_back(ids[i]);
        seeds.push_back(seed + i);
      }
      std::vector<std::vector<int32_t>> out;
      DiffusionStats stats;
      if (bd3) {
        BlockSampleOptions o = bd3_base;
        o.seeds = seeds;
        o.stats = &stats;
        out = block_diffusion_generate(*lm.model, in, o);
      } else if (lm.diffusion) {
        DiffusionSampleOptions o;
        o.gen_length = f.get_int("gen-length");
        o.steps = f.get_int("steps");
        o.block_length = f.get_int("block-length") > 0 ? f.get_int("block-length") : o.gen_length;
        o.remasking = remasking_from_name(f.get_string("remasking"));
        o.sampler = diffusion_sampler_from_name(sampler);
        o.cfg_scale = static_cast<float>(f.get_double("cfg-scale"));
        o.threshold = static_cast<float>(f.get_double("threshold"));
        o.prefix_cache = f.get_bool("prefix-cache");
        o.temperature = static_cast<float>(f.get_double("temperature"));
        o.mask_token = lm.mask_token;
        o.vocab_limit = vocab_limit;
        o.seeds = seeds;
        o.stats = &stats;
        o.inputs = llava.inputs_for(idx);
        out = diffusion_generate_batch(*lm.model, in, o);
      } else {
        ARSampleOptions o;
        o.max_new_tokens = f.get_int("max-new-tokens");
        o.temperature = static_cast<float>(f.get_double("temperature"));
        o.top_k = f.get_int("top-k");
        o.top_p = static_cast<float>(f.get_double("top-p"));
        o.eod = lm.eod;
        o.vocab_limit = vocab_limit;
        o.seeds = seeds;
        o.kv_cache = !f.get_bool("no-kv-cache");
        o.inputs = llava.inputs_for(idx);
        out = ar_generate_batch(*lm.model, in, o);
      }
      for (size_t j = 0; j < idx.size(); ++j) {
        g.ids[idx[j]] = out[j];
        if (lm.diffusion) g.denoising_steps[idx[j]] = stats.steps;
      }
      for (size_t i : idx) g.batch_seconds[i] = t.seconds();  // the batch's wall time
    }
    write_generations(f, *tok, prompts, prompt_images, g, true, total.seconds());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "generate: error: %s\n", e.what());
    return 1;
  }
}
