// Image decoding and CLIP's image processor (data/image.h, data/image_resample.h,
// data/clip_image_processor.h) against transformers' own, through the fixtures of
// tools/reference/make_clip_image_fixture.py (transformers 5.25.0, torchvision 0.29.2, Pillow 13.0.0),
// and every bad image a user can hand in.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/clip_image_processor.h"
#include "data/image.h"
#include "data/image_resample.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::error_of;

const std::string kDir = std::string(MEGADLM_SOURCE_DIR) + "/tests/data/fixtures/images/";

struct Fixture {
  const char* name;
  const char* file;
};
const Fixture kImages[] = {{"rgb", "rgb.png"},           {"rgba", "rgba.png"},         {"gray", "gray.png"},
                           {"palette", "palette.png"},   {"gray_alpha", "gray_alpha.png"}, {"photo", "photo.jpg"},
                           {"photo444", "photo444.jpg"}, {"progressive", "progressive.jpg"}, {"gray_jpeg", "gray_jpeg.jpg"}};

const SafetensorsFile& expected() {
  static const SafetensorsFile f(kDir + "expected.safetensors");
  return f;
}

std::vector<float> expected_floats(const std::string& key) {
  const Tensor t = expected().get(key);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

TEST(ImageDecode, EqualsPilAndTransformersConvertToRgbOnEveryFixture) {
  for (const Fixture& fx : kImages) {
    SCOPED_TRACE(fx.file);
    const RgbImage img = read_image(kDir + fx.file);
    const Tensor want = expected().get(std::string(fx.name) + ".rgb");
    ASSERT_EQ(want.dim(), 3);
    ASSERT_EQ(img.height, want.shape()[0]);
    ASSERT_EQ(img.width, want.shape()[1]);
    ASSERT_EQ(want.shape()[2], 3);
    const auto* w = want.data<uint8_t>();
    int64_t differ = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i) differ += img.pixels[i] != w[i];
    EXPECT_EQ(differ, 0) << "of " << img.pixels.size() << " samples";
  }
}

TEST(ClipImageProcessor, PixelValuesEqualTransformersBothBackends) {
  for (ResizeRounding rounding : {ResizeRounding::Torchvision, ResizeRounding::Pil}) {
    const ClipImageConfig cfg = read_clip_image_config(kDir + "small/preprocessor_config.json", rounding);
    ASSERT_EQ(cfg.shortest_edge, 40);
    ASSERT_EQ(cfg.crop_height, 32);
    const char* suffix = rounding == ResizeRounding::Torchvision ? ".tv" : ".pil";
    for (const Fixture& fx : kImages) {
      SCOPED_TRACE(std::string(fx.file) + suffix);
      const RgbImage img = read_image(kDir + fx.file);
      const std::vector<float> got = clip_preprocess(cfg, img);
      const std::vector<float> want = expected_floats(std::string(fx.name) + suffix);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(max_abs_diff(got, want), 1e-5);
    }
  }
}

TEST(ClipImageProcessor, DefaultSettingsAreOpenAiClips) {
  const ClipImageConfig cfg;  // shortest edge 224, 224 x 224 crop, OpenAI CLIP's mean and std
  const std::vector<float> got = clip_preprocess(cfg, read_image(kDir + "rgb.png"));
  const std::vector<float> want = expected_floats("rgb.tv224");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(max_abs_diff(got, want), 1e-5);
}

// The two roundings are different computations: on the fixtures they must disagree somewhere, or the
// comparison above could not tell them apart.
TEST(ImageResample, TorchvisionAndPilRoundingDifferOnTheFixture) {
  const RgbImage img = read_image(kDir + "photo.jpg");
  const RgbImage a = resize_bicubic(img, 40, 57, ResizeRounding::Torchvision);
  const RgbImage b = resize_bicubic(img, 40, 57, ResizeRounding::Pil);
  int64_t differ = 0, most = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const int d = std::abs(a.pixels[i] - b.pixels[i]);
    differ += d != 0;
    most = std::max<int64_t>(most, d);
  }
  EXPECT_GT(differ, 0);
  EXPECT_LE(most, 2);
}

// A constant image stays constant under any resize (the taps sum to one), and the size is the one asked.
TEST(ImageResample, ConstantImageStaysConstant) {
  RgbImage img{13, 29, std::vector<uint8_t>(13 * 29 * 3)};
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(40 + 70 * (i % 3));
  for (auto [h, w] : {std::pair<int64_t, int64_t>{5, 7}, {40, 100}, {13, 3}, {1, 1}}) {
    const RgbImage r = resize_bicubic(img, h, w, ResizeRounding::Pil);
    ASSERT_EQ(r.height, h);
    ASSERT_EQ(r.width, w);
    for (size_t i = 0; i < r.pixels.size(); ++i) ASSERT_EQ(r.pixels[i], 40 + 70 * (i % 3)) << h << "x" << w;
  }
}

TEST(ClipImageProcessor, ResizeSizeAndCropFollowTransformers) {
  ClipImageConfig cfg;
  EXPECT_EQ(clip_resize_size(cfg, 300, 400), (std::array<int64_t, 2>{224, 298}));  // int(224 * 400 / 300)
  EXPECT_EQ(clip_resize_size(cfg, 641, 333), (std::array<int64_t, 2>{431, 224}));
  // A crop larger than the resized image pads with zeros: the pixel value is then -mean / std.
  cfg.shortest_edge = 4;
  cfg.crop_height = cfg.crop_width = 6;
  RgbImage img{4, 4, std::vector<uint8_t>(4 * 4 * 3, 255)};
  const std::vector<float> px = clip_preprocess(cfg, img);
  ASSERT_EQ(px.size(), 3u * 6 * 6);
  EXPECT_NEAR(px[0], -cfg.mean[0] / cfg.std[0], 1e-6);                         // (0, 0): padding
  EXPECT_NEAR(px[1 * 6 + 1], (1.0f - cfg.mean[0]) / cfg.std[0], 1e-5);          // (1, 1): the image
  EXPECT_NEAR(px[5 * 6 + 5], -cfg.mean[0] / cfg.std[0], 1e-6);                  // (5, 5): padding
}

