#pragma once
// CLIP's image processor (transformers' CLIPImageProcessor, the processor LLaVA uses): an RGB image
// (data/image.h) -> pixel values [3, crop_height, crop_width], channel-first, fp32:
//   1. resize (bicubic, antialiased; data/image_resample.h) so that the shorter side is
//      `shortest_edge` and the longer int(shortest_edge * long / short), or to height x width;
//   2. centre crop to crop_height x crop_width: top int((h - crop_h) / 2), left likewise; a side
//      shorter than the crop is padded with zeros first, (crop - side) / 2 before and the rest after;
//   3. x * rescale_factor (1/255), then (x - mean) / std per channel, computed as transformers'
//      torchvision backend fuses them: (x - mean / rescale_factor) / (std / rescale_factor) in fp32.
// The settings come from a preprocessor_config.json; rounding picks torchvision's resize
// (CLIPImageProcessor in transformers 5) or PIL's (CLIPImageProcessorPil, and CLIPImageProcessor in
// transformers 4), which differ by a level of 255 here and there.
// Legend: H, W image height and width; CH, CW crop height and width.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/image.h"
#include "data/image_resample.h"

namespace megadlm {

struct ClipImageConfig {
  // Resize: to shortest_edge when > 0, else to height x width.
  bool do_resize = true;
  int64_t shortest_edge = 224;
  int64_t resize_height = 0, resize_width = 0;
  bool do_center_crop = true;
  int64_t crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};  // OpenAI CLIP's
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
  ResizeRounding rounding = ResizeRounding::Torchvision;

  // The size of the pixel values an image of H x W becomes.
  int64_t out_height(int64_t H, int64_t W) const;
  int64_t out_width(int64_t H, int64_t W) const;
};

// A HuggingFace preprocessor_config.json's CLIP settings ("size", "crop_size", "do_*", "rescale_factor",
// "image_mean", "image_std", "resample" 3 = bicubic). Errors name the file and key: another resample
// filter, a size without "shortest_edge" or "height" + "width", non-positive sizes, a zero std.
ClipImageConfig read_clip_image_config(const std::string& path, ResizeRounding rounding = ResizeRounding::Torchvision);

// The same from a parsed object; `where` leads the error messages.
ClipImageConfig clip_image_config_from_json(const nlohmann::json& j, const std::string& where, ResizeRounding rounding);
// The settings as preprocessor_config.json keys (with "resample": 3), plus "rounding": "torchvision" | "pil".
nlohmann::json clip_image_config_json(const ClipImageConfig& cfg);
// The inverse of clip_image_config_json, the rounding included (as a sidecar or a checkpoint records it;
// torchvision's when absent).
ClipImageConfig clip_image_config_recorded(const nlohmann::json& j, const std::string& where);
// The preprocessor_config.json transformers' CLIPImageProcessor saves for these settings.
nlohmann::json clip_preprocessor_config(const ClipImageConfig& cfg);
// CLIP's processor for images of S x S: resized to a shortest edge of S and cropped to S x S, OpenAI CLIP's
// mean and std.
ClipImageConfig clip_image_config_for_size(int64_t S);
const char* resize_rounding_name(ResizeRounding r);  // "torchvision", "pil"
// "torchvision" or "pil"; an Error naming `what` otherwise.
ResizeRounding resize_rounding_from_name(const std::string& name, const std::string& what);

// (H, W) -> (OH, OW) of step 1.
std::array<int64_t, 2> clip_resize_size(const ClipImageConfig& cfg, int64_t H, int64_t W);

// image [H, W, 3] -> pixel values [3, OH, OW] (OH, OW: cfg.out_height / out_width): steps 1 to 3.
std::vector<float> clip_preprocess(const ClipImageConfig& cfg, const RgbImage& image);
// Steps 1 and 2: image [H, W, 3] -> the resized and cropped (or padded) 8-bit image [OH, OW, 3], what
// preprocess_data stores.
RgbImage clip_resize_and_crop(const ClipImageConfig& cfg, const RgbImage& image);
// Step 3: pixels [OH, OW, 3] (8-bit, interleaved) -> out [3, OH, OW].
void clip_normalize(const ClipImageConfig& cfg, const uint8_t* pixels, int64_t OH, int64_t OW, float* out);

}  // namespace megadlm
