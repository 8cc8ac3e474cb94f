#include "infer/family_eval.h"

#include <cmath>
#include <memory>

#include "checkpoint/family_info.h"
#include "core/error.h"
#include "data/bert_dataset.h"
#include "data/t5_dataset.h"
#include "data/indexed_dataset.h"
#include "models/bert_model.h"
#include "tokenizers/tokenizer.h"
#include "train/bert_eval.h"
#include "train/family_data.h"
#include "train/t5_eval.h"

namespace megadlm {

namespace {

std::unique_ptr<Tokenizer> checkpoint_tokenizer(const std::string& dir, const nlohmann::json& meta) {
  MEGADLM_CHECK(meta.contains("tokenizer"), dir, "/state.json: no tokenizer recorded");
  return make_tokenizer(TokenizerSpec::from_json(meta["tokenizer"]));
}

// The validation documents of --split, as the trainers split them.
SequenceRange valid_documents(const IndexedDataset& data, const FamilyEvalOptions& opt) {
  const auto ranges = split_ranges(opt.split, data.num_documents());
  MEGADLM_CHECK(ranges[1].has_value(), "--split ", opt.split, ": the validation split of ", opt.data_path,
                " is empty (evaluate scores the validation documents)");
  return *ranges[1];
}

// The samples' settings as the run recorded them, --seed and --mask-prob taking precedence.
FamilySampling sampling_of(const FamilyEvalOptions& opt, const nlohmann::json& meta, int64_t seq_length,
                           int64_t decoder_seq_length) {
  FamilySampling s;
  s.seq_length = seq_length;
  s.decoder_seq_length = decoder_seq_length;
  s.seed = opt.seed ? *opt.seed : meta.value("seed", s.seed);
  s.mask_prob = opt.mask_prob ? *opt.mask_prob : meta.value("mask_prob", s.mask_prob);
  s.short_seq_prob = meta.value("short_seq_prob", s.short_seq_prob);
  return s;
}

}  // namespace

nlohmann::json evaluate_bert_checkpoint(const std::string& dir, const CheckpointState& state,
                                        const FamilyEvalOptions& opt) {
  const nlohmann::json& meta = state.meta;
  const HfBertInfo info = bert_info_of(meta, dir + "/state.json");
  MEGADLM_CHECK(meta.contains("seq_length"), dir, "/state.json: no seq_length recorded (BERT's samples need it)");
  const auto tok = checkpoint_tokenizer(dir, meta);
  BertModel model(info.config, bert_model_spec(info.config, info.options), ParallelContext::single());
  load_checkpoint_tensors(dir, model.params(), nullptr);

  auto data = std::make_shared<const IndexedDataset>(opt.data_path, tok->vocab_size());
  const BertDatasetConfig c =
      bert_dataset_config(sampling_of(opt, meta, meta["seq_length"].get<int64_t>(), 0), info.options.binary_head,
                          bert_tokens_of(*tok), opt.samples);
  const BertDataset valid(data, valid_documents(*data, opt), Split::Valid, c);
  MEGADLM_CHECK(valid.size() >= opt.micro_batch_size, opt.data_path, ": ", valid.size(),
                " validation samples, fewer than --micro-batch-size ", opt.micro_batch_size);

  const int64_t B = opt.micro_batch_size;
  const BertEvalResult r = evaluate_bert(model, valid, B, opt.samples / B, info.options.binary_head);
  nlohmann::json d = {{"data_path", opt.data_path}, {"split", opt.split},      {"seq_length", c.seq_length},
                      {"seed", c.seed},             {"mask_prob", c.mask_prob}, {"samples", r.batches * B},
                      {"batches", r.batches},       {"masked_tokens", r.masked_tokens},
                      {"mlm_loss", r.mlm_loss},     {"perplexity", std::exp(r.mlm_loss)},
                      {"mlm_accuracy", r.mlm_accuracy}};
  if (info.options.binary_head) {
    d["sop_loss"] = r.sop_loss;
    d["sop_accuracy"] = r.sop_accuracy;
  }
  return d;
}

nlohmann::json evaluate_t5_checkpoint(const std::string& dir, const CheckpointState& state,
                                      const FamilyEvalOptions& opt) {
  const nlohmann::json& meta = state.meta;
  const HfT5Info info = t5_info_of(meta, dir + "/state.json");
  MEGADLM_CHECK(meta.contains("encoder_seq_length") && meta.contains("decoder_seq_length"), dir,
                "/state.json: no encoder_seq_length / decoder_seq_length recorded (T5's samples need them)");
  const auto tok = checkpoint_tokenizer(dir, meta);
  // The sentinels and [BOS] [EOS] added as training added them: the same ids.
  const T5Tokens tokens = t5_tokens_for(*tok, meta.value("vocab_extra_ids", int64_t{0}));
  T5Model model(info.config, info.options, ParallelContext::single());
  load_checkpoint_tensors(dir, model.params(), nullptr);

  auto data = std::make_shared<const IndexedDataset>(opt.data_path, tok->vocab_size());
  const T5DatasetConfig c = t5_dataset_config(
      sampling_of(opt, meta, meta["encoder_seq_length"].get<int64_t>(), meta["decoder_seq_length"].get<int64_t>()),
      tokens, opt.samples);
  const T5Dataset valid(data, valid_documents(*data, opt), Split::Valid, c);
  MEGADLM_CHECK(valid.size() >= opt.micro_batch_size, opt.data_path, ": ", valid.size(),
                " validation samples, fewer than --micro-batch-size ", opt.micro_batch_size);

  const int64_t B = opt.micro_batch_size;
  const T5EvalResult r = evaluate_t5(model, valid, B, opt.samples / B);
  return {{"data_path", opt.data_path},
          {"split", opt.split},
          {"encoder_seq_length", c.encoder_seq_length},
          {"decoder_seq_length", c.decoder_seq_length},
          {"seed", c.seed},
          {"noise_density", c.noise_density},
          {"samples", r.batches * B},
          {"batches", r.batches},
          {"labelled_tokens", r.labelled_tokens},
          {"loss", r.loss},
          {"perplexity", std::exp(r.loss)}};
}

}  // namespace megadlm
