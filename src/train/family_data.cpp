#include "train/family_data.h"

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

BertDatasetConfig bert_dataset_config(const TrainArgs& args, const BertTokens& tokens, int64_t num_samples) {
  BertDatasetConfig c;
  c.seq_length = args.seq_length;
  c.num_samples = num_samples;
  c.seed = args.seed;
  c.mask_prob = args.mask_prob;
  c.short_seq_prob = args.short_seq_prob;
  c.binary_head = args.bert_binary_head;
  c.tokens = tokens;
  return c;
}

std::unique_ptr<BertDataset> bert_train_dataset(const TrainArgs& args, const Tokenizer& tok) {
  auto data = std::make_shared<const IndexedDataset>(args.data_path.at(0), tok.vocab_size());
  const FamilySplit train = family_splits(args, data->num_documents())[0];
  return std::make_unique<BertDataset>(std::move(data), train.documents, train.split,
                                       bert_dataset_config(args, bert_tokens_for(tok), train.num_samples));
}

}  // namespace megadlm
