#include "data/image.h"

#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

namespace {

bool starts_with(std::string_view bytes, std::string_view magic) { return bytes.substr(0, magic.size()) == magic; }

}  // namespace

void check_image_size(int64_t height, int64_t width, const std::string& name) {
  MEGADLM_CHECK(height >= 1 && width >= 1, name, ": the image is ", width, " x ", height,
                " pixels: it has no pixels");
  MEGADLM_CHECK(height <= kMaxImagePixels / width, name, ": the image is ", width, " x ", height,
                " pixels, more than the ", kMaxImagePixels, " an image may have (PIL's MAX_IMAGE_PIXELS)");
}

// PIL's integer form with 7 extra bits, for an opaque white destination: the source's weight is
// alpha * 2^7 / 255, white's the rest, and the sum is divided by 255 with rounding by two shifts.
RgbImage composite_on_white(const std::vector<uint8_t>& rgba, int64_t height, int64_t width) {
  RgbImage out{height, width, std::vector<uint8_t>(static_cast<size_t>(height * width * 3))};
  const size_t n = static_cast<size_t>(height * width);
  for (size_t p = 0; p < n; ++p) {
    const uint32_t a = rgba[p * 4 + 3];
    for (int c = 0; c < 3; ++c) {
      if (a == 0) {
        out.pixels[p * 3 + c] = 255;
        continue;
      }
      const uint32_t t = rgba[p * 4 + c] * (a << 7) + 255u * ((255u - a) << 7) + (0x80u << 7);
      out.pixels[p * 3 + c] = static_cast<uint8_t>(((((t >> 8) + t) >> 8)) >> 7);
    }
  }
  return out;
}

RgbImage decode_image(std::string_view bytes, const std::string& name) {
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return decode_png(bytes, name);
  if (starts_with(bytes, "\xff\xd8\xff")) return decode_jpeg(bytes, name);
  fail(name, ": not a PNG or JPEG image (", bytes.empty() ? "the file is empty" : "unknown signature", ")");
}

RgbImage read_image(const std::string& path) { return decode_image(read_file(path, "image"), path); }

}  // namespace megadlm
