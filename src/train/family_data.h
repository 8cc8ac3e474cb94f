#pragma once
// The datasets BertTrainer reads, as free functions: the trainer and inspect_data's --bert-samples
// build them by the same code, so the samples written for a reference model are the ones a run of
// the same flags consumes (tools/reference/bert_side_by_side.py, docs/bert.md).
#include <cstdint>
#include <memory>
#include <vector>

#include "data/bert_dataset.h"
#include "data/indexed_dataset.h"
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

// BertDataset's settings from the flags (--seq-length, --seed, --mask-prob, --short-seq-prob, the
// binary head) for num_samples samples.
BertDatasetConfig bert_dataset_config(const TrainArgs& args, const BertTokens& tokens, int64_t num_samples);

// The train split's BertDataset of a run with these flags (the trainer's construction).
std::unique_ptr<BertDataset> bert_train_dataset(const TrainArgs& args, const Tokenizer& tok);

}  // namespace megadlm
