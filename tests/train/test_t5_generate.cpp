// generate --load of a t5 checkpoint, end to end: a tiny T5 trained in process (family_runs.h's
// t5_flags, 40 steps, in each test) and its checkpoint decoded by the generate binary from prompts that hold a
// sentinel: the jsonl output, the stdout form, --no-kv-cache giving the cached run's text, batches of
// another size giving the same text, a seed reproducing a sample; the flags that do not apply to T5 and
// impossible values are exit 1 naming the flag.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bert_corpus.h"
#include "family_runs.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "train/t5_trainer.h"
#include "train_fixture.h"

using namespace megadlm;
using test::plus;

namespace {

// Each test's 40-step run (a fraction of a second) and its checkpoint directory.
struct T5Generate : ::testing::Test {
  test::TempDir dir;
  test::TempDir* tmp = &dir;
  std::string run = dir / "run";
  void SetUp() override {
    const std::string vocab = test::write_bert_vocab(dir.str()), data = test::write_ordered_corpus(dir.str(), 300);
    T5Trainer t(test::parse_flags(plus(plus({"pretrain_difflm"}, test::t5_flags(data, vocab)),
                                       {"--train-iters", "40", "--save", run})));
    t.run();
  }
};

const std::vector<std::string> kPrompts = {"w5 w5 w6 <extra_id_0> w5 w7 w5", "w9 w9 <extra_id_0> w9 w10 w9 w9 w11 w9",
                                           "w13 w13 w14 w13 <extra_id_0>"};

// generate's jsonl lines for `args` (exit 0 expected).
std::vector<nlohmann::json> generate_lines(const std::vector<std::string>& args, const std::string& dir) {
  const std::string out = dir + "/out.jsonl";
  const auto r = test::run_binary("generate", plus(args, {"--output", out}), dir + "/log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<std::string> texts(const std::vector<nlohmann::json>& lines) {
  std::vector<std::string> t;
  for (const auto& j : lines) t.push_back(j.at("generation").get<std::string>());
  return t;
}

std::vector<std::string> prompt_flags() {
  std::vector<std::string> f;
  for (const auto& p : kPrompts) f.insert(f.end(), {"--prompt", p});
  return f;
}

}  // namespace

TEST_F(T5Generate, DecodesTheEncodersPromptsToText) {
  MEGADLM_REQUIRE_BINARY("generate");
  const std::vector<std::string> base = plus({"--load", run, "--max-new-tokens", "8"}, prompt_flags());
  const auto lines = generate_lines(base, tmp->str());
  ASSERT_EQ(lines.size(), kPrompts.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["prompt"], kPrompts[i]);
    const int64_t n = lines[i]["tokens"].get<int64_t>();
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 8);
    EXPECT_FALSE(lines[i]["generation"].get<std::string>().empty());
    EXPECT_FALSE(lines[i].contains("denoising_steps"));
  }
  // The trained decoder starts a span-corruption target with the first sentinel, kept as its text.
  EXPECT_EQ(lines[0]["generation"].get<std::string>().rfind("<extra_id_0>", 0), 0u) << lines[0].dump();
  const std::vector<std::string> greedy = texts(lines);
  for (size_t i = 0; i < greedy.size(); ++i) std::printf("%s -> %s\n", kPrompts[i].c_str(), greedy[i].c_str());
  // The reference without the cache, and other batch sizes (one padded encoder batch or none): the same.
  EXPECT_EQ(texts(generate_lines(plus(base, {"--no-kv-cache"}), tmp->str())), greedy);
  EXPECT_EQ(texts(generate_lines(plus(base, {"--batch-size", "1"}), tmp->str())), greedy);
  EXPECT_EQ(texts(generate_lines(plus(base, {"--batch-size", "2"}), tmp->str())), greedy);
  // A prompt file, one line per prompt, and the stdout form.
  {
    std::ofstream pf(*tmp / "prompts.jsonl");
    for (const auto& p : kPrompts) pf << nlohmann::json{{"prompt", p}}.dump() << "\n";
  }
  EXPECT_EQ(texts(generate_lines({"--load", run, "--max-new-tokens", "8", "--prompt-file", *tmp / "prompts.jsonl"},
                                 tmp->str())),
            greedy);
  const auto r = test::run_binary("generate", {"--load", run, "--max-new-tokens", "8", "--prompt", kPrompts[0]},
                                  *tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("=== prompt: " + kPrompts[0] + "\n" + greedy[0] + "\n"), std::string::npos) << r.output;
}

TEST_F(T5Generate, ASeedReproducesASample) {
  MEGADLM_REQUIRE_BINARY("generate");
  const std::vector<std::string> base =
      plus({"--load", run, "--max-new-tokens", "8", "--temperature", "1.5", "--top-p", "0.95"}, prompt_flags());
  const auto a = texts(generate_lines(plus(base, {"--seed", "3"}), tmp->str()));
  EXPECT_EQ(texts(generate_lines(plus(base, {"--seed", "3"}), tmp->str())), a);
  EXPECT_EQ(texts(generate_lines(plus(base, {"--seed", "3", "--no-kv-cache"}), tmp->str())), a);
  EXPECT_NE(texts(generate_lines(plus(base, {"--seed", "4"}), tmp->str())), a);
  // top-k 1 leaves the argmax: greedy's text at any temperature.
  EXPECT_EQ(texts(generate_lines(plus(base, {"--seed", "3", "--top-k", "1"}), tmp->str())),
            texts(generate_lines(plus({"--load", run, "--max-new-tokens", "8"}, prompt_flags()), tmp->str())));
}

TEST_F(T5Generate, FlagsThatDoNotApplyAreRefusedByName) {
  MEGADLM_REQUIRE_BINARY("generate");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--gen-length", "8"}, "--gen-length does not apply to a t5 checkpoint"},
      {{"--steps", "8"}, "--steps does not apply to a t5 checkpoint"},
      {{"--sampler", "mdlm"}, "--sampler does not apply to a t5 checkpoint"},
      {{"--cfg-scale", "1"}, "--cfg-scale does not apply to a t5 checkpoint"},
      {{"--image", "x.png"}, "--image does not apply to a t5 checkpoint"},
      {{"--device", "cuda"}, "--device cuda: "},  // no CUDA backend, no GPU, or: a t5 checkpoint runs on the CPU
      {{"--max-new-tokens", "0"}, "--max-new-tokens 0: a t5 checkpoint generates one token at least"},
      {{"--top-p", "1.5"}, "--top-p"},
      {{"--temperature", "-1"}, "--temperature"}};
  for (const auto& [extra, part] : cases) {
    const auto r = test::run_binary("generate", plus({"--load", run, "--prompt", kPrompts[0]}, extra), *tmp / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(part), std::string::npos) << extra[0] << ": " << r.output;
  }
  auto r = test::run_binary("generate", {"--load", run}, *tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("a t5 checkpoint needs --prompt or --prompt-file"), std::string::npos) << r.output;
  r = test::run_binary("generate", {"--load", run, "--prompt", ""}, *tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("prompt 0 encodes to no tokens"), std::string::npos) << r.output;
}
