#include "cornstarch/data/image.h"

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// 64 megapixels (8192 x 8192): far beyond what an encoder takes, and a bound on what a small compressed file that
// declares huge dimensions can make us allocate.
constexpr uint64_t kMaxPixels = uint64_t{1} << 26;

void CheckDimensions(const std::string& path, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0 || width * height > kMaxPixels) {
    throw Error(path + ": image of " + std::to_string(width) + " x " + std::to_string(height) +
                " pixels; expected at least one and at most " + std::to_string(kMaxPixels) + " pixels");
  }
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open image: " + std::strerror(errno));
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// `header_only`: the dimensions, no pixels.
Image DecodePng(const std::string& path, const std::vector<uint8_t>& bytes, bool header_only) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    throw Error(path + ": not a readable PNG: " + png.message);
  }
  try {
    CheckDimensions(path, png.width, png.height);
  } catch (const Error&) {
    png_image_free(&png);
    throw;
  }
  png.format = PNG_FORMAT_RGB;  // libpng converts grey, palette, alpha (composited on black) and 16-bit input
  Image image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  if (header_only) {
    png_image_free(&png);
    return image;
  }
  image.rgb.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.rgb.data(), 0, nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    throw Error(path + ": corrupt PNG: " + message);
  }
  return image;
}

// libjpeg reports errors through a callback that must not return: jump back to the decoder.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr info) {
  auto* err = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, err->message);
  std::longjmp(err->jump, 1);
}

Image DecodeJpeg(const std::string& path, const std::vector<uint8_t>& bytes, bool header_only) {
  jpeg_decompress_struct info;
  JpegError err;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = OnJpegError;
  err.mgr.output_message = [](j_common_ptr) {};  // warnings (e.g. extraneous bytes) are not worth a log line
  Image image;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&info);
    throw Error(path + ": corrupt JPEG: " + err.message);
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), bytes.size());
  jpeg_read_header(&info, TRUE);
  if (static_cast<uint64_t>(info.image_width) * info.image_height > kMaxPixels) {
    const uint64_t width = info.image_width, height = info.image_height;
    jpeg_destroy_decompress(&info);
    CheckDimensions(path, width, height);
  }
  if (header_only) {
    image.width = static_cast<int>(info.image_width);
    image.height = static_cast<int>(info.image_height);
    jpeg_destroy_decompress(&info);
    return image;
  }
  info.out_color_space = JCS_RGB;  // libjpeg converts greyscale and YCbCr; CMYK fails with a message
  jpeg_start_decompress(&info);
  image.width = static_cast<int>(info.output_width);
  image.height = static_cast<int>(info.output_height);
  image.rgb.resize(static_cast<size_t>(image.width) * image.height * 3);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = image.rgb.data() + static_cast<size_t>(info.output_scanline) * image.width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return image;
}

// PIL's bicubic kernel (a = -0.5).
double Bicubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

struct Taps {
  int first = 0;
  std::vector<double> weights;
};

// Pillow's precompute_coeffs: the filter stretched by the scale when shrinking, so every input pixel counts.
std::vector<Taps> ResampleTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  std::vector<Taps> taps(out_size);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    double total = 0;
    taps[o].first = lo;
    for (int x = lo; x < hi; ++x) {
      taps[o].weights.push_back(Bicubic((x - center + 0.5) / filter_scale));
      total += taps[o].weights.back();
    }
    if (total != 0) {
      for (double& w : taps[o].weights) w /= total;
    }
  }
  return taps;
}

uint8_t Clip8(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

// One pass along x (horizontal) or y, rounded to 8 bits like Pillow's 8-bit path.
Image ResamplePass(const Image& in, int out_size, bool horizontal) {
  Image out;
  out.width = horizontal ? out_size : in.width;
  out.height = horizontal ? in.height : out_size;
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  const std::vector<Taps> taps = ResampleTaps(horizontal ? in.width : in.height, out_size);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const Taps& t = taps[horizontal ? x : y];
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (size_t i = 0; i < t.weights.size(); ++i) {
          const int sx = horizontal ? t.first + static_cast<int>(i) : x;
          const int sy = horizontal ? y : t.first + static_cast<int>(i);
          v += t.weights[i] * in.rgb[(static_cast<size_t>(sy) * in.width + sx) * 3 + c];
        }
        out.rgb[(static_cast<size_t>(y) * out.width + x) * 3 + c] = Clip8(v);
      }
    }
  }
  return out;
}

}  // namespace

Image DecodeImage(const std::string& path) { return DecodeImage(ReadBytes(path), path); }

namespace {

Image Decode(const std::vector<uint8_t>& bytes, const std::string& path, bool header_only) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::equal(kPng, kPng + 8, bytes.begin())) return DecodePng(path, bytes, header_only);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    return DecodeJpeg(path, bytes, header_only);
  }
  throw Error(path + ": not a PNG or JPEG file (" + std::to_string(bytes.size()) + " bytes, unknown signature)");
}

}  // namespace

