// make_shapes: pictures of coloured shapes with their captions, the data of the LLaVA demo
// (docs/llava.md): one to three circles, squares or triangles of one of six colours per picture.
//   make_shapes --output data/shapes --num-train 4000 --num-test 200 --image-size 64 --seed 1234
// writes data/shapes/images/{train,test}/NNNNNN.png and, per split,
//   <split>.jsonl       {"image": ..., "text": "<image>two red circles", "caption", "colour", "shape", "count"}
//   <split>_chat.jsonl  LLaVA's conversation form: "What is in the picture?" -> "Two red circles."
// and preprocessor_config.json (CLIP's processor at the pictures' own size), for
// `preprocess_data --image-key image --image-processor data/shapes`. Test pictures are scenes
// num-train .. num-train + num-test - 1 of the seed: never a training picture.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cli_flags.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "data/clip_image_processor.h"
#include "data/image_write.h"
#include "data/shape_scenes.h"

using namespace megadlm;

namespace {

struct Split {
  const char* name;
  uint64_t first, count;
};

void write_split(const std::string& out, const Split& split, uint64_t seed, int64_t S) {
  const std::string folder = out + "/images/" + split.name;
  std::filesystem::create_directories(folder);
  std::string captions, chats;
  for (uint64_t k = 0; k < split.count; ++k) {
    const ShapeScene scene = shape_scene(seed, split.first + k, S);
    char name[32];
    std::snprintf(name, sizeof(name), "%06llu.png", static_cast<unsigned long long>(k));
    const std::string rel = std::string("images/") + split.name + "/" + name;
    write_png(out + "/" + rel, draw_shape_scene(scene, S));
    const std::string caption = shape_caption(scene);
    nlohmann::json c = {{"image", rel},
                        {"text", "<image>" + caption},
                        {"caption", caption},
                        {"colour", shape_colour_name(scene.colour)},
                        {"shape", shape_name(scene.shape, false)},
                        {"count", scene.items.size()}};
    captions += c.dump() + "\n";
    std::string answer = caption + ".";
    answer[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(answer[0])));
    nlohmann::json chat = {{"image", rel},
                           {"conversations",
                            {{{"from", "human"}, {"value", "<image>\nWhat is in the picture?"}},
                             {{"from", "gpt"}, {"value", answer}}}}};
    chats += chat.dump() + "\n";
    if ((k + 1) % 1000 == 0) log_info("make_shapes: ", split.name, " ", k + 1, " / ", split.count, " pictures");
  }
  write_file_atomic(out + "/" + split.name + ".jsonl", captions);
  write_file_atomic(out + "/" + split.name + "_chat.jsonl", chats);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags flags("make_shapes", "Draws pictures of coloured shapes with captions (vision-language demo data).");
    flags.add_string("output", "", "output folder", true);
    flags.add_int("num-train", 4000, "training pictures", at_least(0));
    flags.add_int("num-test", 200, "held-out pictures", at_least(0));
    flags.add_int("image-size", 64, "side of the square pictures, pixels", at_least(16));
    flags.add_int("seed", 1234, "seed of the scenes");
    flags.parse(argc, argv);
    if (flags.help_requested()) {
      std::fputs(flags.help().c_str(), stdout);
      return 0;
    }
    const std::string out = flags.get_string("output");
    const int64_t S = flags.get_int("image-size");
    MEGADLM_CHECK(S <= 4096, "--image-size ", S, " is larger than 4096");
    std::filesystem::create_directories(out);
    check_creatable("--output", out + "/train.jsonl");
    const auto seed = static_cast<uint64_t>(flags.get_int("seed"));
    const auto n_train = static_cast<uint64_t>(flags.get_int("num-train")), n_test = static_cast<uint64_t>(flags.get_int("num-test"));
    write_split(out, {"train", 0, n_train}, seed, S);
    write_split(out, {"test", n_train, n_test}, seed, S);
    ClipImageConfig proc;  // CLIP's mean and std, at the pictures' own size: no resampling
    proc.shortest_edge = proc.crop_height = proc.crop_width = S;
    write_file_atomic(out + "/preprocessor_config.json", clip_image_config_json(proc).dump(2) + "\n");
    std::printf("%s: %llu training and %llu held-out pictures of %lld x %lld\n", out.c_str(),
                static_cast<unsigned long long>(n_train), static_cast<unsigned long long>(n_test),
                static_cast<long long>(S), static_cast<long long>(S));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "make_shapes: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_shapes: internal error: %s\n", e.what());
    return 2;
  }
}
