// Images for vision encoders: PNG/JPEG decoding and CLIP/SigLIP-style preprocessing into the encoder's input.
// No tensors: the output is a CHW float buffer the dataset copies into its batch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height x width x 3, row-major
};

// Decodes a PNG or JPEG file (told apart by its signature) into 8-bit RGB: grey, palette and alpha are converted,
// 16-bit channels reduced. Throws Error naming the file for a missing, unreadable or undecodable file, or one of
// more than 64 megapixels (checked before decoding allocates).
Image DecodeImage(const std::string& path);
// The same over the file's bytes; `path` names it in errors.
Image DecodeImage(const std::vector<uint8_t>& bytes, const std::string& path);

// The width and height of a PNG or JPEG from its header alone (`rgb` left empty): what dynamic resolution needs to
// lay out a sample's placeholders before its pixels are decoded. The same errors as DecodeImage for a bad header.
Image ReadImageSize(const std::vector<uint8_t>& bytes, const std::string& path);

// Writes `image` as PNG or as baseline JPEG (quality 1..100). Used for generated datasets and test fixtures.
void WritePng(const std::string& path, const Image& image);
void WriteJpeg(const std::string& path, const Image& image, int quality = 95);

// How an image becomes the encoder's input, as the Hugging Face image processors do it: resize with PIL's
// antialiased bicubic filter (CLIP: the short side to `size`, then a centred size x size crop; SigLIP: straight to
// size x size), rescale by 1/255, then (x - mean) / std per channel.
struct ImagePreprocess {
  int64_t size = 224;
  bool resize_short_side_and_crop = true;
  std::array<double, 3> mean = {0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> std = {0.26862954, 0.26130258, 0.27577711};
};

// The preprocessing data.image_preset names, at `size`.
ImagePreprocess PresetPreprocess(ImagePreset preset, int64_t size);

// PIL's bicubic resize (antialiased when shrinking), rounded back to 8 bits as PIL returns it.
Image ResizeBicubic(const Image& image, int width, int height);

// [3, size, size] floats, channel-major.
std::vector<float> PreprocessImage(const Image& image, const ImagePreprocess& p);

// [3, height, width] floats: resized straight to width x height (no crop, whatever p says), then as above. For
// images at their own resolution (the size a plan/image_grid.h grid gives).
std::vector<float> PreprocessImageAt(const Image& image, const ImagePreprocess& p, int width, int height);

// LLaVA-NeXT's anyres views of `image` for a grid of rows x cols tiles of p.size (plan/image_grid.h's AnyresTiles):
// the base view (PreprocessImage), then the tiles row by row, each [3, size, size]. The tiles cut the image resized
// into the grid with its aspect ratio kept (the side that fits exactly, the other rounded up), centred on black.
std::vector<std::vector<float>> PreprocessAnyres(const Image& image, const ImagePreprocess& p, int rows, int cols);

}  // namespace cornstarch
