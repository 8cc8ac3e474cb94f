#pragma once
// evaluate's BERT and T5 checkpoints: the model rebuilt from state.json (checkpoint/family_info.h), the
// samples those of training (BertDataset / T5Dataset over the --split's validation documents, with the
// seed and --mask-prob the checkpoint records unless given), scored by the trainers' evaluation
// (train/bert_eval.h, train/t5_eval.h). Each returns the "dataset" JSON of evaluate's report.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"

namespace megadlm {

struct FamilyEvalOptions {
  std::string data_path;             // sentence-split Megatron prefix (preprocess_data --split-sentences)
  std::string split = "969,30,1";    // train,valid,test proportions of the documents; the valid ones are scored
  int64_t samples = 64;              // samples scored (whole micro-batches of them)
  int64_t micro_batch_size = 8;
  std::optional<uint64_t> seed;      // the dataset's seed; default: the checkpoint's
  std::optional<double> mask_prob;   // BERT's mask probability, T5's noise density; default: the checkpoint's
};

// JSON: samples, batches, mlm_loss, perplexity, mlm_accuracy, masked_tokens and, with the binary head,
// sop_loss and sop_accuracy.
nlohmann::json evaluate_bert_checkpoint(const std::string& dir, const CheckpointState& state,
                                        const FamilyEvalOptions& opt);

// JSON: samples, batches, labelled_tokens, loss (the mean CE over the labelled decoder tokens of each
// micro-batch, averaged over them) and perplexity.
nlohmann::json evaluate_t5_checkpoint(const std::string& dir, const CheckpointState& state,
                                      const FamilyEvalOptions& opt);

}  // namespace megadlm
