// score_shapes: how often a LLaVA model's answers about the shapes pictures (make_shapes, docs/llava.md)
// name the right colour, shape and count. Reads generate's --output .jsonl ("generation", "image") and
// the pictures' <split>.jsonl ("image", "caption"), line by line in the same order; each answer is cut
// at its first "<|im_end|>" or line break and read with read_shape_caption, as the caption is.
//   score_shapes --answers answers.jsonl --truth data/shapes/test.jsonl [--output scores.json]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cli_flags.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/shape_scenes.h"

using namespace megadlm;

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path, const char* flag) {
  std::ifstream in = open_input_file(path, flag, false);
  std::vector<nlohmann::json> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", n, ": invalid JSON (", e.what(), ")");
    }
  }
  return out;
}

std::string string_key(const nlohmann::json& j, const char* key, const std::string& where) {
  MEGADLM_CHECK(j.contains(key) && j[key].is_string(), where, ": no string \"", key, "\"");
  return j[key].get<std::string>();
}

// The answer itself: up to the end of the assistant's turn.
std::string answer_text(std::string s) {
  for (const char* end : {"<|im_end|>", "\n"})
    if (const size_t at = s.find(end); at != std::string::npos) s.resize(at);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("score_shapes", "Score a LLaVA model's answers about the shapes pictures.");
    f.add_string("answers", "", "generate's --output .jsonl (\"generation\", \"image\")", true);
    f.add_string("truth", "", "make_shapes' <split>.jsonl (\"image\", \"caption\")", true);
    f.add_string("output", "", "write the scores as JSON here");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    const std::vector<nlohmann::json> answers = read_jsonl(f.get_string("answers"), "--answers");
    const std::vector<nlohmann::json> truth = read_jsonl(f.get_string("truth"), "--truth");
    MEGADLM_CHECK(answers.size() == truth.size(), "--answers has ", answers.size(), " lines but --truth ", truth.size());
    int64_t colour = 0, shape = 0, count = 0, colour_shape = 0, all = 0;
    for (size_t i = 0; i < answers.size(); ++i) {
      const std::string where = f.get_string("answers") + ":" + std::to_string(i + 1);
      const std::string image = string_key(answers[i], "image", where);
      const std::string want_image = string_key(truth[i], "image", f.get_string("truth"));
      MEGADLM_CHECK(image.size() >= want_image.size() &&
                        image.compare(image.size() - want_image.size(), want_image.size(), want_image) == 0,
                    where, ": the answer is about ", image, " but line ", i + 1, " of --truth is ", want_image);
      const CaptionReading got = read_shape_caption(answer_text(string_key(answers[i], "generation", where)));
      const CaptionReading want = read_shape_caption(string_key(truth[i], "caption", f.get_string("truth")));
      colour += got.colour == want.colour;
      shape += got.shape == want.shape;
      count += got.count == want.count;
      colour_shape += got.colour == want.colour && got.shape == want.shape;
      all += got.colour == want.colour && got.shape == want.shape && got.count == want.count;
    }
    const double n = static_cast<double>(std::max<size_t>(1, answers.size()));
    const nlohmann::json scores = {{"pictures", answers.size()},     {"colour", colour / n},
                                   {"shape", shape / n},             {"count", count / n},
                                   {"colour_and_shape", colour_shape / n}, {"all_three", all / n}};
    std::printf("%s\n", scores.dump().c_str());
    if (!f.get_string("output").empty()) write_file_atomic(f.get_string("output"), scores.dump(2) + "\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "score_shapes: error: %s\n", e.what());
    return 1;
  }
}
