#pragma once
// Pictures of coloured shapes with their captions (make_shapes, the LLaVA demo's data): each scene is
// one to three copies of one shape (circle, square, triangle) in one colour (six), of random sizes at
// random places that do not overlap, on a light grey square canvas, with its caption ("two red
// circles"). Scene k of a seed is always the same picture: every draw comes from Philox4x32-10
// keyed by the seed and counted by (k, draw), so a split of indices is a split of pictures.
// Legend: S the canvas's side in pixels.
#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"

namespace megadlm {

enum class ShapeKind : uint8_t { Circle, Square, Triangle };
constexpr int kNumShapeKinds = 3;
constexpr int kNumShapeColours = 6;
constexpr int kMaxShapeCount = 3;

struct ShapeScene {
  ShapeKind shape = ShapeKind::Circle;
  int colour = 0;  // [0, kNumShapeColours)
  struct Item {
    double cx = 0, cy = 0, r = 0;  // centre and half-size, pixels
  };
  std::vector<Item> items;  // 1 to kMaxShapeCount
};

const char* shape_name(ShapeKind s, bool plural);  // "circle" / "circles", ...
const char* shape_colour_name(int colour);         // "red", "green", "blue", "yellow", "purple", "orange"
const char* count_word(int n);                     // "one", "two", "three"

// Scene `index` of `seed` on a canvas of S pixels (S >= 16).
ShapeScene shape_scene(uint64_t seed, uint64_t index, int64_t S);
// The scene drawn: S x S RGB, each pixel the colour of the shape its centre lies in, else the canvas's.
RgbImage draw_shape_scene(const ShapeScene& scene, int64_t S);
// "two red circles".
std::string shape_caption(const ShapeScene& scene);

// What a caption says, read back leniently (case and punctuation ignored, the first word of each kind):
// the colour, the shape and the count it names, -1 where it names none. For scoring generated captions.
struct CaptionReading {
  int colour = -1, shape = -1, count = -1;
};
CaptionReading read_shape_caption(const std::string& text);

}  // namespace megadlm
