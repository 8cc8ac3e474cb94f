#include "data/image_data.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "data/jsonl.h"

namespace megadlm {

std::string image_data_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_pixels";
}

std::string image_sidecar_path(const std::string& image_prefix) { return image_prefix + ".image.json"; }

LineImages line_images(std::string_view line, const std::string& key) {
  LineImages out;
  const ParsedLine p = parse_jsonl_line(line, {key});
  if (p.status == LineStatus::MissingKey) return out;  // a text-only line
  if (p.status != LineStatus::Ok) {
    out.error = p.error;
    return out;
  }
  out.paths = p.texts[0];
  return out;
}

std::vector<uint8_t> ImageStep::process(const LineImages& images) const {
  std::vector<uint8_t> out;
  for (const std::string& p : images.paths) {
    MEGADLM_CHECK(!p.empty(), "an image path is empty");
    const std::filesystem::path path = std::filesystem::path(p).is_absolute() ? std::filesystem::path(p)
                                                                             : std::filesystem::path(folder) / p;
    const RgbImage img = clip_resize_and_crop(processor, read_image(path.string()));
    out.insert(out.end(), img.pixels.begin(), img.pixels.end());
  }
  return out;
}

void ImageStep::check_placeholders(const int32_t* begin, const int32_t* end, int32_t token_id, size_t images) const {
  const auto n = static_cast<size_t>(std::count(begin, end, token_id));
  MEGADLM_CHECK(n == images, "the text has ", n, " '", token, "' placeholder(s) but the line has ", images,
                " image(s); each image needs one placeholder where it goes");
}

std::string ImageStep::sidecar_text(const std::string& key, int32_t token_id) const {
  nlohmann::json j;
  const auto [H, W] = fixed_image_size(processor);
  j["height"] = H;
  j["width"] = W;
  j["image_key"] = key;
  j["image_token"] = token;
  j["image_token_id"] = token_id;
  j["layout"] = "uint8 [height, width, 3] per image, after the processor's resize and crop";
  j["processor"] = clip_image_config_json(processor);
  return j.dump(2) + "\n";
}

std::array<int64_t, 2> fixed_image_size(const ClipImageConfig& cfg) {
  if (cfg.do_center_crop) return {cfg.crop_height, cfg.crop_width};
  if (cfg.do_resize && cfg.shortest_edge <= 0) return {cfg.resize_height, cfg.resize_width};
  return {0, 0};
}

ClipImageConfig image_processor_of(const std::string& spec, ResizeRounding rounding) {
  if (spec.empty()) {
    ClipImageConfig cfg;
    cfg.rounding = rounding;
    return cfg;
  }
  const std::filesystem::path p(spec);
  const std::string file = std::filesystem::is_directory(p) ? (p / "preprocessor_config.json").string() : spec;
  return read_clip_image_config(file, rounding);
}

// ---- reading ------------------------------------------------------------------------------------

ImageDataset::ImageDataset(const std::string& prefix) : data_(prefix) {
  const std::string path = image_sidecar_path(prefix);
  const std::string text = read_file(path, "image data sidecar");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  MEGADLM_CHECK(j.is_object() && j.contains("height") && j["height"].is_number_integer() && j.contains("width") &&
                    j["width"].is_number_integer() && j.contains("image_token_id") &&
                    j["image_token_id"].is_number_integer() && j.contains("processor") && j["processor"].is_object(),
                path, ": needs integer \"height\", \"width\", \"image_token_id\" and a \"processor\" object");
  height_ = j["height"].get<int64_t>();
  width_ = j["width"].get<int64_t>();
  token_id_ = j["image_token_id"].get<int32_t>();
  MEGADLM_CHECK(height_ >= 1 && width_ >= 1, path, ": the images are ", width_, " x ", height_,
                "; stored images need a fixed size (a processor with do_center_crop)");
  processor_ = clip_image_config_recorded(j["processor"], path + ": \"processor\"");
  MEGADLM_CHECK(data_.dtype() == IndexDType::U8, prefix, ".idx: image data is uint8, not ", index_dtype_name(data_.dtype()));
  for (int64_t s = 0; s < data_.num_sequences(); ++s)
    MEGADLM_CHECK(data_.sequence_length(s) == height_ * width_ * 3, prefix, ".idx: image ", s, " has ",
                  data_.sequence_length(s), " values, not ", height_, " x ", width_, " x 3");
}

int64_t ImageDataset::images_in_document(int64_t doc) const {
  MEGADLM_CHECK(doc >= 0 && doc < num_documents(), data_.prefix(), ": document ", doc, " is outside [0, ",
                num_documents(), ")");
  return data_.document_index(doc + 1) - data_.document_index(doc);
}

void ImageDataset::pixel_values(int64_t doc, float* out) const {
  const int64_t n = images_in_document(doc), first = data_.document_index(doc), HW3 = height_ * width_ * 3;
  std::vector<int32_t> values(static_cast<size_t>(HW3));
  std::vector<uint8_t> pixels(static_cast<size_t>(HW3));
  for (int64_t i = 0; i < n; ++i) {
    data_.read(first + i, 0, HW3, values.data());
    std::copy(values.begin(), values.end(), pixels.begin());
    clip_normalize(processor_, pixels.data(), height_, width_, out + i * HW3);
  }
}

void ImageDataset::check_aligned(const IndexedDataset& tokens) const {
  MEGADLM_CHECK(tokens.num_documents() == num_documents(), data_.prefix(), " has ", num_documents(),
                " documents but its tokens ", tokens.prefix(), " have ", tokens.num_documents(),
                "; they must come from one preprocess_data run");
}

}  // namespace megadlm
