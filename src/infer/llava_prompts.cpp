#include "infer/llava_prompts.h"

#include "core/error.h"
#include "core/file_io.h"
#include "data/image.h"

namespace megadlm {

LlavaPrompts::LlavaPrompts(const LoadedModel& lm, const std::string& processor_path)
    : vision_(dynamic_cast<LlavaVision*>(lm.model->inserts())) {
  if (!vision_) return;
  const nlohmann::json& meta = lm.state.meta;
  if (!processor_path.empty())
    processor_ = read_clip_image_config(processor_path);
  else if (meta.contains("image_processor"))
    processor_ = clip_image_config_recorded(meta["image_processor"], lm.dir + "/state.json: \"image_processor\"");
  else
    processor_ = clip_image_config_for_size(vision_->options().clip.image_size);
}

std::vector<int32_t> LlavaPrompts::encode(const Tokenizer& tok, const std::string& prompt,
                                          const std::string& image_path, const std::string& tool) {
  if (!vision_) {
    MEGADLM_CHECK(image_path.empty(), tool, ": --image needs a llava checkpoint (the model has no vision tower)");
    pixels_.emplace_back();
    images_.push_back(0);
    return tok.encode(prompt);
  }
  const std::string marker = "<image>";
  std::vector<int32_t> ids;
  int64_t n = 0;
  size_t at = 0;
  for (size_t next; (next = prompt.find(marker, at)) != std::string::npos; at = next + marker.size(), ++n) {
    const std::vector<int32_t> piece = tok.encode(prompt.substr(at, next - at));
    ids.insert(ids.end(), piece.begin(), piece.end());
    ids.insert(ids.end(), static_cast<size_t>(vision_->patches()), vision_->options().image_token);
  }
  const std::vector<int32_t> rest = tok.encode(prompt.substr(at));
  ids.insert(ids.end(), rest.begin(), rest.end());
  MEGADLM_CHECK(n <= 1, tool, ": a prompt with ", n, " <image> markers; one image a prompt is built");
  MEGADLM_CHECK(n == 0 || !image_path.empty(), tool, ": a prompt with <image> needs --image (or an \"image\" key)");
  MEGADLM_CHECK(n == 1 || image_path.empty(), tool, ": the image ", image_path,
                " has no <image> marker in its prompt to stand in");
  std::vector<float> px;
  if (n == 1) px = clip_preprocess(processor_, decode_image(read_file(image_path, "--image"), image_path));
  const int64_t S = vision_->options().clip.image_size;
  MEGADLM_CHECK(px.empty() || static_cast<int64_t>(px.size()) == 3 * S * S, image_path, ": the image processor gives ",
                px.size() / 3, " pixels, not the model's ", S, " x ", S, " (--image-processor)");
  pixels_.push_back(std::move(px));
  images_.push_back(n);
  return ids;
}

void LlavaPrompts::append(size_t i, MicroBatch& mb) const {
  mb.pixels.insert(mb.pixels.end(), pixels_.at(i).begin(), pixels_.at(i).end());
  mb.images += images_.at(i);
}

PromptInputs LlavaPrompts::inputs_for(const std::vector<size_t>& idx) const {
  if (!vision_) return nullptr;
  return [this, idx](int64_t first, int64_t count, MicroBatch& mb) {
    mb.pixels.clear();
    mb.images = 0;
    for (int64_t j = first; j < first + count; ++j) append(idx.at(static_cast<size_t>(j)), mb);
  };
}

SequenceInputs LlavaPrompts::sequence_inputs(size_t k) const {
  if (!vision_) return nullptr;
  return [this, k](int64_t copies, MicroBatch& mb) {
    mb.pixels.clear();
    mb.images = 0;
    for (int64_t c = 0; c < copies; ++c) append(k, mb);
  };
}

}  // namespace megadlm
