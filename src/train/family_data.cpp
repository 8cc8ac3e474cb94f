#include "train/family_data.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "data/gpt_dataset.h"

namespace megadlm {

std::vector<FamilySplit> family_splits(const TrainArgs& args, int64_t num_documents) {
  const auto ranges = split_ranges(args.split, num_documents);
  MEGADLM_CHECK(ranges[0].has_value(), "--split ", args.split, ": the train split is empty");
  std::vector<FamilySplit> out{{Split::Train, *ranges[0], args.train_iters * args.global_batch_size}};
  if (ranges[1] && args.eval_iters > 0 && args.eval_interval > 0)
    out.push_back({Split::Valid, *ranges[1], args.eval_iters * args.micro_batch_size});
  return out;
}

BertTokens bert_tokens_for(const Tokenizer& tok) {
  try {
    return bert_tokens_of(tok);
  } catch (const Error& e) {
    fail("--tokenizer-type ", tok.spec().type, ": --model-type bert needs BERT's WordPiece tokenizer ",
         "(BertWordPieceLowerCase or BertWordPieceCase with --vocab-file): ", e.what());
  }
}

BertDatasetConfig bert_dataset_config(const FamilySampling& s, bool binary_head, const BertTokens& tokens,
                                      int64_t num_samples) {
  BertDatasetConfig c;
  c.seq_length = s.seq_length;
  c.num_samples = num_samples;
  c.seed = s.seed;
  c.mask_prob = s.mask_prob;
  c.short_seq_prob = s.short_seq_prob;
  c.binary_head = binary_head;
  c.tokens = tokens;
  return c;
}

BertDatasetConfig bert_dataset_config(const TrainArgs& args, const BertTokens& tokens, int64_t num_samples) {
  const FamilySampling s{args.seq_length, 0, args.seed, args.mask_prob, args.short_seq_prob};
  return bert_dataset_config(s, args.bert_binary_head, tokens, num_samples);
}

namespace {

// The --data-path prefix (its ids checked against a vocabulary of vocab_size) and its train split.
std::pair<std::shared_ptr<const IndexedDataset>, FamilySplit> train_split(const TrainArgs& args, int64_t vocab_size) {
  auto data = std::make_shared<const IndexedDataset>(args.data_path.at(0), vocab_size);
  const FamilySplit train = family_splits(args, data->num_documents())[0];
  return {std::move(data), train};
}

}  // namespace

std::unique_ptr<BertDataset> bert_train_dataset(const TrainArgs& args, const Tokenizer& tok) {
  auto [data, train] = train_split(args, tok.vocab_size());
  return std::make_unique<BertDataset>(std::move(data), train.documents, train.split,
                                       bert_dataset_config(args, bert_tokens_for(tok), train.num_samples));
}

T5Tokens t5_tokens_for(Tokenizer& tok, int64_t extra_ids) {
  T5Tokens t;
  t.pad = tok.token_to_id("[PAD]");
  if (t.pad < 0) t.pad = tok.token_to_id("<pad>");
  MEGADLM_CHECK(t.pad >= 0, "--tokenizer-type ", tok.spec().type, ": --model-type t5 needs a padding token ([PAD] ",
                "or <pad>; BertWordPieceLowerCase and BertWordPieceCase have one)");
  auto existing_or_added = [&](const char* a, const char* b) {
    const int32_t id = tok.token_to_id(b);
    return id >= 0 ? id : tok.add_special_token(a);
  };
  t.bos = existing_or_added("[BOS]", "<s>");
  t.eos = existing_or_added("[EOS]", "</s>");
  for (int64_t i = 0; i < extra_ids; ++i) t.sentinels.push_back(tok.add_special_token("<extra_id_" + std::to_string(i) + ">"));
  return t;
}

T5DatasetConfig t5_dataset_config(const FamilySampling& s, const T5Tokens& tokens, int64_t num_samples) {
  T5DatasetConfig c;
  c.encoder_seq_length = s.seq_length;
  c.decoder_seq_length = s.decoder_seq_length;
  c.num_samples = num_samples;
  c.seed = s.seed;
  c.noise_density = s.mask_prob;
  c.short_seq_prob = s.short_seq_prob;
  c.pad = tokens.pad;
  c.bos = tokens.bos;
  c.eos = tokens.eos;
  c.sentinels = tokens.sentinels;
  return c;
}

T5DatasetConfig t5_dataset_config(const TrainArgs& args, const T5Tokens& tokens, int64_t num_samples) {
  const FamilySampling s{args.t5.encoder_seq_length, args.t5.decoder_seq_length, args.seed, args.mask_prob,
                         args.short_seq_prob};
  return t5_dataset_config(s, tokens, num_samples);
}

// The special ids go into the tokenizer before the data's ids are checked against its vocabulary, as
// in T5Trainer.
std::unique_ptr<T5Dataset> t5_train_dataset(const TrainArgs& args, Tokenizer& tok) {
  const T5Tokens tokens = t5_tokens_for(tok, args.t5.vocab_extra_ids);
  auto [data, train] = train_split(args, tok.vocab_size());
  return std::make_unique<T5Dataset>(std::move(data), train.documents, train.split,
                                     t5_dataset_config(args, tokens, train.num_samples));
}

}  // namespace megadlm
