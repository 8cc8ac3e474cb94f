#include "data/image_resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace megadlm {

namespace {

double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The taps of one pass: output i reads input pixels [first[i], first[i] + count[i]) with the weights
// taps[i * K ...], K the most taps any output has.
struct Taps {
  int64_t K = 0;
  std::vector<int64_t> first, count;
  std::vector<double> weight;  // [out, K], each row summing to 1
  std::vector<int32_t> fixed;  // [out, K], weight * 2^bits rounded half away from zero
  int bits = 0;
};

Taps bicubic_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double stretch = std::max(scale, 1.0);
  const double support = 2.0 * stretch;
  Taps t;
  t.K = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.weight.assign(static_cast<size_t>(out * t.K), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(centre - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(centre + support + 0.5), in);
    double* w = &t.weight[i * t.K];
    double sum = 0.0;
    for (int64_t j = 0; j < hi - lo; ++j) {
      w[j] = keys_cubic((static_cast<double>(j + lo) - centre + 0.5) / stretch);
      sum += w[j];
    }
    if (sum != 0.0)
      for (int64_t j = 0; j < hi - lo; ++j) w[j] /= sum;
    t.first[i] = lo;
    t.count[i] = hi - lo;
  }
  return t;
}

// PIL: 22 bits. torchvision: the most bits, up to 22, for which the largest tap times 2^(bits+1) stays
// below 2^15.
int fraction_bits(const Taps& t, ResizeRounding rounding) {
  if (rounding == ResizeRounding::Pil) return 22;
  const double largest = *std::max_element(t.weight.begin(), t.weight.end());
  int bits = 0;
  while (bits < 22 && static_cast<int32_t>(0.5 + largest * static_cast<double>(1 << (bits + 1))) < (1 << 15)) ++bits;
  return bits;
}

void make_fixed(Taps& t, ResizeRounding rounding) {
  t.bits = fraction_bits(t, rounding);
  const double one = static_cast<double>(1 << t.bits);
  t.fixed.resize(t.weight.size());
  for (size_t k = 0; k < t.weight.size(); ++k) {
    const double w = t.weight[k];
    t.fixed[k] = static_cast<int32_t>(w < 0.0 ? -0.5 + w * one : 0.5 + w * one);
  }
}

uint8_t round_to_u8(int64_t acc, int bits) {
  return static_cast<uint8_t>(std::clamp<int64_t>(acc >> bits, 0, 255));
}

// Along one axis: `lines` lines of `in_len` pixels (stride `step` between a line's pixels, `line_step`
// between lines) -> the same lines of t.first.size() pixels.
void resample_axis(const uint8_t* in, uint8_t* out, int64_t lines, int64_t line_step_in, int64_t line_step_out,
                   int64_t step, const Taps& t) {
  const int64_t n_out = static_cast<int64_t>(t.first.size());
  const int64_t half = int64_t{1} << (t.bits - 1);  // bits >= 14: every tap is at most about 1
  for (int64_t l = 0; l < lines; ++l) {
    const uint8_t* src = in + l * line_step_in;
    uint8_t* dst = out + l * line_step_out;
    for (int64_t i = 0; i < n_out; ++i) {
      const int32_t* w = &t.fixed[i * t.K];
      for (int c = 0; c < 3; ++c) {
        int64_t acc = half;
        for (int64_t j = 0; j < t.count[i]; ++j) acc += static_cast<int64_t>(w[j]) * src[(t.first[i] + j) * step + c];
        dst[i * step + c] = round_to_u8(acc, t.bits);
      }
    }
  }
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int64_t OH, int64_t OW, ResizeRounding rounding) {
  MEGADLM_CHECK(OH >= 1 && OW >= 1, "resize to ", OW, " x ", OH, " pixels: both sides must be at least 1");
  RgbImage cur = image;
  if (OW != cur.width) {
    Taps t = bicubic_taps(cur.width, OW);
    make_fixed(t, rounding);
    RgbImage next{cur.height, OW, std::vector<uint8_t>(static_cast<size_t>(cur.height * OW * 3))};
    // Rows are lines; a row's pixels are 3 bytes apart.
    resample_axis(cur.pixels.data(), next.pixels.data(), cur.height, cur.width * 3, OW * 3, 3, t);
    cur = std::move(next);
  }
  if (OH != cur.height) {
    Taps t = bicubic_taps(cur.height, OH);
    make_fixed(t, rounding);
    RgbImage next{OH, cur.width, std::vector<uint8_t>(static_cast<size_t>(OH * cur.width * 3))};
    // Columns are lines (one pixel, 3 bytes, apart); a column's pixels are a row apart.
    resample_axis(cur.pixels.data(), next.pixels.data(), cur.width, 3, 3, cur.width * 3, t);
    cur = std::move(next);
  }
  return cur;
}

}  // namespace megadlm
