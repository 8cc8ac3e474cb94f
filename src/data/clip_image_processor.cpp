#include "data/clip_image_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

std::array<int64_t, 2> clip_resize_size(const ClipImageConfig& cfg, int64_t H, int64_t W) {
  if (!cfg.do_resize) return {H, W};
  if (cfg.shortest_edge <= 0) return {cfg.resize_height, cfg.resize_width};
  const int64_t short_side = std::min(H, W), long_side = std::max(H, W);
  const auto long_out = static_cast<int64_t>(static_cast<double>(cfg.shortest_edge * long_side) /
                                             static_cast<double>(short_side));
  return W <= H ? std::array<int64_t, 2>{long_out, cfg.shortest_edge} : std::array<int64_t, 2>{cfg.shortest_edge, long_out};
}

int64_t ClipImageConfig::out_height(int64_t H, int64_t W) const {
  return do_center_crop ? crop_height : clip_resize_size(*this, H, W)[0];
}

int64_t ClipImageConfig::out_width(int64_t H, int64_t W) const {
  return do_center_crop ? crop_width : clip_resize_size(*this, H, W)[1];
}

namespace {

// Where a crop of `crop` starts in a side of `side` (negative: padding before the side).
int64_t crop_start(int64_t side, int64_t crop) {
  if (crop > side) return -((crop - side) / 2);
  return static_cast<int64_t>(static_cast<double>(side - crop) / 2.0);
}

}  // namespace

RgbImage clip_resize_and_crop(const ClipImageConfig& cfg, const RgbImage& image) {
  const auto [RH, RW] = clip_resize_size(cfg, image.height, image.width);
  RgbImage storage;
  const bool same_size = RH == image.height && RW == image.width;
  if (!same_size) storage = resize_bicubic(image, RH, RW, cfg.rounding);
  const RgbImage& resized = same_size ? image : storage;
  if (!cfg.do_center_crop) return resized;
  const int64_t OH = cfg.crop_height, OW = cfg.crop_width;
  const int64_t top = crop_start(RH, OH), left = crop_start(RW, OW);
  RgbImage out{OH, OW, std::vector<uint8_t>(static_cast<size_t>(OH * OW * 3), 0)};
  for (int64_t y = 0; y < OH; ++y) {
    const int64_t sy = top + y;
    if (sy < 0 || sy >= RH) continue;
    for (int64_t x = 0; x < OW; ++x) {
      const int64_t sx = left + x;
      if (sx < 0 || sx >= RW) continue;
      for (int c = 0; c < 3; ++c) out.pixels[(y * OW + x) * 3 + c] = resized.pixels[(sy * RW + sx) * 3 + c];
    }
  }
  return out;
}

void clip_normalize(const ClipImageConfig& cfg, const uint8_t* pixels, int64_t OH, int64_t OW, float* out) {
  // The fused rescale and normalisation, in fp32 as torch computes them.
  const auto inv = static_cast<float>(1.0 / cfg.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    const float shift = !cfg.do_normalize ? 0.0f : cfg.do_rescale ? cfg.mean[c] * inv : cfg.mean[c];
    const float divide = !cfg.do_normalize ? (cfg.do_rescale ? inv : 1.0f) : cfg.do_rescale ? cfg.std[c] * inv : cfg.std[c];
    for (int64_t p = 0; p < OH * OW; ++p) out[c * OH * OW + p] = (static_cast<float>(pixels[p * 3 + c]) - shift) / divide;
  }
}

std::vector<float> clip_preprocess(const ClipImageConfig& cfg, const RgbImage& image) {
  const RgbImage img = clip_resize_and_crop(cfg, image);
  std::vector<float> out(static_cast<size_t>(3 * img.height * img.width));
  clip_normalize(cfg, img.pixels.data(), img.height, img.width, out.data());
  return out;
}

namespace {

using nlohmann::json;

int64_t positive_int(const json& j, const char* key, const std::string& where) {
  MEGADLM_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0, where, ": \"", key,
                "\" must be a positive integer");
  return j[key].get<int64_t>();
}

bool flag(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  MEGADLM_CHECK(j[key].is_boolean(), where, ": \"", key, "\" must be true or false");
  return j[key].get<bool>();
}

std::array<float, 3> triple(const json& j, const char* key, std::array<float, 3> fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  MEGADLM_CHECK(v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() && v[2].is_number(), where,
                ": \"", key, "\" must be a list of 3 numbers (R, G, B)");
  return {v[0].get<float>(), v[1].get<float>(), v[2].get<float>()};
}

}  // namespace

ClipImageConfig read_clip_image_config(const std::string& path, ResizeRounding rounding) {
  const std::string text = read_file(path, "image processor config");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  return clip_image_config_from_json(j, path, rounding);
}

const char* resize_rounding_name(ResizeRounding r) { return r == ResizeRounding::Pil ? "pil" : "torchvision"; }

