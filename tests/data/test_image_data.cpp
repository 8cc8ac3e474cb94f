// Vision-language data (data/image_data.h, preprocess_data --image-key): each line's images stored
// resized and cropped beside its tokens, the placeholder as one token, the pixel values read back equal
// to transformers' CLIPImageProcessor's (through the fixtures of tools/reference/make_clip_image_fixture.py),
// and the errors of bad lines, flags and files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/chat_template.h"
#include "data/clip_image_processor.h"
#include "data/image.h"
#include "data/image_data.h"
#include "data/indexed_dataset.h"
#include "data/loss_mask.h"
#include "data/preprocess.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::error_of;
using test::TempDir;

const std::string kImages = std::string(MEGADLM_SOURCE_DIR) + "/tests/data/fixtures/images";

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  write_file_atomic(path, text);
}

PreprocessOptions image_options(const TempDir& dir, const std::string& input) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = dir / "out";
  o.tokenizer.type = "ByteTokenizer";
  o.image_key = "image";
  o.image_folder = kImages;
  o.image_processor = kImages + "/small";  // shortest edge 40, 32 x 32 crop
  o.log = false;
  return o;
}

std::vector<float> expected_pixels(const std::string& key) {
  static const SafetensorsFile f(kImages + "/expected.safetensors");
  const Tensor t = f.get(key);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Captions with zero, one and two images: the stored pixel values are transformers' (torchvision
// backend) for each file, the placeholders single ids where the text has them.
TEST(ImageData, StoredImagesGiveTransformersPixelValuesAndPlaceholdersAreOneToken) {
  TempDir dir;
  write_lines(dir / "in.jsonl", {R"({"image": "rgb.png", "text": "<image>\nwaves"})",
                                 R"({"text": "no image"})",
                                 R"({"image": ["photo.jpg", "palette.png"], "text": "a <image> b <image>"})"});
  const PreprocessResult r = preprocess_jsonl(image_options(dir, dir / "in.jsonl"));
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.images, 3);
  EXPECT_EQ(r.bad_lines, 0);

  const ImageDataset images(r.image_prefix);
  const IndexedDataset tokens(r.output_prefixes[0]);
  images.check_aligned(tokens);
  ASSERT_EQ(images.num_documents(), 3);
  EXPECT_EQ(images.height(), 32);
  EXPECT_EQ(images.width(), 32);
  EXPECT_EQ(images.images_in_document(0), 1);
  EXPECT_EQ(images.images_in_document(1), 0);
  EXPECT_EQ(images.images_in_document(2), 2);

  const DataSidecar side = read_data_sidecar(r.output_prefixes[0]);
  EXPECT_EQ(side.image_data, "out_image_pixels");
  EXPECT_EQ(side.image_token, images.token_id());
  EXPECT_EQ(side.image_token, 257);  // the byte tokenizer's 256 ids, eod, then the added placeholder
  EXPECT_EQ(side.spec.added_special_tokens, std::vector<std::string>{"<image>"});

  const int64_t n = 3 * 32 * 32;
  std::vector<float> px(static_cast<size_t>(2 * n));
  const std::pair<int64_t, std::vector<std::string>> docs[] = {{0, {"rgb"}}, {2, {"photo", "palette"}}};
  for (const auto& [doc, names] : docs) {
    images.pixel_values(doc, px.data());
    for (size_t k = 0; k < names.size(); ++k) {
      SCOPED_TRACE(names[k]);
      const std::vector<float> want = expected_pixels(names[k] + ".tv");
      double most = 0.0;
      for (int64_t i = 0; i < n; ++i) most = std::max(most, std::fabs(double(px[k * n + i]) - want[i]));
      EXPECT_LE(most, 1e-5);
    }
  }

  const std::vector<int32_t> first = tokens.get(0), last = tokens.get(tokens.num_sequences() - 1);
  EXPECT_EQ(first.front(), 257);
  EXPECT_EQ(std::count(first.begin(), first.end(), 257), 1);
  EXPECT_EQ(std::count(last.begin(), last.end(), 257), 2);
  EXPECT_EQ(last.size(), std::string("a  b ").size() + 2);  // every other byte is a text byte
}

