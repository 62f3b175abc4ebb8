// The image reader (data/image.h: PNG through libpng, JPEG through libjpeg, the dimension limit) on arbitrary
// bytes, and the CLIP preprocessing of what decodes. Seeds: PNG and JPEG images written by the project.
#include "cornstarch/data/image.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly([&] {
    const cornstarch::Image image = cornstarch::DecodeImage(std::vector<uint8_t>(data, data + size), "fuzz.img");
    if (static_cast<int64_t>(image.width) * image.height <= 4096) {  // preprocessing cost grows with the size
      cornstarch::PreprocessImage(image, cornstarch::PresetPreprocess(cornstarch::ImagePreset::kClip, 8));
    }
  });
}
