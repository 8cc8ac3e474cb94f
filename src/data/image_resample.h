#pragma once
// Bicubic resizing of 8-bit RGB images with antialiasing, as PIL's Image.resize(..., BICUBIC) and
// torchvision's resize(uint8 tensor, BICUBIC, antialias=True) compute it, to the last bit:
//   - separable: a horizontal pass (when the width changes) into an 8-bit image, then a vertical pass
//     (when the height changes);
//   - output pixel i of a pass is centred at (i + 0.5) * s in the input, s = in / out; the filter is
//     Keys' cubic with a = -0.5, stretched by max(s, 1) when shrinking (support 2 max(s, 1)); the taps
//     run over the input pixels [int(centre - support + 0.5), int(centre + support + 0.5)) clipped to
//     the image, and are normalised to sum 1;
//   - the taps become fixed-point integers, round-half-away-from-zero, and each output is
//     clamp((2^(p-1) + sum tap * pixel) >> p, 0, 255).
// The two libraries differ only in p: PIL takes 22 bits; torchvision takes, per pass, the most bits
// (up to 22) that keep the largest tap in an int16.
// Legend: H, W input height and width; OH, OW output height and width.
#include <cstdint>

#include "data/image.h"

namespace megadlm {

enum class ResizeRounding { Torchvision, Pil };

// image [H, W, 3] -> [OH, OW, 3]. OH, OW >= 1.
RgbImage resize_bicubic(const RgbImage& image, int64_t OH, int64_t OW, ResizeRounding rounding);

}  // namespace megadlm
