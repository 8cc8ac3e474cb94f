#pragma once
// pretrain_difflm --model-type t5: T5 pretraining by span corruption on the CPU in fp32 or --bf16, with
// or without --recompute-* (docs/t5.md),
// under data and tensor parallelism (with or without the distributed optimizer; not sequence parallel).
// Samples come from T5Dataset over the --data-path prefix (sentence-split, --split by documents):
// encoder inputs of --encoder-seq-length rows with the noise spans replaced by sentinels, decoder
// targets of --decoder-seq-length rows. The vocabulary is the tokenizer's with [BOS] and [EOS] added
// where it has none (the decoder's start and the targets' end, as Megatron's WordPiece tokenizer adds
// them for T5) and --vocab-extra-ids sentinels <extra_id_0>, <extra_id_1>, ... after them; the padding
// is the tokenizer's [PAD] (or <pad>).
// The loss of a micro-batch is the mean cross-entropy over its labelled decoder rows (Megatron's T5
// loss); a step's is the mean over the global batch's micro-batches. The loop, the checkpoints
// (model_type "t5", the T5 options under "t5" as convert_checkpoint writes them, so a trained model
// exports to HuggingFace) and the log are FamilyTrainer's (train/family_trainer.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/t5_dataset.h"
#include "models/t5_model.h"
#include "train/arguments.h"
#include "train/family_data.h"
#include "train/family_trainer.h"
#include "train/t5_eval.h"

namespace megadlm {

// FLOPs of one sample's forward and backward (3 x the forward's 2 x multiply-adds): the encoder's S
// rows and the decoder's T rows through their layers' matrices, the cross-attention's keys and values
// of S rows in every decoder layer, the attention scores and values in full (no causal halving), the
// output matrix on the T rows.
double t5_flops_per_sample(const TransformerConfig& cfg, const T5Options& opt, int64_t S, int64_t T);

class T5Trainer : public FamilyTrainer {
 public:
  explicit T5Trainer(const TrainArgs& args);
  ~T5Trainer() override;

  // The first `batches` micro-batches of `data` (the same ones at every evaluation).
  T5EvalResult evaluate(const T5Dataset& data, int64_t batches);
  T5Model& model() { return *model_; }

 private:
  std::vector<std::string> loss_names() const override { return {"lm"}; }
  void micro_batch(int64_t first, int64_t M, double* parts) override;
  bool has_validation() const override { return valid_ != nullptr; }
  void evaluate_and_log(int64_t iteration) override;
  void log_header() const override;
  int64_t tokens_per_sample() const override { return args_.t5.encoder_seq_length + args_.t5.decoder_seq_length; }
  double flops_per_sample() const override;
  void add_checkpoint_meta(nlohmann::json& meta) const override;
  nlohmann::json model_options() const override;
  nlohmann::json model_options_of(const nlohmann::json& meta) const override;

  T5Tokens tokens_;
  std::unique_ptr<T5Dataset> train_, valid_;
  std::unique_ptr<T5Model> model_;
  T5Sample sample_;  // storage each training sample is read into
};

}  // namespace megadlm
