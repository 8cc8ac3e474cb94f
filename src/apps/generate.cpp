// generate: sample text from a checkpoint written by pretrain_difflm. Diffusion models use LLaDA's
// reverse process (--gen-length, --steps, --block-length, --remasking, --temperature); GPT models
// sample left to right (--max-new-tokens, --temperature, --top-k, --top-p).
//
//   generate --load runs/dlm --prompt "The jury said" --gen-length 64 --steps 64
//   generate --load runs/gpt --prompt-file prompts.jsonl --output out.jsonl
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "checkpoint/model_loader.h"
#include "core/error.h"
#include "core/log.h"
#include "data/cli_flags.h"
#include "data/tokenizer.h"
#include "infer/sampling.h"

using namespace megadlm;

int main(int argc, char** argv) {
  try {
    CliFlags f("generate", "Sample text from a MegaDLMs checkpoint (diffusion or autoregressive).");
    f.add_string("load", "", "checkpoint directory (or the --save directory of a run)", true);
    f.add_list("prompt", {}, "prompt text(s)");
    f.add_string("prompt-file", "", ".jsonl file with a \"prompt\" (or \"text\") key per line");
    f.add_string("output", "", ".jsonl output (default: print to stdout)");
    f.add_int("gen-length", 64, "diffusion: tokens to generate");
    f.add_int("steps", 64, "diffusion: denoising steps");
    f.add_int("block-length", 0, "diffusion: block size (default --gen-length)");
    f.add_string("remasking", "low_confidence", "diffusion: low_confidence or random");
    f.add_int("max-new-tokens", 64, "gpt: tokens to generate");
    f.add_double("temperature", 0.0, "sampling temperature (0 = greedy)");
    f.add_int("top-k", 0, "gpt: keep the k most likely tokens (0 = all)");
    f.add_double("top-p", 1.0, "gpt: nucleus sampling threshold");
    f.add_int("seed", 0, "sampling seed");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    LoadedModel lm = load_model(f.get_string("load"));
    MDLM_CHECK(lm.state.meta.contains("tokenizer"), lm.dir, "/state.json: no tokenizer recorded");
    std::unique_ptr<Tokenizer> tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));

    std::vector<std::string> prompts = f.get_list("prompt");
    if (!f.get_string("prompt-file").empty()) {
      std::ifstream in(f.get_string("prompt-file"));
      MDLM_CHECK(in.good(), f.get_string("prompt-file"), ": cannot open");
      std::string line;
      int64_t n = 0;
      while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          fail(f.get_string("prompt-file"), ":", n, ": invalid JSON (", e.what(), ")");
        }
        const char* key = j.contains("prompt") ? "prompt" : "text";
        MDLM_CHECK(j.contains(key) && j[key].is_string(), f.get_string("prompt-file"), ":", n,
                   ": no string \"prompt\" or \"text\" key");
        prompts.push_back(j[key].get<std::string>());
      }
    }
    if (prompts.empty()) prompts.push_back("");

    std::ofstream out_file;
    if (!f.get_string("output").empty()) {
      out_file.open(f.get_string("output"));
      MDLM_CHECK(out_file.good(), f.get_string("output"), ": cannot create");
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> ids = tok->encode(prompts[i]);
      Timer t;
      std::vector<int32_t> gen;
      if (lm.diffusion) {
        DiffusionSampleOptions o;
        o.gen_length = f.get_int("gen-length");
        o.steps = f.get_int("steps");
        o.block_length = f.get_int("block-length") > 0 ? f.get_int("block-length") : o.gen_length;
        o.remasking = remasking_from_name(f.get_string("remasking"));
        o.temperature = static_cast<float>(f.get_double("temperature"));
        o.mask_token = lm.mask_token;
        o.vocab_limit = tok->vocab_size();
        o.seed = static_cast<uint64_t>(f.get_int("seed")) + i;
        gen = diffusion_generate(*lm.model, ids, o);
      } else {
        ARSampleOptions o;
        o.max_new_tokens = f.get_int("max-new-tokens");
        o.temperature = static_cast<float>(f.get_double("temperature"));
        o.top_k = f.get_int("top-k");
        o.top_p = static_cast<float>(f.get_double("top-p"));
        o.eod = lm.eod;
        o.vocab_limit = tok->vocab_size();
        o.seed = static_cast<uint64_t>(f.get_int("seed")) + i;
        gen = ar_generate(*lm.model, ids.empty() ? std::vector<int32_t>{lm.eod} : ids, o);
      }
      const std::string text = tok->decode(gen);
      const nlohmann::json j = {{"prompt", prompts[i]}, {"generation", text}, {"tokens", gen.size()},
                                {"seconds", t.seconds()}};
      if (out_file.is_open()) out_file << j.dump() << "\n";
      else std::cout << "=== prompt: " << prompts[i] << "\n" << prompts[i] << text << "\n";
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "generate: error: %s\n", e.what());
    return 1;
  }
}
