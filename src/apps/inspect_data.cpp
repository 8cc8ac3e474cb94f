// inspect_data: what is in Megatron .bin/.idx datasets (as Megatron's count_tokens), and what the
// trainer will see:
//   inspect_data --data-path data/corpus_text_document            documents, sequences, tokens
//   inspect_data --data-path data/corpus_text_document --sample 3 --seq-length 1024
//                                                                 GPTDataset sample 3, decoded with
//                                                                 the tokenizer of the sidecar
//   inspect_data --data-path data/corpus_text_document --document 0   one document, decoded
//   inspect_data --bert-samples samples.jsonl -- <pretrain_difflm --model-type bert flags>
//                                                                 the BertDataset samples that run
//                                                                 consumes, in order, one a line
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/cli_flags.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "train/data_setup.h"
#include "train/family_data.h"

using namespace megadlm;

namespace {

bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

void print_ids_and_text(const std::vector<int32_t>& ids, const Tokenizer* tok) {
  std::printf("ids (%zu):", ids.size());
  for (int32_t id : ids) std::printf(" %d", id);
  std::printf("\n");
  if (tok) std::printf("text:\n%s\n", tok->decode(ids).c_str());
}

std::unique_ptr<Tokenizer> sidecar_tokenizer(const std::string& prefix) {
  try {
    return make_tokenizer(read_data_sidecar(prefix).spec);
  } catch (const Error& e) {
    std::fprintf(stderr, "inspect_data: no decoding: %s\n", e.what());
    return nullptr;
  }
}

// The samples a single-process run of `train` (pretrain_difflm's argv) consumes, in order: sample i of
// the run is sample i (modulo its size) of the train split's BertDataset, built as BertTrainer builds
// it. One JSON object a line: index, tokens, token_types, labels (-1 = not masked), padding_mask (1 on
// tokens), is_random (the sentence-order label).
void write_bert_samples(const std::vector<std::string>& train, const std::string& path) {
  std::vector<const char*> argv;
  for (const std::string& a : train) argv.push_back(a.c_str());
  TrainArgs args;
  MEGADLM_CHECK(parse_train_args(static_cast<int>(argv.size()), argv.data(), args),
                "--bert-samples: --help among the pretrain_difflm flags");
  MEGADLM_CHECK(args.model_type == ModelType::BERT, "--bert-samples needs the flags of a --model-type bert run after --");
  const auto tok = make_tokenizer(resolve_tokenizer_spec(args));
  check_data_tokenizers(args, *tok);
  const auto data = bert_train_dataset(args, *tok);
  std::ofstream out(path);
  MEGADLM_CHECK(out.good(), "--bert-samples: cannot write ", path);
  const int64_t n = args.train_iters * args.global_batch_size;
  BertSample s;
  for (int64_t i = 0; i < n; ++i) {
    data->sample(i % data->size(), s);
    nlohmann::json j = {{"index", i}, {"tokens", s.tokens}, {"token_types", s.token_types}, {"labels", s.labels},
                        {"padding_mask", s.padding_mask}, {"is_random", s.is_random}};
    out << j.dump() << "\n";
  }
  out.flush();
  MEGADLM_CHECK(out.good(), "--bert-samples: writing ", path, " failed");
  std::printf("%s: %lld samples of seq_length %lld (%lld in the train split's dataset)\n", path.c_str(),
              static_cast<long long>(n), static_cast<long long>(args.seq_length), static_cast<long long>(data->size()));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // After `--`: the pretrain_difflm flags whose samples --bert-samples writes.
    std::vector<std::string> own, train = {"pretrain_difflm"};
    bool after_dashes = false;
    for (int i = 0; i < argc; ++i) {
      if (!after_dashes && std::string(argv[i]) == "--") after_dashes = true;
      else (after_dashes ? train : own).push_back(argv[i]);
    }
    CliFlags flags("inspect_data", "Counts documents and tokens of Megatron .bin/.idx datasets; decodes samples.");
    flags.add_list("data-path", {}, "dataset prefixes (weights, as in --data-path W1 P1 ..., are skipped)");
    flags.add_string("bert-samples", "", "write the BertDataset samples of the pretrain_difflm flags after -- to this .jsonl");
    flags.add_int("sample", -1, "decode this GPTDataset sample of the first prefix", at_least(0));
    flags.add_int("seq-length", 0, "sequence length for --sample", at_least(0));
    flags.add_int("seed", 1234, "shuffle seed for --sample");
    flags.add_string("split", "1", "train,valid,test weights for --sample (the train part is shown)");
    flags.add_int("document", -1, "decode this document of the first prefix", at_least(0));
    flags.parse(std::vector<std::string>(own.begin() + 1, own.end()));
    if (flags.help_requested()) {
      std::fputs(flags.help().c_str(), stdout);
      return 0;
    }
    if (!flags.get_string("bert-samples").empty()) {
      write_bert_samples(train, flags.get_string("bert-samples"));
      return 0;
    }
    MEGADLM_CHECK(after_dashes == false, "flags after -- need --bert-samples");
    std::vector<std::string> prefixes;
    for (const std::string& t : flags.get_list("data-path"))
      if (!is_number(t)) prefixes.push_back(t);
    MEGADLM_CHECK(!prefixes.empty(), "--data-path holds no dataset prefix (or is missing)");

    int64_t all_docs = 0, all_tokens = 0;
    for (const std::string& p : prefixes) {
      const IndexedDataset d(p);
      int64_t lo = 0, hi = 0;
      for (int64_t s = 0; s < d.num_sequences(); ++s) {
        const int64_t l = d.sequence_length(s);
        lo = s == 0 ? l : std::min(lo, l);
        hi = std::max(hi, l);
      }
      std::printf("%s: %s, %lld documents, %lld sequences, %lld tokens (sequence length min %lld, mean %.1f, max %lld)\n",
                  p.c_str(), index_dtype_name(d.dtype()), static_cast<long long>(d.num_documents()),
                  static_cast<long long>(d.num_sequences()), static_cast<long long>(d.total_tokens()),
                  static_cast<long long>(lo),
                  d.num_sequences() ? static_cast<double>(d.total_tokens()) / static_cast<double>(d.num_sequences()) : 0.0,
                  static_cast<long long>(hi));
      all_docs += d.num_documents();
      all_tokens += d.total_tokens();
    }
    if (prefixes.size() > 1)
      std::printf("total: %lld documents, %lld tokens\n", static_cast<long long>(all_docs),
                  static_cast<long long>(all_tokens));

    const int64_t doc = flags.get_int("document");
    if (doc >= 0) {
      const IndexedDataset d(prefixes[0]);
      MEGADLM_CHECK(doc < d.num_documents(), "--document ", doc, " is beyond the ", d.num_documents(), " documents");
      std::vector<int32_t> ids;
      for (int64_t s = d.document_index(doc); s < d.document_index(doc + 1); ++s) {
        const std::vector<int32_t> part = d.get(s);
        ids.insert(ids.end(), part.begin(), part.end());
      }
      std::printf("document %lld of %s:\n", static_cast<long long>(doc), prefixes[0].c_str());
      const auto tok = sidecar_tokenizer(prefixes[0]);
      print_ids_and_text(ids, tok.get());
    }

    const int64_t sample = flags.get_int("sample");
    if (sample >= 0) {
      const int64_t T = flags.get_int("seq-length");
      MEGADLM_CHECK(T >= 1, "--sample needs --seq-length");
      auto data = std::make_shared<const IndexedDataset>(prefixes[0]);
      const auto ranges = split_ranges(flags.get_string("split"), data->num_sequences());
      MEGADLM_CHECK(ranges[0].has_value(), "--split ", flags.get_string("split"), " leaves no train split");
      GPTDatasetConfig c;
      c.seq_length = T;
      c.seed = static_cast<uint64_t>(flags.get_int("seed"));
      const GPTDataset ds(data, *ranges[0], Split::Train, c);
      MEGADLM_CHECK(sample < ds.size(), "--sample ", sample, " is beyond the ", ds.size(), " samples of one epoch");
      std::vector<int32_t> ids(static_cast<size_t>(T + 1));
      ds.sample(sample, ids.data());
      std::printf("sample %lld of %lld (seq_length %lld, seed %lld; tokens [0, T) are the input, [1, T] the labels):\n",
                  static_cast<long long>(sample), static_cast<long long>(ds.size()), static_cast<long long>(T),
                  static_cast<long long>(c.seed));
      const auto tok = sidecar_tokenizer(prefixes[0]);
      print_ids_and_text(ids, tok.get());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "inspect_data: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inspect_data: internal error: %s\n", e.what());
    return 2;
  }
}
