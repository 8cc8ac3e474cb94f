#pragma once
// Images for the vision-language family: PNG and JPEG files decoded to 8-bit RGB as transformers'
// image processors see them (PIL's Image.open, then transformers' convert_to_rgb, which composites any
// transparency onto white): the pixels CLIP's image processor starts from.
//   - PNG (libpng): palette and low-bit grayscale expanded, 16-bit samples reduced to their high byte,
//     grayscale replicated into R, G and B; alpha (or a tRNS colour key) composited onto opaque white
//     with PIL's alpha_composite arithmetic; gAMA, cHRM and iCCP are ignored, as PIL ignores them.
//   - JPEG (libjpeg-turbo): baseline and progressive, YCbCr or grayscale, decoded with the library's
//     defaults (islow IDCT, fancy upsampling) into RGB. CMYK / YCCK files are refused.
// A file whose data ends early or is damaged (a libpng error, any libjpeg warning of corrupt data) is
// an Error, as PIL raises one for a truncated image; nothing is padded.
// Legend: H height, W width (pixels).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megadlm {

struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // [H, W, 3], row-major, R G B
};

// Images with more pixels than this are refused before anything is allocated: PIL's
// Image.MAX_IMAGE_PIXELS, where it warns of a decompression bomb.
constexpr int64_t kMaxImagePixels = 89478485;

// The image in `bytes`, a PNG or JPEG file recognised by its signature; `name` (the file's path)
// leads every error message.
RgbImage decode_image(std::string_view bytes, const std::string& name);
// The file at `path`, read and decoded; Errors name the path.
RgbImage read_image(const std::string& path);

// The decoders behind decode_image, for a file already recognised by its signature.
RgbImage decode_png(std::string_view bytes, const std::string& name);
RgbImage decode_jpeg(std::string_view bytes, const std::string& name);

// RGBA [H, W, 4] composited onto opaque white, as PIL's Image.alpha_composite(white, rgba) rounds it.
RgbImage composite_on_white(const std::vector<uint8_t>& rgba, int64_t height, int64_t width);

// Errors naming `name` unless 1 <= height, width and height * width <= kMaxImagePixels.
void check_image_size(int64_t height, int64_t width, const std::string& name);

}  // namespace megadlm
