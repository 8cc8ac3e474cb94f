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

#include "data/clip_image_processor.h"
#include "infer/sampling.h"
#include "models/llava_model.h"
#include "models/micro_batch.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

class LlavaPrompts {
 public:
  // vision: the model's (null for a model without a tower: then encode is the tokenizer's and images are
  // refused). processor_path: a preprocessor_config.json, or "" for the one the checkpoint records (its
  // meta's "image_processor": the training data's, or the HuggingFace model's), else CLIP's processor at
  // the model's S. `dir` names the checkpoint in errors.
  LlavaPrompts(LlavaVision* vision, const std::string& processor_path, const nlohmann::json& meta,
               const std::string& dir);
  const ClipImageConfig& processor() const { return processor_; }

  bool active() const { return vision_ != nullptr; }
  // Prompt k (k = the number of earlier calls): its ids, the marker expanded; image_path "" when it has none.
  // Errors name `tool` (the program) and --image: a marker without an image, more than one marker, an image
  // of another size than the model's.
  std::vector<int32_t> encode(const Tokenizer& tok, const std::string& prompt, const std::string& image_path,
                              const std::string& tool);
  // The samplers' inputs for a batch of prompts `idx` (its prompt j is prompt idx[j] here): their images
  // into each micro-batch that holds them. Empty for a model without a tower. Valid while this object is.
  PromptInputs inputs_for(const std::vector<size_t>& idx) const;
  // Prompt k's images `copies` times into mb (MicroBatch::pixels): a forward over `copies` rows that each
  // hold prompt k.
  void put_copies(size_t k, int64_t copies, MicroBatch& mb) const;
  // The prompts encoded so far.
  size_t count() const { return images_.size(); }

 private:
  LlavaVision* vision_;
  ClipImageConfig processor_;
  std::vector<std::vector<float>> pixels_;  // per prompt: [n, 3, S, S]
  std::vector<int64_t> images_;             // per prompt: n
};

}  // namespace megadlm
