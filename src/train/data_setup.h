#pragma once
// From arguments to what the trainer consumes: the tokenizer (from flags, or from the sidecar that
// preprocess_data wrote beside the data), the mask token, the padded vocabulary, the objective of
// --model-type, and the train / validation / test datasets (Megatron's BlendedMegatronDatasetBuilder
// semantics).
#include <memory>
#include <string>

#include "data/clip_image_processor.h"
#include "data/token_dataset.h"
#include "objectives/objective.h"
#include "tokenizers/tokenizer.h"
#include "train/arguments.h"

namespace megadlm {

// The spec from --tokenizer-type & co., else from <first data prefix>.tokenizer.json.
TokenizerSpec resolve_tokenizer_spec(const TrainArgs& args);

// --mask-token as an id or a token text; default: an existing <|mask|> / <mask> / [MASK], else a new
// <|mask|> added to the tokenizer (recorded in its spec, so checkpoints rebuild it).
int32_t resolve_mask_token(const std::string& flag, Tokenizer& tok);

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by);

// The objective of --model-type with its flags: next-token for gpt (--eod-mask-loss, the document
// resets), masked diffusion for difflm (args.diffusion, its mask token and eod already resolved).
std::unique_ptr<Objective> make_objective(const TrainArgs& args);

// Refuses a data prefix (of --data-path, --train-data-path, ...) whose sidecar records another
// tokenizer than the run's (data/preprocess.h check_data_tokenizer).
void check_data_tokenizers(const TrainArgs& args, const Tokenizer& tok);

// --model-type llava: the image data's prefix that a token prefix's sidecar names, and the image
// placeholder's id of the run's data. Errors name the sidecar (no image data) or the flag (a blend).
std::string llava_image_prefix(const std::string& data_prefix);
int32_t llava_image_token(const TrainArgs& args);
// The image processor's settings the data was stored with (its image sidecar's).
ClipImageConfig llava_image_processor(const TrainArgs& args);

struct Datasets {
  std::shared_ptr<const TokenDataset> train, valid, test;  // valid / test may be null
  std::string description;
};

// Builds datasets holding at least the requested number of samples for each split.
Datasets build_datasets(const TrainArgs& args, int64_t train_samples, int64_t valid_samples, int64_t test_samples);

}  // namespace megadlm
