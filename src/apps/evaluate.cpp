// evaluate: likelihood-based evaluation of a checkpoint written by pretrain_difflm; prints JSON.
//   - on a Megatron .bin/.idx dataset (--data-path): consecutive windows of --seq-length tokens;
//     GPT: exact NLL per token and perplexity; diffusion: the negative ELBO per token estimated by
//     Monte Carlo (--mc-samples stratified draws of the mask ratio per window), reported as a
//     perplexity upper bound with its standard error; a block diffusion (BD3-LM) checkpoint's NELBO
//     runs over its [x_t ; x_0] layout with t per block drawn from [eps, 1] (docs/block_diffusion.md);
//   - multiple choice (--choices-file, .jsonl of {"context", "choices", "label"}): each choice scored
//     by its log-likelihood given the context (diffusion: LLaDA's estimator, prompt never masked,
//     --cfg-scale for guidance), accuracy of the argmax (and of the per-token argmax);
//   - one conditional log-likelihood (--prompt, --answer);
//   - a LLaVA checkpoint (docs/llava.md) scores --answer given an image (--image, the prompt's "<image>"
//     marker expanding into the model's P image positions) and --choices-file items given theirs (an
//     "image" path per line), with either backbone; its --data-path windows are text only;
//   - a BERT or T5 checkpoint (docs/bert.md, docs/t5.md "Inference"): the validation samples of
//     --data-path (sentence-split, --split by documents) as training draws them, scored as the
//     trainer's validation: BERT's masked-LM loss, perplexity and masked-token accuracy (with the
//     binary head the sentence-order loss and accuracy), T5's sequence-to-sequence loss and perplexity.
//
//   evaluate --load runs/gpt --data-path data/wiki_text_document --seq-length 128 --eval-samples 64
//   evaluate --load runs/dlm --data-path data/wiki_text_document --mc-samples 32 --output eval.json
//   evaluate --load runs/dlm --choices-file tasks/mc.jsonl --mc-samples 16 --cfg-scale 0.5
//   evaluate --load runs/bert --data-path data/wiki_text_sentence --split 95,5,0 --eval-samples 64
//   evaluate --load runs/llava --image pic.png --prompt $'...<image>\nWhat is in the picture?...' --answer "Two red circles."
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "checkpoint/model_loader.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/cli_flags.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "tokenizers/tokenizer.h"
#include "infer/family_eval.h"
#include "infer/likelihood.h"
#include "infer/llava_prompts.h"

using namespace megadlm;

