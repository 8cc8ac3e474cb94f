// encode_png with libpng's writing API into memory. libpng reports errors by longjmp: the output and
// the message live in PngWrite (the caller's frame), and write_rows, the only function that calls
// setjmp, throws nothing between setjmp and its last libpng call.
#include <png.h>

#include <csetjmp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/image_write.h"

namespace megadlm {

namespace {

struct PngWrite {
  std::string bytes;
  std::string error;
  std::vector<png_bytep> rows;
};

void on_write_error(png_structp png, png_const_charp message) {
  auto* w = static_cast<PngWrite*>(png_get_error_ptr(png));
  if (w->error.empty()) w->error = message;
  png_longjmp(png, 1);
}
void on_write_warning(png_structp, png_const_charp) {}
void on_write(png_structp png, png_bytep data, size_t n) {
  static_cast<PngWrite*>(png_get_io_ptr(png))->bytes.append(reinterpret_cast<const char*>(data), n);
}
void on_flush(png_structp) {}

bool write_rows(png_structp png, png_infop info, PngWrite* w, png_uint_32 width, png_uint_32 height) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, w, on_write, on_flush);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, w->rows.data());
  png_write_end(png, nullptr);
  return true;
}

struct PngWriteHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriteHandles() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

}  // namespace

std::string encode_png(const RgbImage& image) {
  check_image_size(image.height, image.width, "encode_png");
  MEGADLM_CHECK(image.pixels.size() == static_cast<size_t>(image.height * image.width * 3), "encode_png: ",
                image.pixels.size(), " samples for ", image.width, " x ", image.height, " RGB pixels");
  PngWrite w;
  w.rows.resize(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y)
    w.rows[y] = const_cast<png_bytep>(image.pixels.data() + y * image.width * 3);  // libpng reads them only
  PngWriteHandles h;
  h.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_write_error, on_write_warning);
  MEGADLM_CHECK(h.png, "encode_png: libpng could not start (out of memory)");
  h.info = png_create_info_struct(h.png);
  MEGADLM_CHECK(h.info, "encode_png: libpng could not start (out of memory)");
  if (!write_rows(h.png, h.info, &w, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height)))
    fail("encode_png: ", w.error);
  return std::move(w.bytes);
}

void write_png(const std::string& path, const RgbImage& image) { write_file_atomic(path, encode_png(image)); }

}  // namespace megadlm
