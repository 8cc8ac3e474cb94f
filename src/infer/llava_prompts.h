#pragma once
// LLaVA's prompts for generate and evaluate: each "<image>" marker in a prompt's text becomes P copies of
// the image token (the text between markers encoded as usual), and the prompt's image (PNG or JPEG, read
// and preprocessed by CLIP's image processor) is kept beside it, to be put into the micro-batches whose
// rows hold those positions (MicroBatch::pixels: the samplers' PromptInputs, the scorers' SequenceInputs).
// One image a prompt.
// Legend: P the tower's patches an image, S the model's image side, n images.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/model_loader.h"
#include "data/clip_image_processor.h"
#include "infer/likelihood.h"
#include "infer/sampling.h"
#include "models/llava_model.h"
#include "models/micro_batch.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

class LlavaPrompts {
 public:
  // The prompts of lm's model: a LLaVA model's, or for a model without a tower the tokenizer's (images
  // refused). processor_path: a preprocessor_config.json, or "" for the one the checkpoint records (its
  // meta's "image_processor": the training data's, or the HuggingFace model's), else CLIP's processor at
  // the model's S.
  LlavaPrompts(const LoadedModel& lm, const std::string& processor_path);
  const ClipImageConfig& processor() const { return processor_; }

  bool active() const { return vision_ != nullptr; }
  const LlavaVision* vision() const { return vision_; }  // null: not a LLaVA model
  // Prompt k (k = the number of earlier calls): its ids, the marker expanded; image_path "" when it has none.
  // Errors name `tool` (the program) and --image: a marker without an image, more than one marker, an image
  // of another size than the model's.
  std::vector<int32_t> encode(const Tokenizer& tok, const std::string& prompt, const std::string& image_path,
                              const std::string& tool);
  // The samplers' inputs for a batch of prompts `idx` (its prompt j is prompt idx[j] here): their images
  // into each micro-batch that holds them. Empty for a model without a tower. Valid while this object is.
  PromptInputs inputs_for(const std::vector<size_t>& idx) const;
  // The scorers' inputs for prompt k: its images once for each of a forward's rows that hold it. Empty for
  // a model without a tower. Valid while this object is.
  SequenceInputs sequence_inputs(size_t k) const;
  // The prompts encoded so far.
  size_t count() const { return images_.size(); }

 private:
  // Appends prompt i's images to mb's.
  void append(size_t i, MicroBatch& mb) const;

  LlavaVision* vision_;
  ClipImageConfig processor_;
  std::vector<std::vector<float>> pixels_;  // per prompt: [n, 3, S, S]
  std::vector<int64_t> images_;             // per prompt: n
};

}  // namespace megadlm