namespace {

struct Stats {
  double mean = 0, se = 0;
};

Stats mean_se(const std::vector<double>& x) {
  Stats s;
  if (x.empty()) return s;
  for (double v : x) s.mean += v;
  s.mean /= static_cast<double>(x.size());
  if (x.size() > 1) {
    double ss = 0;
    for (double v : x) ss += (v - s.mean) * (v - s.mean);
    s.se = std::sqrt(ss / static_cast<double>(x.size() - 1) / static_cast<double>(x.size()));
  }
  return s;
}

// The first n windows of `len` consecutive tokens of the dataset (documents concatenated).
std::vector<std::vector<int32_t>> windows(const std::string& prefix, int64_t len, int64_t n) {
  IndexedDataset ds(prefix);
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> cur;
  for (int64_t s = 0; s < ds.num_sequences() && static_cast<int64_t>(out.size()) < n; ++s) {
    int64_t off = 0;
    const int64_t L = ds.sequence_length(s);
    while (off < L && static_cast<int64_t>(out.size()) < n) {
      const int64_t take = std::min(L - off, len - static_cast<int64_t>(cur.size()));
      const size_t at = cur.size();
      cur.resize(at + static_cast<size_t>(take));
      ds.read(s, off, take, cur.data() + at);
      off += take;
      if (static_cast<int64_t>(cur.size()) == len) {
        out.push_back(cur);
        cur.clear();
      }
    }
  }
  MEGADLM_CHECK(!out.empty(), prefix, ": fewer than ", len, " tokens, not one evaluation window");
  return out;
}

// "bert" or "t5" for a checkpoint of those families (scored by infer/family_eval.h), else "".
std::string checkpoint_family(const std::string& load) {
  const std::string dir = resolve_checkpoint_dir(load);
  if (dir.empty()) return "";  // load_model says why
  const std::string type = read_checkpoint_state(dir).meta.value("model_type", "");
  return type == "bert" || type == "t5" ? type : "";
}

nlohmann::json evaluate_family(const CliFlags& f, const std::string& family) {
  Timer t;
  const std::string dir = resolve_checkpoint_dir(f.get_string("load"));
  MEGADLM_CHECK(f.get_string("device") == "cpu", "--device ", f.get_string("device"), ": evaluate runs ", family,
                " checkpoints on the cpu only");
  for (const char* flag : {"choices-file", "answer", "prompt", "seq-length", "mc-samples", "cfg-scale"})
    MEGADLM_CHECK(!f.given(flag), "--", flag, " is not available for a ", family, " checkpoint (evaluate scores its ",
                  "--data-path samples)");
  MEGADLM_CHECK(!f.get_string("data-path").empty(), "--data-path: a ", family, " checkpoint is evaluated on a ",
                "sentence-split dataset; give its prefix");
  FamilyEvalOptions opt;
  opt.data_path = f.get_string("data-path");
  opt.split = f.get_string("split");
  opt.samples = f.get_int("eval-samples");
  opt.micro_batch_size = f.get_int("micro-batch-size");
  if (f.given("seed")) opt.seed = static_cast<uint64_t>(f.get_int("seed"));
  if (f.given("mask-prob")) opt.mask_prob = f.get_double("mask-prob");
  const CheckpointState state = read_checkpoint_state(dir);
  nlohmann::json d = family == "bert" ? evaluate_bert_checkpoint(dir, state, opt) : evaluate_t5_checkpoint(dir, state, opt);
  d["seconds"] = t.seconds();
  return {{"checkpoint", dir}, {"model_type", family}, {"dataset", d}};
}

// A LLaVA model's --data-path windows are scored as text: a window holding the image token (data
// preprocessed with --image-key) would need images that windows do not carry.
void check_text_only(const std::vector<std::vector<int32_t>>& windows, const LlavaVision* vision,
                     const std::string& path) {
  if (!vision) return;
  const int32_t image_token = vision->options().image_token;
  for (size_t k = 0; k < windows.size(); ++k)
    MEGADLM_CHECK(std::find(windows[k].begin(), windows[k].end(), image_token) == windows[k].end(), "--data-path ", path,
                  ": window ", k, " holds the image token ", image_token, "; evaluate scores a llava model's images "
                  "through --answer with --image or --choices-file lines with an \"image\", and --data-path as "
                  "text only");
}

void print_report(const CliFlags& f, const nlohmann::json& res) {
  // Paths and --prompt / --answer may hold any bytes: ill-formed UTF-8 is written as U+FFFD.
  const std::string text = res.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::cout << text << "\n";
  // Written whole under a temporary name and renamed: a failed write leaves any previous file intact.
  if (!f.get_string("output").empty()) write_file_atomic(f.get_string("output"), text + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("evaluate", "Likelihood evaluation of a MegaDLMs checkpoint (diffusion or autoregressive).");
    f.add_string("load", "", "checkpoint directory (or the --save directory of a run)", true);
    f.add_string("device", "cpu", "cpu or cuda (one GPU): where the model runs");
    f.add_string("data-path", "", "Megatron dataset prefix (<prefix>.bin/.idx) for perplexity");
    f.add_int("seq-length", 0, "tokens per evaluation window (default: the checkpoint's --seq-length)", at_least(0));
    f.add_int("eval-samples", 64, "number of windows", at_least(1));
    f.add_int("micro-batch-size", 8, "windows (GPT) or masked copies (diffusion) per model call", at_least(1));
    f.add_int("mc-samples", 32, "diffusion: Monte Carlo draws of the mask per sequence", at_least(1));
    f.add_double("cfg-scale", 0.0, "diffusion: classifier-free guidance for conditional likelihoods", at_least(0));
    f.add_string("choices-file", "", ".jsonl of {\"context\", \"choices\": [..], \"label\"} for accuracy (llava: and "
                 "an \"image\" path for the context's <image>)");
    f.add_string("prompt", "", "conditional log-likelihood: the given text");
    f.add_string("answer", "", "conditional log-likelihood: the scored continuation");
    f.add_string("image", "", "llava: the image of the --prompt's <image> (PNG or JPEG)");
    f.add_string("image-processor", "",
                 "llava: a preprocessor_config.json for the images (default: the checkpoint's, as its training "
                 "data or HuggingFace model had it; else CLIP's, resized and cropped to the model's image size)");
    f.add_int("seed", 1234, "Monte Carlo seed (bert, t5: the samples' seed; default: the checkpoint's)");
    f.add_string("split", "969,30,1", "bert, t5: train,valid,test proportions of --data-path documents; the valid ones are scored");
    f.add_double("mask-prob", 0.15, "bert: mask probability; t5: noise density (default: the checkpoint's)", at_least(0));
    f.add_string("output", "", "write the JSON here as well as to stdout");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    if (!f.get_string("output").empty()) check_creatable("--output", f.get_string("output"));
    Timer total;
    if (const std::string family = checkpoint_family(f.get_string("load")); !family.empty()) {
      print_report(f, evaluate_family(f, family));
      return 0;
    }
    LoadedModel lm = load_model(f.get_string("load"), device_from_name(f.get_string("device"), "--device"));
    LlavaPrompts llava(lm, f.get_string("image-processor"));
    for (const char* flag : {"image", "image-processor"})
      MEGADLM_CHECK(llava.active() || !f.given(flag), "--", flag, " needs a llava checkpoint; ", lm.dir,
                    " holds a language model without a vision tower");
    MEGADLM_CHECK(!f.given("image") || !f.get_string("answer").empty(), "--image is the image of --prompt, "
                  "scored with --answer (--choices-file lines carry their own \"image\")");
    MEGADLM_CHECK(!(lm.diffusion && lm.state.meta.value("model_running_mode", std::string()) == "vanilla"), lm.dir,
                  ": a shifted (--model-running-mode vanilla) diffusion model is not supported by evaluate yet");
    LanguageModel& model = *lm.model;
    // A block diffusion checkpoint (BD3-LM) is scored by its own NELBO over the [x_t ; x_0] layout.
    const bool block_diffusion = model.config().block_diffusion;
    MEGADLM_CHECK(!block_diffusion || (f.get_string("answer").empty() && f.get_string("choices-file").empty()), lm.dir,
                  ": --answer and --choices-file are not available for a block diffusion checkpoint yet (use --data-path)");
    const double bd3_eps = lm.state.meta.value("dlm_eps", 1e-3);
    nlohmann::json res = {{"checkpoint", lm.dir}, {"model_type", lm.diffusion ? "difflm" : "gpt"}};
    DiffusionLikelihoodOptions dopt;
    dopt.mask_token = lm.mask_token;
    dopt.mc_samples = f.get_int("mc-samples");
    dopt.batch = f.get_int("micro-batch-size");
    dopt.cfg_scale = static_cast<float>(f.get_double("cfg-scale"));
    dopt.seed = static_cast<uint64_t>(f.get_int("seed"));
    bool did = false;

    if (!f.get_string("data-path").empty()) {
      did = true;
      Timer t;
      int64_t T = f.get_int("seq-length");
      if (T <= 0 && lm.state.meta.contains("seq_length")) T = lm.state.meta["seq_length"].get<int64_t>();
      MEGADLM_CHECK(T >= 2, "--seq-length must be at least 2, got ", T);
      const int64_t n = f.get_int("eval-samples");
      // Data tokenized otherwise than the model was trained would be scored as noise.
      if (lm.state.meta.contains("tokenizer")) {
        const auto model_tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));
        check_data_tokenizer(f.get_string("data-path"), *model_tok, "the checkpoint " + lm.dir);
      }
      nlohmann::json d = {{"data_path", f.get_string("data-path")}, {"seq_length", T}};
      std::vector<double> per_window;  // nats per token of each window
      int64_t tokens = 0;
      if (!lm.diffusion) {
        // Windows of T + 1 tokens: inputs [0, T), targets [1, T + 1); exact NLL.
        const auto w = windows(f.get_string("data-path"), T + 1, n);
        check_text_only(w, llava.vision(), f.get_string("data-path"));
        const int64_t mb_size = dopt.batch;
        for (size_t s = 0; s < w.size(); s += static_cast<size_t>(mb_size)) {
          const int64_t B = std::min<int64_t>(mb_size, static_cast<int64_t>(w.size() - s));
          std::vector<int32_t> in(static_cast<size_t>(B * T)), tgt(static_cast<size_t>(B * T)), pos(static_cast<size_t>(B * T));
          for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < T; ++i) {
              in[static_cast<size_t>(b * T + i)] = w[s + b][static_cast<size_t>(i)];
              tgt[static_cast<size_t>(b * T + i)] = w[s + b][static_cast<size_t>(i + 1)];
              pos[static_cast<size_t>(b * T + i)] = static_cast<int32_t>(i);
            }
          MicroBatch mb;
          mb.B = B;
          mb.T = T;
          mb.tokens = in;
          mb.targets = tgt;
          mb.positions = pos;
          std::vector<float> loss(static_cast<size_t>(B * T));
          model.forward_loss(mb, loss.data());
          for (int64_t b = 0; b < B; ++b) {
            double sum = 0;
            for (int64_t i = 0; i < T; ++i) sum += loss[static_cast<size_t>(b * T + i)];
            per_window.push_back(sum / static_cast<double>(T));
          }
          tokens += B * T;
        }
        const Stats st = mean_se(per_window);
        d["windows"] = per_window.size();
        d["tokens"] = tokens;
        d["nll_per_token"] = st.mean;
        d["nll_se"] = st.se;
        d["perplexity"] = std::exp(st.mean);
      } else {
        // The negative ELBO bounds the NLL: a perplexity upper bound. Its standard error is over
        // windows (it includes the Monte Carlo noise of each window's estimate).
        MEGADLM_CHECK(!block_diffusion || T % model.config().attention_block_size == 0, "--seq-length ", T,
                      " is not a multiple of the checkpoint's block length ", model.config().attention_block_size);
        const auto w = windows(f.get_string("data-path"), T, n);
        check_text_only(w, llava.vision(), f.get_string("data-path"));
        double mc_se = 0;
        for (size_t s = 0; s < w.size(); ++s) {
          const MCEstimate e = block_diffusion ? block_diffusion_nll(model, w[s], dopt, bd3_eps, s)
                                               : diffusion_nll(model, w[s], 0, dopt, s);
          per_window.push_back(e.mean / static_cast<double>(T));
          mc_se += e.se / static_cast<double>(T);
          tokens += T;
        }
        const Stats st = mean_se(per_window);
        d["windows"] = per_window.size();
        d["tokens"] = tokens;
        d["mc_samples"] = dopt.mc_samples;
        if (block_diffusion) {
          d["block_diffusion"] = {{"block_length", model.config().attention_block_size}, {"eps", bd3_eps}};
          d["perplexity_name"] = "ppl (ELBO bound)";
        }
        d["nelbo_per_token"] = st.mean;
        d["nelbo_se"] = st.se;
        d["mean_mc_se_per_window"] = mc_se / static_cast<double>(w.size());
        d["perplexity_bound"] = std::exp(st.mean);
        d["perplexity_bound_2se"] = {std::exp(st.mean - 2 * st.se), std::exp(st.mean + 2 * st.se)};
      }
      d["seconds"] = t.seconds();
      d["tokens_per_second"] = static_cast<double>(tokens) / std::max(t.seconds(), 1e-9);
      res["dataset"] = d;
    }

    std::unique_ptr<Tokenizer> tok;
    auto tokenizer = [&]() -> Tokenizer& {
      if (!tok) {
        MEGADLM_CHECK(lm.state.meta.contains("tokenizer"), lm.dir, "/state.json: no tokenizer recorded");
        tok = make_tokenizer(TokenizerSpec::from_json(lm.state.meta["tokenizer"]));
      }
      return *tok;
    };
    // A context's ids, its <image> expanded for a LLaVA model. AR needs at least one context token: an
    // empty context starts from end-of-document.
    auto context_ids = [&](const std::string& text, const std::string& image) {
      std::vector<int32_t> ids = llava.encode(tokenizer(), text, image, "evaluate");
      if (!lm.diffusion && ids.empty()) ids.push_back(lm.eod);
      return ids;
    };

    if (!f.get_string("answer").empty()) {
      did = true;
      Timer t;
      std::vector<int32_t> seq = context_ids(f.get_string("prompt"), f.get_string("image"));
      const SequenceInputs inputs = llava.sequence_inputs(llava.count() - 1);
      const int64_t begin = static_cast<int64_t>(seq.size());
      const std::vector<int32_t> ans = tokenizer().encode(f.get_string("answer"));
      MEGADLM_CHECK(!ans.empty(), "--answer encodes to no tokens");
      seq.insert(seq.end(), ans.begin(), ans.end());
      nlohmann::json c = {{"prompt", f.get_string("prompt")}, {"answer", f.get_string("answer")},
                          {"answer_tokens", ans.size()}};
      if (f.given("image")) c["image"] = f.get_string("image");
      if (lm.diffusion) {
        const MCEstimate e = diffusion_nll(model, seq, begin, dopt, 0, inputs);
        c["log_likelihood_bound"] = -e.mean;
        c["se"] = e.se;
        c["mc_samples"] = e.samples;
        c["cfg_scale"] = dopt.cfg_scale;
      } else {
        c["log_likelihood"] = ar_log_likelihood(model, seq, begin, inputs);
      }
      c["seconds"] = t.seconds();
      res["conditional"] = c;
    }

    if (!f.get_string("choices-file").empty()) {
      did = true;
      Timer t;
      const std::string path = f.get_string("choices-file");
      std::ifstream in = open_input_file(path, "--choices-file", false);
      std::vector<ChoiceItem> items;
      std::string line;
      int64_t ln = 0;
      while (std::getline(in, line)) {
        ++ln;
        if (line.empty()) continue;
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          fail(path, ":", ln, ": invalid JSON (", e.what(), ")");
        }
        MEGADLM_CHECK(j.contains("context") && j["context"].is_string() && j.contains("choices") &&
                       j["choices"].is_array() && j.contains("label") && j["label"].is_number_integer(),
                      path, ":", ln, ": needs a string \"context\", an array \"choices\" and an integer \"label\"");
        MEGADLM_CHECK(!j.contains("image") || j["image"].is_string(), path, ":", ln, ": \"image\" is not a path");
        ChoiceItem it;
        it.context = context_ids(j["context"].get<std::string>(), j.value("image", std::string()));
        it.inputs = llava.sequence_inputs(llava.count() - 1);
        for (const auto& c : j["choices"]) {
          MEGADLM_CHECK(c.is_string(), path, ":", ln, ": choices must be strings");
          it.choices.push_back(tokenizer().encode(c.get<std::string>()));
        }
        it.label = j["label"].get<int64_t>();
        items.push_back(std::move(it));
      }
      const ChoiceResults r = score_multiple_choice(model, lm.diffusion, items, dopt);
      nlohmann::json m = {{"file", path}, {"items", items.size()}, {"accuracy", r.accuracy},
                          {"accuracy_per_token", r.accuracy_norm}, {"predictions", r.predictions}};
      if (lm.diffusion) {
        m["mc_samples"] = dopt.mc_samples;
        m["cfg_scale"] = dopt.cfg_scale;
      }
      m["seconds"] = t.seconds();
      res["multiple_choice"] = m;
    }
    MEGADLM_CHECK(did, "nothing to evaluate: give --data-path, --choices-file or --answer");
    res["seconds"] = total.seconds();
    print_report(f, res);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "evaluate: error: %s\n", e.what());
    return 1;
  }
}
