// The shapes of the LLaVA demo (data/shape_scenes.h, make_shapes) and PNG writing (data/image_write.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/image.h"
#include "data/image_data.h"
#include "data/image_write.h"
#include "data/preprocess.h"
#include "data/shape_scenes.h"
#include "robustness/child_process.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::TempDir;

TEST(PngWrite, DecodesToTheSamePixels) {
  RgbImage img{7, 13, std::vector<uint8_t>(7 * 13 * 3)};
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>((i * 37 + i / 5) & 0xff);
  const RgbImage back = decode_image(encode_png(img), "made.png");
  EXPECT_EQ(back.height, 7);
  EXPECT_EQ(back.width, 13);
  EXPECT_EQ(back.pixels, img.pixels);
  EXPECT_THROW(encode_png(RgbImage{0, 3, {}}), Error);
  EXPECT_THROW(encode_png(RgbImage{2, 2, std::vector<uint8_t>(5)}), Error);
}

TEST(ShapeScenes, SameIndexSamePictureAndEveryShapeIsDrawnWhereItIs) {
  const int64_t S = 64;
  for (uint64_t k = 0; k < 50; ++k) {
    const ShapeScene a = shape_scene(7, k, S), b = shape_scene(7, k, S);
    ASSERT_EQ(a.items.size(), b.items.size());
    ASSERT_GE(a.items.size(), 1u);
    ASSERT_LE(a.items.size(), 3u);
    const RgbImage img = draw_shape_scene(a, S);
    EXPECT_EQ(img.pixels, draw_shape_scene(b, S).pixels);
    for (const ShapeScene::Item& it : a.items) {
      EXPECT_GE(it.cx - it.r, 0.0);
      EXPECT_LE(it.cx + it.r, double(S));
      EXPECT_GE(it.cy - it.r, 0.0);
      EXPECT_LE(it.cy + it.r, double(S));
      // The pixel under each centre (inside every kind of shape) has the scene's colour, not the canvas's.
      const auto at = (static_cast<int64_t>(it.cy) * S + static_cast<int64_t>(it.cx)) * 3;
      EXPECT_NE(img.pixels[at], 230);
    }
  }
  const RgbImage red_circle = draw_shape_scene(ShapeScene{ShapeKind::Circle, 0, {{32, 32, 8}}}, S);
  EXPECT_EQ(red_circle.pixels[(32 * S + 32) * 3], 220);  // red's R
  EXPECT_EQ(red_circle.pixels[0], 230);                  // the canvas in the corner
  // Another seed or index is another picture.
  EXPECT_NE(draw_shape_scene(shape_scene(7, 0, S), S).pixels, draw_shape_scene(shape_scene(8, 0, S), S).pixels);
  EXPECT_NE(draw_shape_scene(shape_scene(7, 0, S), S).pixels, draw_shape_scene(shape_scene(7, 1, S), S).pixels);
  EXPECT_THROW(shape_scene(7, 0, 8), Error);
}

// Colours, shapes and counts are drawn evenly: over 6000 scenes each share is within 0.03 of even.
TEST(ShapeScenes, ColoursShapesAndCountsAreEven) {
  std::vector<int> colours(kNumShapeColours), shapes(kNumShapeKinds), counts(kMaxShapeCount + 1);
  const int n = 6000;
  for (int k = 0; k < n; ++k) {
    const ShapeScene s = shape_scene(1234, k, 64);
    ++colours[s.colour];
    ++shapes[static_cast<int>(s.shape)];
    ++counts[s.items.size()];
  }
  for (int c : colours) EXPECT_NEAR(double(c) / n, 1.0 / kNumShapeColours, 0.03);
  for (int s : shapes) EXPECT_NEAR(double(s) / n, 1.0 / kNumShapeKinds, 0.03);
  for (int c = 1; c <= kMaxShapeCount; ++c) EXPECT_NEAR(double(counts[c]) / n, 1.0 / kMaxShapeCount, 0.03);
}

TEST(ShapeScenes, CaptionsReadBack) {
  for (int c = 0; c < kNumShapeColours; ++c)
    for (int s = 0; s < kNumShapeKinds; ++s)
      for (int n = 1; n <= kMaxShapeCount; ++n) {
        ShapeScene scene{static_cast<ShapeKind>(s), c, std::vector<ShapeScene::Item>(n)};
        const std::string caption = shape_caption(scene);
        const CaptionReading r = read_shape_caption(caption);
        EXPECT_EQ(r.colour, c) << caption;
        EXPECT_EQ(r.shape, s) << caption;
        EXPECT_EQ(r.count, n) << caption;
      }
  EXPECT_EQ(shape_caption(ShapeScene{ShapeKind::Triangle, 4, std::vector<ShapeScene::Item>(2)}), "two purple triangles");
  const CaptionReading r = read_shape_caption("Two RED squares.");
  EXPECT_EQ(r.colour, 0);
  EXPECT_EQ(r.shape, static_cast<int>(ShapeKind::Square));
  EXPECT_EQ(r.count, 2);
  const CaptionReading none = read_shape_caption("a reddish circlet");
  EXPECT_EQ(none.colour, -1);
  EXPECT_EQ(none.shape, -1);
  EXPECT_EQ(none.count, -1);
}

// make_shapes writes pictures, captions and a processor config that preprocess_data takes as they are.
TEST(MakeShapes, WritesDataThatPreprocessesAsIs) {
  MEGADLM_REQUIRE_BINARY("make_shapes");
  TempDir dir;
  const std::string out = dir / "shapes";
  const test::ChildResult r =
      test::run_binary("make_shapes", {"--output", out, "--num-train", "12", "--num-test", "3", "--image-size", "32"},
                       dir / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  std::ifstream in(out + "/test.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const RgbImage img = read_image(out + "/" + j["image"].get<std::string>());
    EXPECT_EQ(img.width, 32);
    const CaptionReading c = read_shape_caption(j["caption"].get<std::string>());
    EXPECT_EQ(shape_colour_name(c.colour), j["colour"].get<std::string>());
    EXPECT_EQ(j["text"].get<std::string>(), "<image>" + j["caption"].get<std::string>());
    ++lines;
  }
  EXPECT_EQ(lines, 3);
  for (const char* input : {"/train.jsonl", "/train_chat.jsonl"}) {
    PreprocessOptions o;
    o.input = out + input;
    o.output_prefix = dir / (std::string(input).find("chat") != std::string::npos ? "chat" : "captions");
    o.tokenizer.type = "ByteTokenizer";
    o.image_key = "image";
    o.image_processor = out;
    if (std::string(input).find("chat") != std::string::npos) o.chat_template = "chatml";
    o.log = false;
    const PreprocessResult p = preprocess_jsonl(o);
    EXPECT_EQ(p.documents, 12);
    EXPECT_EQ(p.images, 12);
    EXPECT_EQ(p.bad_lines, 0);
    EXPECT_EQ(ImageDataset(p.image_prefix).height(), 32);
  }
  // A bad flag is an error naming it.
  const test::ChildResult bad = test::run_binary("make_shapes", {"--output", out, "--image-size", "8"}, dir / "bad.txt");
  EXPECT_TRUE(bad.exited && bad.exit_code == 1);
  EXPECT_NE(bad.output.find("--image-size"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace megadlm
