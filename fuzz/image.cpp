// Fuzz target: the PNG and JPEG decoders (data/image.h: decode_image, libpng and libjpeg behind it) and
// CLIP's processing of what they accept (data/clip_image_processor.h, data/image_resample.h).
//
// Input: the whole file. An accepted image must have a size within the limits and exactly
// H * W * 3 samples; it is then resized and cropped to a small 9 x 7 (both roundings), whose pixel
// values must be finite and within what the normalisation of [0, 255] allows.
#include <cmath>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/clip_image_processor.h"
#include "data/image.h"
#include "fuzz_util.h"

using namespace megadlm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RgbImage img;
  try {
    img = decode_image(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.img");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(img.height >= 1 && img.width >= 1, "an accepted image has pixels");
  FUZZ_REQUIRE(img.height * img.width <= kMaxImagePixels, "an accepted image is within the pixel limit");
  FUZZ_REQUIRE(img.pixels.size() == static_cast<size_t>(img.height * img.width * 3), "H * W * 3 samples");
  if (img.height * img.width > 1 << 20) return 0;  // large but valid: the resize is not what is fuzzed
  ClipImageConfig cfg;
  cfg.shortest_edge = 7;
  cfg.crop_height = 7;
  cfg.crop_width = 9;  // wider than a square image's resize: the padding path too
  for (ResizeRounding r : {ResizeRounding::Torchvision, ResizeRounding::Pil}) {
    cfg.rounding = r;
    const std::vector<float> px = clip_preprocess(cfg, img);
    FUZZ_REQUIRE(px.size() == 3 * 7 * 9, "3 x crop pixel values");
    for (float v : px) FUZZ_REQUIRE(std::isfinite(v) && std::fabs(v) < 3.0f, "normalised values of [0, 255]");
  }
  return 0;
}
