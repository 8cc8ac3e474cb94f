// bench_generate: generation speed of the samplers, printed as a table.
//   AR  : greedy decoding of --ar-new-tokens tokens with and without the KV cache (same tokens expected).
//   DLM : LLaDA one-token-per-step decoding (exact) of --gen-length tokens vs confidence-threshold
//         decoding, the approximate prefix KV cache, and both; agreement = fraction of generated
//         positions with the same token as the exact sampler.
// Models: --load-gpt / --load-dlm checkpoints (the prompt is tokenized with their tokenizer), or
// randomly initialised small models (then the confidences are near uniform and threshold decoding
// degenerates to one token per step: use a trained checkpoint to see its effect).
//
//   bench_generate --load-dlm runs/gen/difflm --load-gpt runs/gen/gpt --prompt "The secret of life is"
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/model_loader.h"
#include "core/error.h"
#include "core/log.h"
#include "core/cli_flags.h"
#include "tokenizers/tokenizer.h"
#include "infer/sampling.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"

using namespace megadlm;

namespace {

TransformerConfig random_config(int64_t layers, int64_t hidden, double init_std) {
  TransformerConfig c;
  c.init_method_std = static_cast<float>(init_std);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = hidden / 4;
  c.ffn_hidden_size = hidden * 11 / 4;
  c.vocab_size = 4096;
  c.max_position_embeddings = 640;
  c.normalization = NormKind::RMSNorm;
  c.activation = Activation::SwiGLU;
  c.position_embedding = PositionEmbedding::Rope;
  c.add_bias_linear = false;
  return c;
}

struct Row {
  std::string name;
  int64_t tokens = 0, calls = 0;
  double seconds = 0;
  double agreement = -1;
  double cpu = 0;  // process CPU seconds: less sensitive than wall time to other jobs on the machine
};

void print(const std::vector<Row>& rows, double base_seconds, double base_cpu) {
  std::printf("| %-34s | %6s | %6s | %8s | %9s | %7s | %9s | %7s | %11s |\n", "mode", "tokens", "calls", "seconds",
              "tokens/s", "speedup", "agreement", "cpu s", "cpu speedup");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(8, '-').c_str(),
              std::string(8, '-').c_str(), std::string(10, '-').c_str(), std::string(11, '-').c_str(),
              std::string(9, '-').c_str(), std::string(11, '-').c_str(), std::string(9, '-').c_str(),
              std::string(13, '-').c_str());
  for (const Row& r : rows) {
    char agree[32] = "-";
    if (r.agreement >= 0) std::snprintf(agree, sizeof agree, "%.3f", r.agreement);
    std::printf("| %-34s | %6lld | %6lld | %8.2f | %9.1f | %6.2fx | %9s | %7.2f | %10.2fx |\n", r.name.c_str(),
                static_cast<long long>(r.tokens), static_cast<long long>(r.calls), r.seconds,
                static_cast<double>(r.tokens) / r.seconds, base_seconds / r.seconds, agree, r.cpu, base_cpu / r.cpu);
  }
}

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& ref) {
  int64_t same = 0;
  for (size_t i = 0; i < ref.size(); ++i) same += i < a.size() && a[i] == ref[i];
  return static_cast<double>(same) / static_cast<double>(ref.size());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("bench_generate", "Generation speed: AR with/without KV cache, DLM exact/threshold/prefix cache.");
    f.add_string("load-gpt", "", "GPT checkpoint (default: a random 4-layer model)");
    f.add_string("load-dlm", "", "diffusion checkpoint (default: a random 4-layer model)");
    f.add_string("prompt", "The secret of life is", "prompt text (checkpoints only)");
    f.add_int("prompt-tokens", 16, "prompt length for random models");
    f.add_int("ar-new-tokens", 512, "AR tokens to generate");
    f.add_int("gen-length", 256, "DLM tokens to generate");
    f.add_int("block-length", 32, "DLM block length");
    f.add_double("threshold", 0.9, "DLM confidence threshold");
    f.add_int("random-layers", 4, "layers of the random models");
    f.add_int("random-hidden", 256, "hidden size of the random models");
    f.add_double("random-init-std", 0.02, "init std of the random models (larger: peakier predictions)");
    f.add_bool("skip-ar", "only the diffusion part");
    f.add_bool("skip-dlm", "only the autoregressive part");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    std::vector<int32_t> random_prompt;
    for (int64_t i = 0; i < f.get_int("prompt-tokens"); ++i) random_prompt.push_back(static_cast<int32_t>(100 + 37 * i % 3000));

    if (!f.get_bool("skip-ar")) {
      std::unique_ptr<LanguageModel> own;
      LanguageModel* m;
      std::vector<int32_t> prompt = random_prompt;
      std::string what = "random init";
      LoadedModel lm;
      if (!f.get_string("load-gpt").empty()) {
        lm = load_model(f.get_string("load-gpt"));
        MEGADLM_CHECK(!lm.diffusion, f.get_string("load-gpt"), " is a diffusion checkpoint");
        m = lm.model.get();
        prompt = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]))->encode(f.get_string("prompt"));
        what = lm.dir;
      } else {
        const TransformerConfig c = random_config(f.get_int("random-layers"), f.get_int("random-hidden"), f.get_double("random-init-std"));
        own = std::make_unique<LanguageModel>(c, gpt_model_spec(c), ParallelContext::single());
        own->params().init(1);
        m = own.get();
      }
      ARSampleOptions o;
      o.max_new_tokens = f.get_int("ar-new-tokens");
      o.eod = -1;  // always the full length
      std::vector<Row> rows;
      {  // warm-up: the arena's first growth and oneDNN's kernel generation are not timed
        ARSampleOptions w = o;
        w.max_new_tokens = 8;
        ar_generate(*m, prompt, w);
        w.kv_cache = false;
        ar_generate(*m, prompt, w);
      }
      Timer t;
      double c0 = cpu_seconds();
      o.kv_cache = true;
      const std::vector<int32_t> cached = ar_generate(*m, prompt, o);
      rows.push_back({"AR greedy, KV cache", static_cast<int64_t>(cached.size()), static_cast<int64_t>(cached.size()),
                      t.seconds(), -1, cpu_seconds() - c0});
      std::fprintf(stderr, "AR with cache: %.2f s\n", t.seconds());
      t.reset();
      c0 = cpu_seconds();
      o.kv_cache = false;
      const std::vector<int32_t> plain = ar_generate(*m, prompt, o);
      rows.push_back({"AR greedy, no cache", static_cast<int64_t>(plain.size()), static_cast<int64_t>(plain.size()),
                      t.seconds(), -1, cpu_seconds() - c0});
      rows[0].agreement = agreement(cached, plain);
      rows[1].agreement = 1.0;
      std::printf("\nAR (%s), prompt %zu tokens, %lld new tokens; speedup vs no cache, agreement vs no cache\n",
                  what.c_str(), prompt.size(), static_cast<long long>(o.max_new_tokens));
      print(rows, rows[1].seconds, rows[1].cpu);
    }

    if (!f.get_bool("skip-dlm")) {
      std::unique_ptr<LanguageModel> own;
      LanguageModel* m;
      std::vector<int32_t> prompt = random_prompt;
      std::string what = "random init";
      int32_t mask = 1;
      int64_t vlim = 0;
      LoadedModel lm;
      if (!f.get_string("load-dlm").empty()) {
        lm = load_model(f.get_string("load-dlm"));
        MEGADLM_CHECK(lm.diffusion, f.get_string("load-dlm"), " is not a diffusion checkpoint");
        m = lm.model.get();
        auto tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));
        prompt = tok->encode(f.get_string("prompt"));
        vlim = tok->vocab_size();
        mask = lm.mask_token;
        what = lm.dir;
      } else {
        const TransformerConfig c = random_config(f.get_int("random-layers"), f.get_int("random-hidden"), f.get_double("random-init-std"));
        own = std::make_unique<LanguageModel>(c, decoder_model_spec(c, difflm_layer_spec(c, MaskType::None, 0)), ParallelContext::single());
        own->params().init(2);
        m = own.get();
      }
      DiffusionSampleOptions base;
      base.gen_length = f.get_int("gen-length");
      base.block_length = f.get_int("block-length");
      base.steps = base.gen_length;  // one token per step: the exact reference
      base.mask_token = mask;
      base.vocab_limit = vlim;
      const float th = static_cast<float>(f.get_double("threshold"));
      struct Mode { std::string name; float threshold; bool prefix; };
      char thname[64];
      std::snprintf(thname, sizeof thname, "threshold %.3g", th);
      const std::vector<Mode> modes = {{"DLM exact, 1 token/step", 0.0f, false},
                                       {std::string("DLM ") + thname, th, false},
                                       {"DLM prefix cache, 1 token/step", 0.0f, true},
                                       {std::string("DLM ") + thname + " + prefix cache", th, true}};
      std::vector<Row> rows;
      std::vector<int32_t> exact;
      {  // warm-up (untimed), through both the plain and the cached forward
        DiffusionSampleOptions w = base;
        w.gen_length = w.block_length;
        w.steps = 2;
        diffusion_generate(*m, prompt, w);
        w.prefix_cache = true;
        diffusion_generate(*m, prompt, w);
      }
      for (const Mode& md : modes) {
        DiffusionSampleOptions o = base;
        o.threshold = md.threshold;
        o.prefix_cache = md.prefix;
        DiffusionStats st;
        o.stats = &st;
        Timer t;
        const double c0 = cpu_seconds();
        const std::vector<int32_t> g = diffusion_generate(*m, prompt, o);
        const double s = t.seconds();
        if (exact.empty()) exact = g;
        rows.push_back({md.name, static_cast<int64_t>(g.size()), st.steps, s, agreement(g, exact), cpu_seconds() - c0});
        std::fprintf(stderr, "%s: %.2f s, %lld model calls\n", md.name.c_str(), s, static_cast<long long>(st.steps));
      }
      std::printf("\nDLM (%s), prompt %zu tokens, gen length %lld, block %lld; speedup and agreement vs exact\n",
                  what.c_str(), prompt.size(), static_cast<long long>(base.gen_length),
                  static_cast<long long>(base.block_length));
      print(rows, rows[0].seconds, rows[0].cpu);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_generate: error: %s\n", e.what());
    return 1;
  }
}
