#pragma once
// The datasets BertTrainer and T5Trainer read, as free functions: the trainers and inspect_data's
// --bert-samples / --t5-samples build them by the same code, so the samples written for a reference
// model are the ones a run of the same flags consumes (tools/reference/bert_side_by_side.py,
// docs/bert.md; tools/reference/t5_side_by_side.py, docs/t5.md).
#include <cstdint>
#include <memory>
#include <vector>

#include "data/bert_dataset.h"
#include "data/indexed_dataset.h"
#include "data/t5_dataset.h"
#include "tokenizers/tokenizer.h"
#include "train/arguments.h"

namespace megadlm {

// One split of the --data-path prefix, by documents as Megatron splits BERT and T5 data.
struct FamilySplit {
  Split split = Split::Train;
  SequenceRange documents;
  int64_t num_samples = 0;  // train: --train-iters global batches; valid: --eval-iters micro-batches
};

// The train split, then the valid split when --split gives one and evaluation is on. An Error names
// --split when the train split is empty.
std::vector<FamilySplit> family_splits(const TrainArgs& args, int64_t num_documents);

// The WordPiece ids BERT's samples need; another tokenizer is an Error naming --tokenizer-type.
BertTokens bert_tokens_for(const Tokenizer& tok);

// What BERT's and T5's samples are drawn with besides the special ids: from the flags when a run trains,
// from the checkpoint's state.json when evaluate scores it (infer/family_eval.h).
struct FamilySampling {
  int64_t seq_length = 0;          // BERT: --seq-length; T5: --encoder-seq-length
  int64_t decoder_seq_length = 0;  // T5: --decoder-seq-length
  uint64_t seed = 1234;
  double mask_prob = 0.15;  // T5: the noise density
  double short_seq_prob = 0.1;
};

// BertDataset's settings for num_samples samples.
BertDatasetConfig bert_dataset_config(const FamilySampling& s, bool binary_head, const BertTokens& tokens,
                                      int64_t num_samples);
// The same from the flags (--seq-length, --seed, --mask-prob, --short-seq-prob, the binary head).
BertDatasetConfig bert_dataset_config(const TrainArgs& args, const BertTokens& tokens, int64_t num_samples);

// The train split's BertDataset of a run with these flags (the trainer's construction).
std::unique_ptr<BertDataset> bert_train_dataset(const TrainArgs& args, const Tokenizer& tok);

// The special ids of T5's samples from `tok` (adding [BOS], [EOS] and the sentinels where absent);
// a tokenizer without a padding token is an Error naming --tokenizer-type.
struct T5Tokens {
  int32_t pad = -1, bos = -1, eos = -1;
  std::vector<int32_t> sentinels;
};
T5Tokens t5_tokens_for(Tokenizer& tok, int64_t extra_ids);

// T5Dataset's settings for num_samples samples (mask_prob is the noise density).
T5DatasetConfig t5_dataset_config(const FamilySampling& s, const T5Tokens& tokens, int64_t num_samples);
// The same from the flags (--encoder-seq-length, --decoder-seq-length, --seed, --mask-prob,
// --short-seq-prob).
T5DatasetConfig t5_dataset_config(const TrainArgs& args, const T5Tokens& tokens, int64_t num_samples);

// The train split's T5Dataset of a run with these flags (the trainer's construction); adds T5's
// special ids to `tok` first, as the trainer does.
std::unique_ptr<T5Dataset> t5_train_dataset(const TrainArgs& args, Tokenizer& tok);

}  // namespace megadlm