Image DecodeImage(const std::vector<uint8_t>& bytes, const std::string& path) { return Decode(bytes, path, false); }

Image ReadImageSize(const std::vector<uint8_t>& bytes, const std::string& path) { return Decode(bytes, path, true); }

void WritePng(const std::string& path, const Image& image) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = image.width;
  png.height = image.height;
  png.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&png, path.c_str(), 0, image.rgb.data(), 0, nullptr)) {
    throw Error(path + ": cannot write PNG: " + png.message);
  }
}

void WriteJpeg(const std::string& path, const Image& image, int quality) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw Error(path + ": cannot write JPEG: " + std::strerror(errno));
  jpeg_compress_struct info;
  JpegError err;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = OnJpegError;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&info);
    std::fclose(file);
    throw Error(path + ": cannot write JPEG: " + err.message);
  }
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, file);
  info.image_width = image.width;
  info.image_height = image.height;
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.rgb.data()) + static_cast<size_t>(info.next_scanline) * image.width * 3;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  if (std::fclose(file) != 0) throw Error(path + ": cannot write JPEG: " + std::strerror(errno));
}

ImagePreprocess PresetPreprocess(ImagePreset preset, int64_t size) {
  ImagePreprocess p;  // the defaults are CLIP's
  p.size = size;
  if (preset == ImagePreset::kSiglip) {
    p.resize_short_side_and_crop = false;
    p.mean = {0.5, 0.5, 0.5};
    p.std = {0.5, 0.5, 0.5};
  }
  return p;
}

Image ResizeBicubic(const Image& image, int width, int height) {
  CS_CHECK(width > 0 && height > 0 && image.width > 0 && image.height > 0, "resize to ", width, "x", height);
  Image out = width == image.width ? image : ResamplePass(image, width, true);
  return height == image.height ? out : ResamplePass(out, height, false);
}

namespace {

// The [3, height, width] window at (top, left) of `resized`, rescaled by 1/255 and normalised per channel.
std::vector<float> Normalise(const Image& resized, const ImagePreprocess& p, int top, int left, int width,
                             int height) {
  std::vector<float> out(static_cast<size_t>(3) * width * height);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        const double v = resized.rgb[(static_cast<size_t>(y + top) * resized.width + x + left) * 3 + c] / 255.0;
        out[(static_cast<size_t>(c) * height + y) * width + x] = static_cast<float>((v - p.mean[c]) / p.std[c]);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<float> PreprocessImage(const Image& image, const ImagePreprocess& p) {
  const int size = static_cast<int>(p.size);
  if (!p.resize_short_side_and_crop) return PreprocessImageAt(image, p, size, size);
  // The short side becomes `size`, the long one keeps the aspect ratio (truncated, as Hugging Face does).
  const bool wide = image.width >= image.height;
  const int short_side = wide ? image.height : image.width, long_side = wide ? image.width : image.height;
  const int scaled = std::max(size, static_cast<int>(static_cast<int64_t>(size) * long_side / short_side));
  const Image resized = ResizeBicubic(image, wide ? scaled : size, wide ? size : scaled);
  return Normalise(resized, p, (resized.height - size) / 2, (resized.width - size) / 2, size, size);
}

std::vector<float> PreprocessImageAt(const Image& image, const ImagePreprocess& p, int width, int height) {
  return Normalise(ResizeBicubic(image, width, height), p, 0, 0, width, height);
}

std::vector<std::vector<float>> PreprocessAnyres(const Image& image, const ImagePreprocess& p, int rows, int cols) {
  const int size = static_cast<int>(p.size), width = cols * size, height = rows * size;
  const double scale_w = static_cast<double>(width) / image.width, scale_h = static_cast<double>(height) / image.height;
  const int w = scale_w < scale_h ? width : std::min(width, static_cast<int>(std::ceil(image.width * scale_h)));
  const int h = scale_w < scale_h ? std::min(height, static_cast<int>(std::ceil(image.height * scale_w))) : height;
  const Image resized = ResizeBicubic(image, w, h);
  Image canvas{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3, 0)};
  const int top = (height - h) / 2, left = (width - w) / 2;
  for (int y = 0; y < h; ++y) {
    std::copy_n(resized.rgb.begin() + static_cast<size_t>(y) * w * 3, static_cast<size_t>(w) * 3,
                canvas.rgb.begin() + (static_cast<size_t>(y + top) * width + left) * 3);
  }
  std::vector<std::vector<float>> views = {PreprocessImage(image, p)};
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) views.push_back(Normalise(canvas, p, r * size, c * size, size, size));
  }
  return views;
}

}  // namespace cornstarch
