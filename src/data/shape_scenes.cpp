#include "data/shape_scenes.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace megadlm {

namespace {

constexpr uint8_t kColours[kNumShapeColours][3] = {{220, 40, 40},  {40, 170, 60},  {40, 80, 220},
                                                   {235, 200, 30}, {140, 60, 180}, {240, 130, 30}};
constexpr const char* kColourNames[kNumShapeColours] = {"red", "green", "blue", "yellow", "purple", "orange"};
constexpr uint8_t kCanvas[3] = {230, 230, 230};

// The scene's draws: uniform in [0, 1), the d-th of scene `index`.
class SceneDraws {
 public:
  SceneDraws(uint64_t seed, uint64_t index) : seed_(seed), index_(index) {}
  double next() {
    const Philox4 r = philox4x32_10({static_cast<uint32_t>(index_), static_cast<uint32_t>(index_ >> 32), draw_++, 0},
                                    {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32) ^ 0x53484150u});
    return static_cast<double>((static_cast<uint64_t>(r[0]) << 21) ^ r[1]) / static_cast<double>(uint64_t{1} << 53);
  }
  int below(int n) { return std::min(n - 1, static_cast<int>(next() * n)); }

 private:
  uint64_t seed_, index_;
  uint32_t draw_ = 0;
};

bool inside(const ShapeScene::Item& it, ShapeKind kind, double x, double y) {
  const double dx = x - it.cx, dy = y - it.cy;
  switch (kind) {
    case ShapeKind::Circle:
      return dx * dx + dy * dy <= it.r * it.r;
    case ShapeKind::Square:
      return std::fabs(dx) <= 0.85 * it.r && std::fabs(dy) <= 0.85 * it.r;
    case ShapeKind::Triangle:  // apex up: (0, -r), base from (-r, r) to (r, r)
      return dy <= it.r && dy >= -it.r && std::fabs(dx) <= (dy + it.r) / 2.0;
  }
  return false;
}

}  // namespace

const char* shape_name(ShapeKind s, bool plural) {
  switch (s) {
    case ShapeKind::Circle: return plural ? "circles" : "circle";
    case ShapeKind::Square: return plural ? "squares" : "square";
    case ShapeKind::Triangle: return plural ? "triangles" : "triangle";
  }
  return "?";
}

const char* shape_colour_name(int colour) {
  MEGADLM_CHECK(colour >= 0 && colour < kNumShapeColours, "shape colour ", colour, " is outside [0, ", kNumShapeColours, ")");
  return kColourNames[colour];
}

const char* count_word(int n) {
  static constexpr const char* kWords[] = {"one", "two", "three"};
  MEGADLM_CHECK(n >= 1 && n <= kMaxShapeCount, "shape count ", n, " is outside [1, ", kMaxShapeCount, "]");
  return kWords[n - 1];
}

ShapeScene shape_scene(uint64_t seed, uint64_t index, int64_t S) {
  MEGADLM_CHECK(S >= 16, "the canvas of ", S, " pixels is too small for shapes (at least 16)");
  SceneDraws d(seed, index);
  ShapeScene scene;
  scene.shape = static_cast<ShapeKind>(d.below(kNumShapeKinds));
  scene.colour = d.below(kNumShapeColours);
  const int count = 1 + d.below(kMaxShapeCount);
  const double side = static_cast<double>(S);
  while (static_cast<int>(scene.items.size()) < count) {
    // Half-sizes from S/12 to S/7; up to 200 places tried, then the shape goes where the last one fell.
    ShapeScene::Item it;
    for (int attempt = 0; attempt < 200; ++attempt) {
      it.r = side / 12.0 + d.next() * (side / 7.0 - side / 12.0);
      it.cx = it.r + 1.0 + d.next() * (side - 2.0 * it.r - 2.0);
      it.cy = it.r + 1.0 + d.next() * (side - 2.0 * it.r - 2.0);
      const bool clear = std::all_of(scene.items.begin(), scene.items.end(), [&](const ShapeScene::Item& o) {
        return std::hypot(o.cx - it.cx, o.cy - it.cy) > 1.2 * (o.r + it.r) + 2.0;
      });
      if (clear) break;
    }
    scene.items.push_back(it);
  }
  return scene;
}

RgbImage draw_shape_scene(const ShapeScene& scene, int64_t S) {
  RgbImage img{S, S, std::vector<uint8_t>(static_cast<size_t>(S * S * 3))};
  for (int64_t y = 0; y < S; ++y)
    for (int64_t x = 0; x < S; ++x) {
      const double px = static_cast<double>(x) + 0.5, py = static_cast<double>(y) + 0.5;
      const bool hit = std::any_of(scene.items.begin(), scene.items.end(),
                                   [&](const ShapeScene::Item& it) { return inside(it, scene.shape, px, py); });
      const uint8_t* c = hit ? kColours[scene.colour] : kCanvas;
      std::copy(c, c + 3, img.pixels.begin() + (y * S + x) * 3);
    }
  return img;
}

std::string shape_caption(const ShapeScene& scene) {
  const int n = static_cast<int>(scene.items.size());
  return std::string(count_word(n)) + " " + shape_colour_name(scene.colour) + " " + shape_name(scene.shape, n > 1);
}

CaptionReading read_shape_caption(const std::string& text) {
  CaptionReading out;
  std::string word;
  auto take = [&] {
    if (word.empty()) return;
    for (int c = 0; c < kNumShapeColours && out.colour < 0; ++c)
      if (word == kColourNames[c]) out.colour = c;
    for (int s = 0; s < kNumShapeKinds && out.shape < 0; ++s)
      if (word == shape_name(static_cast<ShapeKind>(s), false) || word == shape_name(static_cast<ShapeKind>(s), true))
        out.shape = s;
    for (int n = 1; n <= kMaxShapeCount && out.count < 0; ++n)
      if (word == count_word(n)) out.count = n;
    word.clear();
  };
  for (char ch : text) {
    if (std::isalpha(static_cast<unsigned char>(ch)))
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else
      take();
  }
  take();
  return out;
}

}  // namespace megadlm