ResizeRounding resize_rounding_from_name(const std::string& name, const std::string& what) {
  if (name == "torchvision") return ResizeRounding::Torchvision;
  if (name == "pil") return ResizeRounding::Pil;
  fail(what, " '", name, "' is not a resize rounding (torchvision, pil)");
}

json clip_image_config_json(const ClipImageConfig& cfg) {
  json j;
  j["do_resize"] = cfg.do_resize;
  if (cfg.shortest_edge > 0)
    j["size"] = {{"shortest_edge", cfg.shortest_edge}};
  else
    j["size"] = {{"height", cfg.resize_height}, {"width", cfg.resize_width}};
  j["resample"] = 3;
  j["do_center_crop"] = cfg.do_center_crop;
  j["crop_size"] = {{"height", cfg.crop_height}, {"width", cfg.crop_width}};
  j["do_rescale"] = cfg.do_rescale;
  j["rescale_factor"] = cfg.rescale_factor;
  j["do_normalize"] = cfg.do_normalize;
  j["image_mean"] = cfg.mean;
  j["image_std"] = cfg.std;
  j["rounding"] = resize_rounding_name(cfg.rounding);
  return j;
}

ClipImageConfig clip_image_config_recorded(const json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object(), where, ": the image processor's settings are not a JSON object");
  MEGADLM_CHECK(!j.contains("rounding") || j["rounding"].is_string(), where, ": \"rounding\" is not a string");
  const std::string rounding = j.value("rounding", std::string("torchvision"));
  return clip_image_config_from_json(j, where, resize_rounding_from_name(rounding, where + ": \"rounding\""));
}

json clip_preprocessor_config(const ClipImageConfig& cfg) {
  json j = clip_image_config_json(cfg);
  j.erase("rounding");
  j["do_convert_rgb"] = true;
  j["image_processor_type"] = "CLIPImageProcessor";
  return j;
}

ClipImageConfig clip_image_config_for_size(int64_t S) {
  ClipImageConfig cfg;
  cfg.shortest_edge = S;
  cfg.crop_height = cfg.crop_width = S;
  return cfg;
}

ClipImageConfig clip_image_config_from_json(const json& j, const std::string& path, ResizeRounding rounding) {
  MEGADLM_CHECK(j.is_object(), path, ": not a JSON object");
  ClipImageConfig cfg;
  cfg.rounding = rounding;
  if (j.contains("resample") && !j["resample"].is_null())
    MEGADLM_CHECK(j["resample"] == 3, path, ": \"resample\" is ", j["resample"].dump(),
                  "; only 3 (bicubic) is supported");
  cfg.do_resize = flag(j, "do_resize", true, path);
  if (j.contains("size") && !j["size"].is_null()) {
    const json& s = j["size"];
    const std::string where = path + ": \"size\"";
    if (s.is_number_integer()) {
      cfg.shortest_edge = positive_int(j, "size", path);
    } else {
      MEGADLM_CHECK(s.is_object(), where, " must be a number or an object");
      if (s.contains("shortest_edge")) {
        cfg.shortest_edge = positive_int(s, "shortest_edge", where);
      } else {
        MEGADLM_CHECK(s.contains("height") && s.contains("width"), where,
                      " needs \"shortest_edge\" or \"height\" and \"width\"");
        cfg.shortest_edge = 0;
        cfg.resize_height = positive_int(s, "height", where);
        cfg.resize_width = positive_int(s, "width", where);
      }
    }
  }
  cfg.do_center_crop = flag(j, "do_center_crop", true, path);
  if (j.contains("crop_size") && !j["crop_size"].is_null()) {
    const json& s = j["crop_size"];
    const std::string where = path + ": \"crop_size\"";
    if (s.is_number_integer()) {
      cfg.crop_height = cfg.crop_width = positive_int(j, "crop_size", path);
    } else {
      MEGADLM_CHECK(s.is_object(), where, " must be a number or an object");
      cfg.crop_height = positive_int(s, "height", where);
      cfg.crop_width = positive_int(s, "width", where);
    }
  }
  cfg.do_rescale = flag(j, "do_rescale", true, path);
  if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) {
    MEGADLM_CHECK(j["rescale_factor"].is_number() && j["rescale_factor"].get<double>() > 0.0, path,
                  ": \"rescale_factor\" must be a positive number");
    cfg.rescale_factor = j["rescale_factor"].get<double>();
  }
  cfg.do_normalize = flag(j, "do_normalize", true, path);
  cfg.mean = triple(j, "image_mean", cfg.mean, path);
  cfg.std = triple(j, "image_std", cfg.std, path);
  for (float s : cfg.std) MEGADLM_CHECK(s > 0.0f, path, ": \"image_std\" must be positive");
  return cfg;
}

}  // namespace megadlm