TEST(ImageData, OutputIsTheSameForAnyNumberOfWorkers) {
  TempDir dir;
  std::vector<std::string> lines;
  const char* files[] = {"rgb.png", "photo.jpg", "gray.png", "progressive.jpg", "rgba.png"};
  for (int i = 0; i < 40; ++i)
    lines.push_back(std::string(R"({"image": ")") + files[i % 5] + R"(", "text": "line )" + std::to_string(i) + R"( <image>"})");
  write_lines(dir / "in.jsonl", lines);
  std::string bins[2];
  for (int w : {1, 2}) {
    PreprocessOptions o = image_options(dir, dir / "in.jsonl");
    o.workers = w;
    o.chunk_bytes = 256;  // several chunks in flight
    o.output_prefix = dir / ("w" + std::to_string(w));
    const PreprocessResult r = preprocess_jsonl(o);
    EXPECT_EQ(r.images, 40);
    bins[w - 1] = read_file(r.image_prefix + ".bin") + read_file(r.image_prefix + ".idx") +
                  read_file(r.output_prefixes[0] + ".bin");
  }
  EXPECT_EQ(bins[0], bins[1]);
}

// LLaVA's conversation form with a chat template: the placeholder in the user's turn is one token with
// loss mask 0, the answer's tokens have mask 1.
TEST(ImageData, LlavaConversationsKeepThePlaceholderOutOfTheLoss) {
  TempDir dir;
  write_lines(dir / "in.jsonl", {R"({"image": "gray.png", "conversations": [{"from": "human", "value": "<image>\nWhat?"},)"
                                 R"( {"from": "gpt", "value": "Gray."}]})"});
  PreprocessOptions o = image_options(dir, dir / "in.jsonl");
  o.chat_template = "chatml";
  const PreprocessResult r = preprocess_jsonl(o);
  ASSERT_EQ(r.documents, 1);
  EXPECT_EQ(r.images, 1);
  const IndexedDataset tokens(r.output_prefixes[0]);
  const IndexedDataset mask(loss_mask_prefix(r.output_prefixes[0]));
  const std::vector<int32_t> ids = tokens.get(0), m = mask.get(0);
  const int32_t image_id = read_data_sidecar(r.output_prefixes[0]).image_token;
  const auto at = std::find(ids.begin(), ids.end(), image_id);
  ASSERT_NE(at, ids.end());
  EXPECT_EQ(m[at - ids.begin()], 0);
  // The response is the answer and ChatML's end-of-turn marker, bytes with the byte tokenizer.
  EXPECT_EQ(r.response_tokens, static_cast<int64_t>(std::string("Gray.<|im_end|>").size()));
}

TEST(ImageData, BadLinesSayWhichImageAndWhy) {
  TempDir dir;
  write_file_atomic(dir / "cut.png", read_file(kImages + "/rgb.png").substr(0, 500));
  write_lines(dir / "in.jsonl", {R"({"image": "rgb.png", "text": "<image> fine"})",
                                 R"({"image": "no_such.png", "text": "<image>"})",
                                 R"({"image": ")" + (dir / "cut.png") + R"(", "text": "<image>"})",
                                 R"({"image": "rgb.png", "text": "no placeholder"})",
                                 R"({"image": ["rgb.png"], "text": "<image> <image>"})",
                                 R"({"image": {"path": "rgb.png"}, "text": "<image>"})",
                                 R"({"image": "", "text": "<image>"})"});
  PreprocessOptions o = image_options(dir, dir / "in.jsonl");
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 1);
  EXPECT_EQ(r.images, 1);
  ASSERT_EQ(r.bad.size(), 6u);
  const std::pair<int64_t, const char*> want[] = {{2, "no_such.png"},          {3, "cut.png: damaged PNG"},
                                                  {4, "0 '<image>' placeholder(s) but the line has 1"},
                                                  {5, "2 '<image>' placeholder(s) but the line has 1"},
                                                  {6, "key 'image'"},          {7, "an image path is empty"}};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r.bad[i].line, want[i].first);
    EXPECT_NE(r.bad[i].reason.find(want[i].second), std::string::npos) << r.bad[i].reason;
  }
  // The datasets stay aligned: one document each.
  EXPECT_EQ(ImageDataset(r.image_prefix).num_documents(), 1);
  EXPECT_EQ(IndexedDataset(r.output_prefixes[0]).num_documents(), 1);
  // --strict stops at the first and leaves nothing under the final names.
  o.strict = true;
  o.output_prefix = dir / "strict";
  const std::string e = error_of([&] { preprocess_jsonl(o); });
  EXPECT_NE(e.find(":2: "), std::string::npos) << e;
  EXPECT_NE(e.find("no_such.png"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "strict_image_pixels.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "strict_text_document.bin"));
}

TEST(ImageData, ImpossibleOptionsNameTheFlag) {
  TempDir dir;
  write_lines(dir / "in.jsonl", {R"({"image": "rgb.png", "text": "<image>"})"});
  write_file_atomic(dir / "nocrop.json", std::string(R"({"do_center_crop": false})"));
  const std::pair<std::function<void(PreprocessOptions&)>, const char*> cases[] = {
      {[](PreprocessOptions& o) { o.split_sentences = true; }, "--image-key does not apply with --split-sentences"},
      {[](PreprocessOptions& o) { o.json_keys = {"text", "title"}; }, "--image-key takes one text key"},
      {[&](PreprocessOptions& o) { o.image_folder = dir / "nowhere"; }, "--image-folder"},
      {[&](PreprocessOptions& o) { o.image_processor = dir / "nocrop.json"; }, "stored images need one size"},
      {[&](PreprocessOptions& o) { o.image_processor = dir / "absent.json"; }, "absent.json"},
      {[](PreprocessOptions& o) { o.image_rounding = "nearest"; }, "--image-rounding 'nearest'"},
      {[](PreprocessOptions& o) { o.image_token = ""; }, "--image-token is empty"},
  };
  for (const auto& [change, says] : cases) {
    PreprocessOptions o = image_options(dir, dir / "in.jsonl");
    change(o);
    const std::string e = error_of([&] { preprocess_jsonl(o); });
    EXPECT_NE(e.find(says), std::string::npos) << says << " / " << e;
  }
}

TEST(ImageData, ReaderRefusesBadFiles) {
  TempDir dir;
  write_lines(dir / "in.jsonl", {R"({"image": "rgb.png", "text": "<image>"})", R"({"image": "gray.png", "text": "<image>"})"});
  const PreprocessResult r = preprocess_jsonl(image_options(dir, dir / "in.jsonl"));
  const std::string side = image_sidecar_path(r.image_prefix);
  const std::string good = read_file(side);
  // The sidecar's size disagrees with the stored images.
  std::string wrong = good;
  wrong.replace(wrong.find("\"height\": 32"), 12, "\"height\": 31");
  write_file_atomic(side, wrong);
  const std::string size_error = error_of([&] { ImageDataset d(r.image_prefix); });
  EXPECT_NE(size_error.find("has 3072 values, not 31 x 32 x 3"), std::string::npos) << size_error;
  write_file_atomic(side, std::string("{"));
  EXPECT_NE(error_of([&] { ImageDataset d(r.image_prefix); }).find(side), std::string::npos);
  std::filesystem::remove(side);
  EXPECT_NE(error_of([&] { ImageDataset d(r.image_prefix); }).find(side), std::string::npos);
  write_file_atomic(side, good);
  // Tokens of another run do not align.
  write_lines(dir / "one.jsonl", {R"({"text": "x"})"});
  PreprocessOptions o;
  o.input = dir / "one.jsonl";
  o.output_prefix = dir / "other";
  o.tokenizer.type = "ByteTokenizer";
  o.log = false;
  const PreprocessResult other = preprocess_jsonl(o);
  const std::string e = error_of([&] { ImageDataset(r.image_prefix).check_aligned(IndexedDataset(other.output_prefixes[0])); });
  EXPECT_NE(e.find("has 2 documents but its tokens"), std::string::npos) << e;
}

}  // namespace
}  // namespace megadlm
