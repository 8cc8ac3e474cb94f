#pragma once
// pretrain_difflm --load-hf DIR: start from a HuggingFace checkpoint. The model flags come from its
// config.json (flags given on the command line that contradict it are errors naming them), the
// tokenizer from its tokenizer files unless tokenizer flags are given, and the weights are imported
// in memory. With --model-type difflm an autoregressive checkpoint is adapted into a diffusion model:
// bidirectional attention, and a mask token that is either an existing id (--mask-token ID) or a new
// token appended to the vocabulary, for which the embedding (and an untied output layer) grows rows
// initialised to the mean of the existing rows.
#include <cstdint>
#include <string>

#include "core/cli_flags.h"
#include "models/language_model.h"
#include "train/arguments.h"

namespace megadlm {

// Called by parse_train_args after the model flags were parsed into a.model: replaces a.model by the
// config of a.load_hf (keeping the attention mask of the model type), checks the flags given
// against it, and fills the tokenizer flags from the checkpoint when none were given.
void apply_hf_config(TrainArgs& a, const CliFlags& f);

// The vocabulary of the adapted model: the checkpoint's, grown to hold every tokenizer id (a mask
// token appended by --model-type difflm included).
int64_t hf_adapted_vocab_size(int64_t hf_vocab, int64_t tokenizer_vocab);

// Copies the weights of the HF checkpoint at dir into model, growing embedding / output rows to the
// model's vocabulary. Returns the number of rows added.
int64_t load_hf_into_model(const std::string& dir, LanguageModel& model);

}  // namespace megadlm
