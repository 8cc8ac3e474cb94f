#pragma once
// The LLaVA training tests' data and flags: a few shapes pictures (data/shape_scenes.h, 16 x 16, patches
// of 8: P = 4) with their conversations preprocessed as LLaVA data, and a tiny run's flags.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/clip_image_processor.h"
#include "data/image_write.h"
#include "data/preprocess.h"
#include "data/shape_scenes.h"
#include "test_util.h"

namespace megadlm::test {

constexpr int64_t kImage = 16, kP = 4;  // pictures of 16 x 16 in patches of 8

// `n` shapes pictures with their conversations, preprocessed (ByteTokenizer, chatml); returns the
// conversation prefix.
inline std::string make_llava_data(const TempDir& dir, int n) {
  std::string lines;
  for (int k = 0; k < n; ++k) {
    const ShapeScene scene = shape_scene(7, static_cast<uint64_t>(k), kImage);
    const std::string name = "pic" + std::to_string(k) + ".png";
    write_png(dir / name, draw_shape_scene(scene, kImage));
    const nlohmann::json line = {
        {"image", name},
        {"conversations",
         {{{"from", "human"}, {"value", "<image>\nWhat?"}}, {{"from", "gpt"}, {"value", shape_caption(scene)}}}}};
    lines += line.dump() + "\n";
  }
  write_file_atomic(dir / "chat.jsonl", lines);
  ClipImageConfig processor;
  processor.shortest_edge = kImage;
  processor.crop_height = processor.crop_width = kImage;
  write_file_atomic(dir / "preprocessor_config.json", clip_image_config_json(processor).dump());
  PreprocessOptions o;
  o.input = dir / "chat.jsonl";
  o.output_prefix = dir / "llava";
  o.tokenizer.type = "ByteTokenizer";
  o.chat_template = "chatml";
  o.image_key = "image";
  o.image_processor = dir / "preprocessor_config.json";
  o.log = false;
  return preprocess_jsonl(o).output_prefixes.at(0);
}

inline std::vector<std::string> llava_flags(const std::string& data, const std::string& lm) {
  return {"pretrain_difflm", "--model-type", "llava", "--language-model-type", lm, "--sft", "--num-layers", "1",
          "--hidden-size", "32", "--num-heads", "4", "--position-embedding-type", "rope", "--seq-length", "96",
          "--micro-batch-size", "2", "--global-batch-size", "4", "--data-path", data, "--split", "100,0,0",
          "--make-vocab-size-divisible-by", "16", "--lr", "3e-3", "--lr-warmup-iters", "1", "--log-interval", "1",
          "--eval-iters", "0", "--seed", "5", "--img-h", "16", "--img-w", "16", "--patch-dim", "8",
          "--vision-num-layers", "2", "--vision-hidden-size", "16", "--vision-num-attention-heads", "2",
          "--vision-ffn-hidden-size", "32", "--data-cache-path", data + "_cache"};
}

}  // namespace megadlm::test
