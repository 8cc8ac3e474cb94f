// Fuzz target: pretrain_difflm's argument parser (train/arguments.h, core/cli_flags.h).
//
// Input: the command line after the program name, split into argv words at NUL bytes and ASCII
// whitespace (empty words dropped). parse_train_args must either fill TrainArgs or throw an Error;
// an accepted parse must satisfy the invariants the trainer relies on.
#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/arguments.h"

using namespace megadlm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words{"pretrain_difflm"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  if (words.size() > 256) return 0;  // nothing new past a few hundred flags, only slower runs
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  argv.push_back(nullptr);

  TrainArgs a;
  bool parsed = false;
  try {
    parsed = parse_train_args(static_cast<int>(words.size()), argv.data(), a);
  } catch (const Error&) {
    return 0;
  }
  if (!parsed) return 0;  // --help
  const TransformerConfig& m = a.model;
  FUZZ_REQUIRE(m.num_attention_heads > 0 && m.num_query_groups > 0 &&
                   m.num_attention_heads % m.num_query_groups == 0,
               "heads and query groups");
  FUZZ_REQUIRE(a.seq_length >= 2 && m.max_position_embeddings >= a.seq_length, "sequence length");
  FUZZ_REQUIRE(a.micro_batch_size >= 1 && a.global_batch_size % a.micro_batch_size == 0, "batch sizes");
  FUZZ_REQUIRE(a.train_iters >= 1 && a.make_vocab_size_divisible_by >= 1 && a.log_interval >= 1, "counts");
  FUZZ_REQUIRE(!a.data_path.empty() || !a.train_data_path.empty(), "training data");
  return 0;
}
