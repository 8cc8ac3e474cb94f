#pragma once
// The images of vision-language data (docs/llava.md): preprocess_data --image-key stores each line's
// images, resized and cropped by CLIP's image processor (data/clip_image_processor.h), as 8-bit
// [H, W, 3] sequences of an MMIDIDX dataset, one document per line beside the line's token document
// (documents aligned: line k's tokens and images are document k of each), and the image placeholder of
// the text as one token id. A sidecar <prefix>.image.json records the processor's settings, so that the
// reader gives the pixel values transformers' processor would give, [3, H, W] fp32, without the files.
//
//   <output_prefix>_<key>_pixels.{bin,idx}   uint8, one sequence of H * W * 3 per image
//   <output_prefix>_<key>_pixels.image.json  {height, width, image_key, image_token, image_token_id,
//                                             processor: {...}}
// Legend: H, W the stored (cropped) image's height and width.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/clip_image_processor.h"
#include "data/indexed_dataset.h"

namespace megadlm {

// "<output_prefix>_<key>_pixels".
std::string image_data_prefix(const std::string& output_prefix, const std::string& key);
std::string image_sidecar_path(const std::string& image_prefix);  // <image_prefix>.image.json

// One .jsonl line's image paths: the key's string, or each string of its list; no key: no images.
struct LineImages {
  std::vector<std::string> paths;
  std::string error;  // a key that is neither a string nor a list of strings; the line is bad
};
LineImages line_images(std::string_view line, const std::string& key);

// What preprocess_data does to each line's images.
struct ImageStep {
  ClipImageConfig processor;
  std::string folder;  // where relative paths are resolved
  std::string token;   // the placeholder's text, "<image>"

  // The images of a line, resized and cropped, back to back ([n, H, W, 3]). Throws Error naming the
  // image file (and, through the caller, the line).
  std::vector<uint8_t> process(const LineImages& images) const;
  // Throws Error unless ids [begin, end) hold as many token_id as there are images.
  void check_placeholders(const int32_t* begin, const int32_t* end, int32_t token_id, size_t images) const;
  // The sidecar's JSON text.
  std::string sidecar_text(const std::string& key, int32_t token_id) const;
};

// The (H, W) every image becomes under `cfg`: the crop, or a resize to a fixed height x width; {0, 0}
// when the size follows the image (no crop and a shortest-edge resize, or none), which stored data
// cannot take.
std::array<int64_t, 2> fixed_image_size(const ClipImageConfig& cfg);

// `spec`: a preprocessor_config.json, a folder holding one, or "" for CLIP's 224 defaults.
ClipImageConfig image_processor_of(const std::string& spec, ResizeRounding rounding);

// The stored images of a dataset and their settings; gives the pixel values of a document's images.
class ImageDataset {
 public:
  explicit ImageDataset(const std::string& prefix);  // Errors name the file and the fault

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int32_t token_id() const { return token_id_; }
  const ClipImageConfig& processor() const { return processor_; }
  int64_t num_documents() const { return data_.num_documents(); }
  int64_t images_in_document(int64_t doc) const;
  // out [n, 3, H, W]: the pixel values of document doc's n images.
  void pixel_values(int64_t doc, float* out) const;
  // Errors naming both prefixes unless `tokens` has as many documents.
  void check_aligned(const IndexedDataset& tokens) const;

 private:
  IndexedDataset data_;
  ClipImageConfig processor_;
  int64_t height_ = 0, width_ = 0;
  int32_t token_id_ = -1;
};

}  // namespace megadlm
