#pragma once
// PNG encoding (libpng) of 8-bit RGB images: what make_shapes writes, and what tests write to read back.
#include <string>

#include "data/image.h"

namespace megadlm {

// The PNG file's bytes (8-bit RGB, no interlacing, default compression). Throws Error on a bad size.
std::string encode_png(const RgbImage& image);
// encode_png written to `path` atomically (core/file_io.h); Errors name the path.
void write_png(const std::string& path, const RgbImage& image);

}  // namespace megadlm