// ---- bad images -------------------------------------------------------------------------------

std::string chunk(const std::string& type, const std::string& data) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(data.size());
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((n >> s) & 0xff));
  const std::string body = type + data;
  out += body;
  const uint32_t crc = static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((crc >> s) & 0xff));
  return out;
}

std::string be32(uint32_t v) {
  std::string s;
  for (int b = 24; b >= 0; b -= 8) s.push_back(static_cast<char>((v >> b) & 0xff));
  return s;
}

// An 8-bit RGB PNG of w x h gray pixels whose header claims claimed_w x claimed_h.
std::string make_png(uint32_t w, uint32_t h, uint32_t claimed_w, uint32_t claimed_h) {
  const std::string ihdr = be32(claimed_w) + be32(claimed_h) + std::string("\x08\x02\x00\x00\x00", 5);
  std::string raw;
  for (uint32_t y = 0; y < h; ++y) raw += std::string(1, '\0') + std::string(w * 3, '\x80');
  uLongf n = compressBound(raw.size());
  std::string z(n, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(raw.data()), raw.size()), Z_OK);
  z.resize(n);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) + chunk("IEND", "");
}

TEST(ImageDecode, HandMadePngDecodes) {
  const RgbImage img = decode_image(make_png(5, 3, 5, 3), "made.png");
  EXPECT_EQ(img.width, 5);
  EXPECT_EQ(img.height, 3);
  EXPECT_TRUE(std::all_of(img.pixels.begin(), img.pixels.end(), [](uint8_t v) { return v == 0x80; }));
}

TEST(ImageDecode, BadImagesAreErrorsNamingTheFile) {
  test::TempDir dir;
  const std::string png = read_file(kDir + "rgb.png"), jpg = read_file(kDir + "photo.jpg");
  struct Case {
    const char* what;
    std::string bytes;
    const char* says;
  };
  std::string bad_crc = png;
  bad_crc[png.find("IDAT") + 40] ^= 0x5a;
  std::string huge_jpeg = jpg, empty_jpeg = jpg;
  const size_t sof = jpg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  for (int k : {5, 7}) huge_jpeg[sof + k] = '\x4e', huge_jpeg[sof + k + 1] = '\x20';  // 20000 x 20000
  empty_jpeg[sof + 5] = empty_jpeg[sof + 6] = '\0';          // height 0
  std::string corrupt_jpeg = jpg;
  for (size_t k = jpg.size() / 2; k < jpg.size() / 2 + 64; ++k) corrupt_jpeg[k] = '\xff';
  const Case cases[] = {
      {"truncated.png", png.substr(0, png.size() / 2), "truncated"},
      {"cut_before_iend.png", png.substr(0, png.size() - 12), "truncated"},
      {"bad_crc.png", bad_crc, "damaged PNG"},
      {"zero_width.png", make_png(1, 1, 0, 1), "not a valid PNG"},
      {"enormous.png", make_png(1, 1, 100000, 100000), "more than the 89478485"},
      {"truncated.jpg", jpg.substr(0, jpg.size() / 2), "JPEG"},
      {"header_only.jpg", jpg.substr(0, 200), "JPEG"},
      {"corrupt.jpg", corrupt_jpeg, "JPEG"},
      {"enormous.jpg", huge_jpeg, "more than the 89478485"},
      {"zero_height.jpg", empty_jpeg, "JPEG"},
      {"empty.png", "", "the file is empty"},
      {"text.png", "hello, world\n", "not a PNG or JPEG"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.str() + "/" + c.what;
    write_file_atomic(path, c.bytes);
    const std::string e = error_of([&] { read_image(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
  }
  const std::string cmyk = error_of([&] { read_image(kDir + "cmyk.jpg"); });
  EXPECT_NE(cmyk.find("CMYK"), std::string::npos) << cmyk;
  const std::string missing = error_of([&] { read_image(dir.str() + "/no_such.png"); });
  EXPECT_NE(missing.find("no_such.png"), std::string::npos) << missing;
}

TEST(ClipImageProcessor, BadConfigsNameTheFileAndKey) {
  test::TempDir dir;
  const std::string path = dir.str() + "/preprocessor_config.json";
  const std::pair<const char*, const char*> cases[] = {
      {R"({"resample": 2})", "\"resample\""},
      {R"({"size": {"longest_edge": 10}})", "\"size\""},
      {R"({"crop_size": {"height": 0, "width": 4}})", "\"height\""},
      {R"({"image_std": [0.5, 0.0, 0.5]})", "\"image_std\""},
      {R"({"image_mean": [0.5, 0.5]})", "\"image_mean\""},
      {R"({"do_resize": "yes"})", "\"do_resize\""},
      {"{", "not valid JSON"},
  };
  for (const auto& [text, says] : cases) {
    SCOPED_TRACE(text);
    write_file_atomic(path, std::string(text));
    const std::string e = error_of([&] { read_clip_image_config(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace megadlm
