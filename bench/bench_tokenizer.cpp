// GPT-2 tokenizer throughput on a .jsonl corpus (default: the Brown corpus), ours only; the HuggingFace
// side is tools/bench_tokenizer_hf.py, and bench/run_tokenizer_bench.sh runs both and prints the table
// with ratios.
//
// "cold": each pass builds a fresh tokenizer, so it starts with empty word caches (the comparison with
// `tokenizers`, whose script does the same); "warm": passes reuse one tokenizer whose caches already
// hold the corpus's frequent pieces. Each row is the best of --repeats passes over every document; with
// t threads the documents are split over OpenMP threads (dynamic schedule).
//
// Usage: bench_tokenizer [--input brown.jsonl] [--key text] [--vocab-file vocab.json]
//                        [--merge-file merges.txt] [--threads 1,2] [--repeats 3]
// Prints a table and one "RESULT ours-<cache> <threads> <seconds> <tokens> <bytes>" line per row.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/gpt2_bpe_tokenizer.h"

using namespace megadlm;

int main(int argc, char** argv) {
  try {
    std::string input = "../shared/data/brown.jsonl", key = "text";
    std::string vocab = "../shared/tokenizers/gpt2/vocab.json", merges = "../shared/tokenizers/gpt2/merges.txt";
    std::vector<int> threads{1, 2};
    int repeats = 3;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      MEGADLM_CHECK(i + 1 < argc, "flag ", a, " needs a value");
      const std::string v = argv[++i];
      if (a == "--input") input = v;
      else if (a == "--key") key = v;
      else if (a == "--vocab-file") vocab = v;
      else if (a == "--merge-file") merges = v;
      else if (a == "--repeats") repeats = std::max(1, std::atoi(v.c_str()));
      else if (a == "--threads") {
        threads.clear();
        for (size_t p = 0; p < v.size();) {
          size_t c = v.find(',', p);
          if (c == std::string::npos) c = v.size();
          threads.push_back(std::max(1, std::atoi(v.substr(p, c - p).c_str())));
          p = c + 1;
        }
      } else {
        fail("unknown flag ", a);
      }
    }

    std::vector<std::string> docs;
    std::ifstream in(input);
    MEGADLM_CHECK(in.good(), "cannot open ", input);
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      docs.push_back(nlohmann::json::parse(line).at(key).get<std::string>());
      bytes += docs.back().size();
    }
    TokenizerSpec spec;
    spec.type = "GPT2BPETokenizer";
    spec.vocab_file = vocab;
    spec.merge_file = merges;

    std::printf("GPT-2 BPE encode, %zu documents, %.2f MB, best of %d passes\n", docs.size(), bytes / 1e6, repeats);
    std::printf("%-10s %8s %10s %12s %10s %10s\n", "impl", "threads", "seconds", "tokens", "Mtok/s", "MB/s");
    for (const bool warm : {false, true}) {
      for (int t : threads) {
        double best = 1e30;
        size_t tokens = 0;
        std::vector<std::vector<int32_t>> ids(docs.size());
        auto shared = std::make_unique<GPT2BPETokenizer>(spec);
        for (int r = 0; r < repeats + (warm ? 1 : 0); ++r) {  // warm: one untimed pass fills the caches
          if (!warm) shared = std::make_unique<GPT2BPETokenizer>(spec);
          const GPT2BPETokenizer& tok = *shared;
          for (auto& v : ids) std::vector<int32_t>().swap(v);
          const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(t) schedule(dynamic, 4)
          for (int64_t d = 0; d < static_cast<int64_t>(docs.size()); ++d) tok.encode(docs[d], ids[d]);
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (!warm || r > 0) best = std::min(best, s);
          tokens = 0;
          for (const auto& v : ids) tokens += v.size();
        }
        const std::string name = warm ? "ours-warm" : "ours-cold";
        std::printf("%-10s %8d %10.4f %12zu %10.3f %10.2f\n", name.c_str(), t, best, tokens, tokens / best / 1e6,
                    bytes / best / 1e6);
        std::printf("RESULT %s %d %.6f %zu %zu\n", name.c_str(), t, best, tokens, bytes);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
