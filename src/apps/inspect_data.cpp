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
//   inspect_data --t5-samples samples.jsonl -- <pretrain_difflm --model-type t5 flags>
//                                                                 the same for T5Dataset's samples
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

// A run's flags (after `--`, as pretrain_difflm reads them) and its tokenizer, checked against the data's.
struct Run {
  TrainArgs args;
  std::unique_ptr<Tokenizer> tok;
  int64_t samples() const { return args.train_iters * args.global_batch_size; }
};

// `flag` (--bert-samples, --t5-samples) needs a run of model type `type` (--model-type `type_name`).
Run run_of(const std::vector<std::string>& train, const std::string& flag, ModelType type, const char* type_name) {
  std::vector<const char*> argv;
  for (const std::string& a : train) argv.push_back(a.c_str());
  Run r;
  MEGADLM_CHECK(parse_train_args(static_cast<int>(argv.size()), argv.data(), r.args),
                flag, ": --help among the pretrain_difflm flags");
  MEGADLM_CHECK(r.args.model_type == type, flag, " needs the flags of a --model-type ", type_name, " run after --");
  r.tok = make_tokenizer(resolve_tokenizer_spec(r.args));
  check_data_tokenizers(r.args, *r.tok);
  return r;
}

// The first n samples a single-process run consumes, one JSON object a line: sample i of the run is
// sample i (modulo its size) of the train split's `data`, to_json(sample) with its "index" i. `flag`
// names the write errors.
template <class Sample, class Dataset, class ToJson>
void write_samples(const std::string& path, const std::string& flag, int64_t n, const Dataset& data,
                   const ToJson& to_json) {
  std::ofstream out(path);
  MEGADLM_CHECK(out.good(), flag, ": cannot write ", path);
  Sample s;
  for (int64_t i = 0; i < n; ++i) {
    data.sample(i % data.size(), s);
    nlohmann::json j = to_json(s);
    j["index"] = i;
    out << j.dump() << "\n";
  }
  out.flush();
  MEGADLM_CHECK(out.good(), flag, ": writing ", path, " failed");
}

// The samples of the train split's BertDataset, built as BertTrainer builds it: tokens, token_types,
// labels (-1 = not masked), padding_mask (1 on tokens), is_random (the sentence-order label).
void write_bert_samples(const std::vector<std::string>& train, const std::string& path) {
  const Run run = run_of(train, "--bert-samples", ModelType::BERT, "bert");
  const auto data = bert_train_dataset(run.args, *run.tok);
  write_samples<BertSample>(path, "--bert-samples", run.samples(), *data, [](const BertSample& s) {
    return nlohmann::json{{"tokens", s.tokens},         {"token_types", s.token_types}, {"labels", s.labels},
                          {"padding_mask", s.padding_mask}, {"is_random", s.is_random}};
  });
  std::printf("%s: %lld samples of seq_length %lld (%lld in the train split's dataset)\n", path.c_str(),
              static_cast<long long>(run.samples()), static_cast<long long>(run.args.seq_length),
              static_cast<long long>(data->size()));
}

// The samples of the train split's T5Dataset, built as T5Trainer builds it (the tokenizer with T5's
// [BOS], [EOS] and sentinels added): encoder_tokens and encoder_padding_mask [S], decoder_input,
// decoder_labels (-1 on padding), loss_mask and decoder_padding_mask [T] -- S --encoder-seq-length,
// T --decoder-seq-length. The trainer's batch labels a decoder row where loss_mask is 1.
void write_t5_samples(const std::vector<std::string>& train, const std::string& path) {
  const Run run = run_of(train, "--t5-samples", ModelType::T5, "t5");
  const auto data = t5_train_dataset(run.args, *run.tok);
  write_samples<T5Sample>(path, "--t5-samples", run.samples(), *data, [](const T5Sample& s) {
    return nlohmann::json{{"encoder_tokens", s.encoder_tokens}, {"encoder_padding_mask", s.encoder_padding_mask},
                          {"decoder_input", s.decoder_input},   {"decoder_labels", s.decoder_labels},
                          {"loss_mask", s.loss_mask},           {"decoder_padding_mask", s.decoder_padding_mask}};
  });
  std::printf("%s: %lld samples of encoder %lld + decoder %lld tokens, vocabulary %lld (%lld in the train "
              "split's dataset)\n",
              path.c_str(), static_cast<long long>(run.samples()), static_cast<long long>(run.args.t5.encoder_seq_length),
              static_cast<long long>(run.args.t5.decoder_seq_length), static_cast<long long>(run.tok->vocab_size()),
              static_cast<long long>(data->size()));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // After `--`: the pretrain_difflm flags whose samples --bert-samples or --t5-samples writes.
    std::vector<std::string> own, train = {"pretrain_difflm"};
    bool after_dashes = false;
    for (int i = 0; i < argc; ++i) {
      if (!after_dashes && std::string(argv[i]) == "--") after_dashes = true;
      else (after_dashes ? train : own).push_back(argv[i]);
    }
    CliFlags flags("inspect_data", "Counts documents and tokens of Megatron .bin/.idx datasets; decodes samples.");
    flags.add_list("data-path", {}, "dataset prefixes (weights, as in --data-path W1 P1 ..., are skipped)");
    flags.add_string("bert-samples", "", "write the BertDataset samples of the pretrain_difflm flags after -- to this .jsonl");
    flags.add_string("t5-samples", "", "write the T5Dataset samples of the pretrain_difflm flags after -- to this .jsonl");
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
    const std::string bert = flags.get_string("bert-samples"), t5 = flags.get_string("t5-samples");
    MEGADLM_CHECK(bert.empty() || t5.empty(), "--bert-samples and --t5-samples: one at a time (one run's flags follow --)");
    if (!bert.empty()) {
      write_bert_samples(train, bert);
      return 0;
    }
    if (!t5.empty()) {
      write_t5_samples(train, t5);
      return 0;
    }
    MEGADLM_CHECK(after_dashes == false, "flags after -- need --bert-samples or --t5-samples");
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
