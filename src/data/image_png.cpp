// decode_png (data/image.h) with libpng's progressive-free reading API. libpng reports errors by
// longjmp: every C++ object of the decoding lives in PngDecode (the caller's frame) or was made before
// setjmp, and the only function that calls setjmp, read_png, throws nothing between setjmp and its
// last libpng call.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "core/error.h"
#include "data/image.h"

namespace megadlm {

namespace {

struct PngDecode {
  std::string_view bytes;
  size_t pos = 0;
  std::string error;  // libpng's message, when it stopped with one
  png_uint_32 width = 0, height = 0;
  std::vector<uint8_t> rgba;  // [H, W, 4]
  std::vector<png_bytep> rows;
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* d = static_cast<PngDecode*>(png_get_error_ptr(png));
  if (d->error.empty()) d->error = message;
  png_longjmp(png, 1);
}

// Warnings are about ancillary chunks, which libpng drops; the image is still PIL's.
void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep out, size_t n) {
  auto* d = static_cast<PngDecode*>(png_get_io_ptr(png));
  if (d->bytes.size() - d->pos < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, d->bytes.data() + d->pos, n);
  d->pos += n;
}

// The header into d->width / d->height; false on a libpng error (d->error says which).
bool read_png_header(png_structp png, png_infop info, PngDecode* d) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, d, on_png_read);
  png_read_info(png, info);
  d->width = png_get_image_width(png, info);
  d->height = png_get_image_height(png, info);
  return true;
}

// The pixels, as 8-bit RGBA, into d->rows, which the caller has sized after checking the image's size;
// false on a libpng error.
bool read_png_pixels(png_structp png, png_infop info, PngDecode* d) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_expand(png);       // palette -> RGB, 1/2/4-bit gray -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);     // 16-bit samples -> their high byte
  png_set_gray_to_rgb(png);
  png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);  // opaque where the file has no alpha
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(d->width) * 4) png_error(png, "unexpected row layout");
  png_read_image(png, d->rows.data());
  png_read_end(png, nullptr);  // the chunks after the image, up to IEND: a file cut there is refused too
  return true;
}

struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngHandles() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

}  // namespace

RgbImage decode_png(std::string_view bytes, const std::string& name) {
  PngDecode d;
  d.bytes = bytes;
  PngHandles h;
  h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, on_png_error, on_png_warning);
  MEGADLM_CHECK(h.png, name, ": libpng could not start (out of memory)");
  h.info = png_create_info_struct(h.png);
  MEGADLM_CHECK(h.info, name, ": libpng could not start (out of memory)");
  if (!read_png_header(h.png, h.info, &d)) fail(name, ": not a valid PNG image: ", d.error);
  check_image_size(d.height, d.width, name);
  d.rgba.resize(static_cast<size_t>(d.height) * d.width * 4);
  d.rows.resize(d.height);
  for (png_uint_32 y = 0; y < d.height; ++y) d.rows[y] = d.rgba.data() + static_cast<size_t>(y) * d.width * 4;
  if (!read_png_pixels(h.png, h.info, &d)) fail(name, ": damaged PNG image: ", d.error);
  return composite_on_white(d.rgba, d.height, d.width);
}

}  // namespace megadlm
