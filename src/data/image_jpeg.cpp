// decode_jpeg (data/image.h) with libjpeg(-turbo). The library reports errors by longjmp: the
// decompressor and the error handler live in JpegDecode (the caller's frame), and the only function
// that calls setjmp, read_jpeg, throws nothing between setjmp and its last libjpeg call.
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE

#include <jpeglib.h>

#include "core/error.h"
#include "data/image.h"

namespace megadlm {

namespace {

struct JpegDecode {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool created = false;
  RgbImage* image = nullptr;
  std::string name;
  ~JpegDecode() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

JpegDecode* decode_of(j_common_ptr cinfo) { return static_cast<JpegDecode*>(cinfo->client_data); }

[[noreturn]] void on_jpeg_error(j_common_ptr cinfo) {
  JpegDecode* d = decode_of(cinfo);
  (*cinfo->err->format_message)(cinfo, d->message);
  std::longjmp(d->jump, 1);
}

// A warning (level -1) is corrupt or missing data that libjpeg would paper over ("Premature end of
// JPEG file", "Corrupt JPEG data: ..."): an error here. Trace messages (level >= 0) are ignored.
void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_jpeg_error(cinfo);
}

enum class JpegStep { Ok, LibraryError, Cmyk, TooLarge, NotRgb };

// The whole decode into d->image; what stopped it otherwise.
JpegStep read_jpeg(JpegDecode* d) {
  if (setjmp(d->jump)) return JpegStep::LibraryError;
  jpeg_read_header(&d->cinfo, TRUE);
  if (d->cinfo.jpeg_color_space == JCS_CMYK || d->cinfo.jpeg_color_space == JCS_YCCK) return JpegStep::Cmyk;
  const int64_t H = d->cinfo.image_height, W = d->cinfo.image_width;
  if (H < 1 || W < 1 || H > kMaxImagePixels / W) return JpegStep::TooLarge;
  d->cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d->cinfo);
  if (d->cinfo.output_components != 3) return JpegStep::NotRgb;
  d->image->height = H;
  d->image->width = W;
  d->image->pixels.resize(static_cast<size_t>(H * W * 3));
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW row = d->image->pixels.data() + static_cast<size_t>(d->cinfo.output_scanline) * W * 3;
    jpeg_read_scanlines(&d->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d->cinfo);
  return JpegStep::Ok;
}

}  // namespace

RgbImage decode_jpeg(std::string_view bytes, const std::string& name) {
  RgbImage image;
  JpegDecode d;
  d.image = &image;
  d.cinfo.err = jpeg_std_error(&d.err);
  d.err.error_exit = on_jpeg_error;
  d.err.emit_message = on_jpeg_message;
  d.cinfo.client_data = &d;
  if (setjmp(d.jump)) fail(name, ": libjpeg could not start: ", d.message);
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  jpeg_mem_src(&d.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  switch (read_jpeg(&d)) {
    case JpegStep::Ok:
      return image;
    case JpegStep::LibraryError:
      fail(name, ": damaged or unsupported JPEG image: ", d.message);
    case JpegStep::Cmyk:
      fail(name, ": a CMYK JPEG image; only RGB (YCbCr) and grayscale JPEG are read");
    case JpegStep::NotRgb:
      fail(name, ": libjpeg gave ", d.cinfo.output_components, " components per pixel, not RGB");
    case JpegStep::TooLarge:
      check_image_size(d.cinfo.image_height, d.cinfo.image_width, name);
  }
  fail(name, ": JPEG decoding stopped");
}

}  // namespace megadlm
