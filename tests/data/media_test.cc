// Image and audio input: decoding files the test writes, PIL-style bicubic resizing against weights derived by
// hand from Pillow's formula, CLIP/SigLIP normalisation, resampling against the exact signal, the Slaney mel
// filterbank against values computed independently, and the log-mel features against a float64 DFT reference.
#include <sndfile.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>

#include "cornstarch/data/audio.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/data/image.h"
#include "cornstarch/base/check.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using Catch::Matchers::Contains;
using cornstarch::testing::TempPath;

namespace {

constexpr double kPi = 3.14159265358979323846;


// An 8 kHz float WAV of `channels` interleaved channels, written by libsndfile itself.
void WriteFloatWav(const std::string& path, int channels, const std::vector<float>& interleaved) {
  SF_INFO info{};
  info.samplerate = 8000;
  info.channels = channels;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  REQUIRE(f != nullptr);
  sf_writef_float(f, interleaved.data(), static_cast<sf_count_t>(interleaved.size() / channels));
  sf_close(f);
}

Image Gradient(int w, int h) {
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.rgb[(y * w + x) * 3 + c] = static_cast<uint8_t>((x * 7 + y * 3 + c * 40) % 256);
  return img;
}

void WriteBytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("PNG round trips exactly and JPEG within compression error", "[data][image]") {
  const Image img = Gradient(37, 23);
  WritePng(TempPath("a.png"), img);
  const Image png = DecodeImage(TempPath("a.png"));
  CHECK(png.width == 37);
  CHECK(png.height == 23);
  CHECK(png.rgb == img.rgb);
  Image smooth{37, 23, {}};  // JPEG is lossy on edges: a smooth ramp
  for (int y = 0; y < 23; ++y)
    for (int x = 0; x < 37; ++x)
      for (int c = 0; c < 3; ++c) smooth.rgb.push_back(static_cast<uint8_t>(x * 3 + y * 2 + c * 20));
  WriteJpeg(TempPath("a.jpg"), smooth, 98);
  const Image jpg = DecodeImage(TempPath("a.jpg"));
  REQUIRE(jpg.rgb.size() == smooth.rgb.size());
  double err = 0;
  for (size_t i = 0; i < smooth.rgb.size(); ++i) err += std::abs(int(jpg.rgb[i]) - int(smooth.rgb[i]));
  CHECK(err / smooth.rgb.size() < 2.0);  // mean absolute error in 8-bit levels at quality 98
}

TEST_CASE("an image's size from its header equals the decoded image's", "[data][image][dynamic]") {
  const auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
  };
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{37, 23}, {1, 90}, {64, 64}}) {
    WritePng(TempPath("size.png"), Gradient(w, h));
    WriteJpeg(TempPath("size.jpg"), Gradient(w, h));
    for (const std::string& f : {TempPath("size.png"), TempPath("size.jpg")}) {
      INFO(f << " " << w << " x " << h);
      const Image header = ReadImageSize(bytes(f), f);
      const Image full = DecodeImage(f);
      CHECK(header.width == full.width);
      CHECK(header.height == full.height);
      CHECK(header.width == w);
      CHECK(header.rgb.empty());
    }
  }
  CHECK_THROWS_WITH(ReadImageSize({'n', 'o', 'p', 'e'}, "x.bin"), Contains("x.bin: not a PNG or JPEG file"));
}

TEST_CASE("bad image files are errors naming the file", "[data][image]") {
  CHECK_THROWS_WITH(DecodeImage(TempPath("missing.png")), Contains("missing.png: cannot open image"));
  WriteBytes(TempPath("text.png"), "hello, not an image");
  CHECK_THROWS_WITH(DecodeImage(TempPath("text.png")), Contains("text.png: not a PNG or JPEG file"));
  WritePng(TempPath("whole.png"), Gradient(16, 16));
  std::ifstream in(TempPath("whole.png"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  WriteBytes(TempPath("cut.png"), bytes.substr(0, bytes.size() / 2));
  CHECK_THROWS_WITH(DecodeImage(TempPath("cut.png")), Contains("cut.png: "));
  WriteJpeg(TempPath("whole.jpg"), Gradient(64, 64));
  std::ifstream jin(TempPath("whole.jpg"), std::ios::binary);
  std::string jbytes((std::istreambuf_iterator<char>(jin)), {});
  WriteBytes(TempPath("cut.jpg"), jbytes.substr(0, 200));
  CHECK_THROWS_WITH(DecodeImage(TempPath("cut.jpg")), Contains("cut.jpg: corrupt JPEG"));
}

TEST_CASE("images declaring more than 64 megapixels are refused before decoding allocates", "[data][image]") {
  // A 1 x 1 PNG whose header (IHDR, with a recomputed CRC) then claims 10000 x 10000 pixels: 300 MB to decode.
  WritePng(TempPath("small.png"), Gradient(1, 1));
  std::ifstream in(TempPath("small.png"), std::ios::binary);
  std::string png((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(png.substr(12, 4) == "IHDR");
  auto be32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  be32(16, 10000);
  be32(20, 10000);
  uint32_t crc = 0xffffffffu;  // CRC-32 (ISO-HDLC) over the chunk type and data, as PNG defines it
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<uint8_t>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  be32(29, ~crc);
  WriteBytes(TempPath("huge.png"), png);
  CHECK_THROWS_WITH(DecodeImage(TempPath("huge.png")), Contains("huge.png: image of 10000 x 10000 pixels"));
  // A JPEG whose frame header (SOF0) claims 60000 x 60000 (libjpeg's own limit is 65500 per side).
  WriteJpeg(TempPath("small.jpg"), Gradient(8, 8));
  std::ifstream jin(TempPath("small.jpg"), std::ios::binary);
  std::string jpg((std::istreambuf_iterator<char>(jin)), {});
  const size_t sof = jpg.find("\xff\xc0");
  REQUIRE(sof != std::string::npos);
  for (size_t i = sof + 5; i < sof + 9; i += 2) jpg[i] = '\xea', jpg[i + 1] = '\x60';
  WriteBytes(TempPath("huge.jpg"), jpg);
  CHECK_THROWS_WITH(DecodeImage(TempPath("huge.jpg")), Contains("huge.jpg: image of 60000 x 60000 pixels"));
}

TEST_CASE("bicubic resize uses Pillow's antialiased weights", "[data][image]") {
  // 4 -> 2 pixels: scale 2, the kernel stretched to support 4; output 0 has centre 1.0 and taps x = 0..3 with
  // weights bicubic((x + 0.5 - 1) / 2) normalised: [0.458678, 0.458678, 0.119835, -0.037190].
  Image row{4, 1, {}};
  for (uint8_t v : {0, 100, 200, 250}) row.rgb.insert(row.rgb.end(), {v, v, v});
  const Image down = ResizeBicubic(row, 2, 1);
  CHECK(int(down.rgb[0]) == 61);   // 0.119835 * 200 - 0.037190 * 250 + 0.458678 * 100 = 60.54
  CHECK(int(down.rgb[3]) == 218);  // the mirror image: 218.39
  // 3 -> 5 pixels (upscaling: plain bicubic, support 2, clipped at the borders and renormalised).
  Image col{1, 3, {}};
  for (uint8_t v : {10, 50, 90}) col.rgb.insert(col.rgb.end(), {v, v, v});
  const Image up = ResizeBicubic(col, 1, 5);
  std::vector<int> got;
  for (int y = 0; y < 5; ++y) got.push_back(up.rgb[y * 3]);
  CHECK(got == std::vector<int>{7, 22, 50, 78, 93});
  // A constant image stays constant whatever the scale.
  Image flat{13, 7, std::vector<uint8_t>(13 * 7 * 3, 77)};
  const Image resized = ResizeBicubic(flat, 5, 11);
  for (uint8_t v : resized.rgb) REQUIRE(int(v) == 77);
}

TEST_CASE("anyres views: the base view, then the tiles of the image fitted into the grid and centred on black",
          "[data][image][dynamic]") {
  const ImagePreprocess p = PresetPreprocess(ImagePreset::kSiglip, 4);
  const auto level = [&](int c, double v) { return Approx((v / 255.0 - p.mean[c]) / p.std[c]).epsilon(1e-6); };
  // 8 x 4, left half 40, right half 200: fits 1 x 2 tiles exactly (no resize), a tile per half.
  Image halves{8, 4, {}};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) halves.rgb.insert(halves.rgb.end(), 3, static_cast<uint8_t>(x < 4 ? 40 : 200));
  const auto views = PreprocessAnyres(halves, p, 1, 2);
  REQUIRE(views.size() == 3);
  CHECK(views[0] == PreprocessImage(halves, p));
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 16; ++i) {
      CHECK(views[1][c * 16 + i] == level(c, 40));
      CHECK(views[2][c * 16 + i] == level(c, 200));
    }
  }
  // A flat 4 x 4 image in 1 x 2 tiles: it stays 4 x 4 (the height fits), centred: columns 2..5 of the 8.
  Image flat{4, 4, std::vector<uint8_t>(4 * 4 * 3, 90)};
  const auto padded = PreprocessAnyres(flat, p, 1, 2);
  REQUIRE(padded.size() == 3);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 8; ++x) {
        const float v = padded[1 + x / 4][(c * 4 + y) * 4 + x % 4];
        INFO("channel " << c << " row " << y << " column " << x);
        CHECK(v == level(c, x >= 2 && x < 6 ? 90 : 0));
      }
    }
  }
}

TEST_CASE("CLIP and SigLIP preprocessing: resize, crop and normalise", "[data][image]") {
  Image solid{3, 2, {}};
  for (int i = 0; i < 6; ++i) solid.rgb.insert(solid.rgb.end(), {10, 128, 250});
  for (const ImagePreset preset : {ImagePreset::kClip, ImagePreset::kSiglip}) {
    const ImagePreprocess p = PresetPreprocess(preset, 2);
    const std::vector<float> x = PreprocessImage(solid, p);
    REQUIRE(x.size() == 3 * 2 * 2);
    const double level[3] = {10, 128, 250};
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 4; ++i) CHECK(x[c * 4 + i] == Approx((level[c] / 255.0 - p.mean[c]) / p.std[c]).epsilon(1e-6));
    }
  }
  // CLIP keeps the aspect ratio and crops the centre: 8x4 columns 0..7 -> 4x2 (columns averaged in pairs) -> the
  // middle 2x2, i.e. source columns 2..5. SigLIP squeezes the whole width into 2.
  Image wide{8, 4, {}};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) wide.rgb.insert(wide.rgb.end(), 3, static_cast<uint8_t>(x < 2 || x > 5 ? 0 : 255));
  ImagePreprocess p = PresetPreprocess(ImagePreset::kClip, 2);
  p.mean = {0, 0, 0};
  p.std = {1, 1, 1};
  const std::vector<float> clip = PreprocessImage(wide, p);
  for (float v : clip) CHECK(v > 0.9f);  // the bright middle only
  p.resize_short_side_and_crop = false;
  const std::vector<float> squeezed = PreprocessImage(wide, p);
  CHECK(squeezed[0] < 0.7f);  // dark edge columns pulled in
  CHECK_THROWS_WITH(ParseConfig("", "m.yaml", {"data.image_preset=vit"}),
                    "data.image_preset: must be one of 'clip', 'siglip', got 'vit'");
}

TEST_CASE("WAV files: 16-bit round trip, stereo mixed to mono, bad files named", "[data][audio]") {
  Audio a{22050, {}};
  for (int i = 0; i < 1000; ++i) a.samples.push_back(static_cast<float>(0.5 * std::sin(i * 0.05)));
  WriteWav(TempPath("a.wav"), a);
  const Audio back = ReadAudio(TempPath("a.wav"));
  CHECK(back.sample_rate == 22050);
  REQUIRE(back.samples.size() == a.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) REQUIRE(std::abs(back.samples[i] - a.samples[i]) <= 1.0f / 32768);

  WriteFloatWav(TempPath("stereo.wav"), 2, {0.2f, 0.4f, -1.0f, 0.0f, 0.5f, 0.5f});
  const Audio mono = ReadAudio(TempPath("stereo.wav"));
  CHECK(mono.sample_rate == 8000);
  CHECK(mono.samples == std::vector<float>{0.3f, -0.5f, 0.5f});

  // More channels than any encoder input has: refused before the samples are allocated.
  WriteFloatWav(TempPath("wide.wav"), 65, std::vector<float>(65, 0.1f));
  CHECK_THROWS_WITH(ReadAudio(TempPath("wide.wav")), Contains("wide.wav: audio of 1 frames x 65 channels"));

  WriteBytes(TempPath("noise.wav"), "RIFF....WAVEjunk");
  CHECK_THROWS_WITH(ReadAudio(TempPath("noise.wav")), Contains("noise.wav: cannot read audio"));
  CHECK_THROWS_WITH(ReadAudio(TempPath("none.wav")), Contains("none.wav: cannot read audio"));
}

TEST_CASE("resampling keeps a tone below the new Nyquist frequency", "[data][audio]") {
  for (const int from : {44100, 8000, 22050}) {
    const double hz = 1000.0;
    std::vector<float> in(from / 4);  // 0.25 s
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(2 * kPi * hz * i / from));
    const std::vector<float> out = Resample(in, from, 16000);
    CHECK(out.size() == 4000);
    double err = 0;
    for (size_t i = 200; i + 200 < out.size(); ++i) {  // away from the edges, where the filter runs out of input
      err = std::max(err, std::abs(out[i] - std::sin(2 * kPi * hz * i / 16000)));
    }
    INFO("from " << from);
    CHECK(err < 2e-3);
  }
  // A tone above the new Nyquist frequency (10 kHz into 16 kHz) is filtered out, not aliased to 6 kHz.
  std::vector<float> high(44100 / 4);
  for (size_t i = 0; i < high.size(); ++i) high[i] = static_cast<float>(std::sin(2 * kPi * 10000.0 * i / 44100));
  const std::vector<float> out = Resample(high, 44100, 16000);
  double peak = 0;
  for (size_t i = 200; i + 200 < out.size(); ++i) peak = std::max(peak, double(std::abs(out[i])));
  CHECK(peak < 0.02);
}

TEST_CASE("the mel filterbank is librosa's Slaney filterbank", "[data][audio]") {
  const std::vector<float> bank = MelFilterbank(80, 400, 16000);
  REQUIRE(bank.size() == 80 * 201);
  // Computed independently from librosa's definition (mel points evenly spaced on the Slaney scale up to 8 kHz,
  // triangles between them, area-normalised by 2 / (f[m+2] - f[m])).
  const auto w = [&](int m, int b) { return bank[m * 201 + b]; };
  CHECK(w(0, 0) == 0.0f);
  CHECK(w(0, 1) == Approx(0.024862593984176087).epsilon(1e-5));
  CHECK(w(0, 2) == 0.0f);
  CHECK(w(1, 2) == Approx(0.022871772096078016).epsilon(1e-5));
  CHECK(w(79, 196) == Approx(0.0017950361103562522).epsilon(1e-5));
  CHECK(w(79, 199) == Approx(0.0004487590275890477).epsilon(1e-5));
  CHECK(w(79, 200) == 0.0f);
  for (float v : bank) REQUIRE(v >= 0.0f);
}

TEST_CASE("Whisper log-mel features match a float64 DFT reference", "[data][audio]") {
  const int mels = 16;
  const int64_t frames = 12;
  std::vector<float> x(frames * kWhisperHop - 300);  // shorter than the window: zero-padded like Whisper's 30 s
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(0.3 * std::sin(2 * kPi * 440.0 * i / 16000)) + noise(rng);
  const torch::Tensor got = WhisperLogMel(x, mels, frames);
  REQUIRE(got.sizes() == torch::IntArrayRef({mels, frames}));

  // Reference: pad to frames * hop, reflect-pad n_fft / 2 at both ends, periodic Hann window, |DFT|^2.
  const int n = static_cast<int>(frames * kWhisperHop), half = kWhisperFft / 2;
  std::vector<double> sig(n, 0.0);
  std::copy(x.begin(), x.end(), sig.begin());
  std::vector<double> padded(n + 2 * half);
  for (int i = 0; i < n + 2 * half; ++i) {
    int j = i - half;
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    padded[i] = sig[j];
  }
  const std::vector<float> bank = MelFilterbank(mels, kWhisperFft, 16000);
  std::vector<double> ref(mels * frames);
  for (int t = 0; t < frames; ++t) {
    std::vector<double> power(half + 1);
    for (int k = 0; k <= half; ++k) {
      double re = 0, im = 0;
      for (int i = 0; i < kWhisperFft; ++i) {
        const double v = padded[t * kWhisperHop + i] * (0.5 - 0.5 * std::cos(2 * kPi * i / kWhisperFft));
        re += v * std::cos(2 * kPi * k * i / kWhisperFft);
        im -= v * std::sin(2 * kPi * k * i / kWhisperFft);
      }
      power[k] = re * re + im * im;
    }
    for (int m = 0; m < mels; ++m) {
      double e = 0;
      for (int k = 0; k <= half; ++k) e += bank[m * (half + 1) + k] * power[k];
      ref[m * frames + t] = std::log10(std::max(e, 1e-10));
    }
  }
  const double top = *std::max_element(ref.begin(), ref.end());
  double err = 0;
  for (int i = 0; i < mels * frames; ++i) {
    const double expected = (std::max(ref[i], top - 8.0) + 4.0) / 4.0;
    err = std::max(err, std::abs(got.view(-1)[i].item<double>() - expected));
  }
  CHECK(err < 1e-4);  // float32 STFT vs float64 DFT, in log10 units / 4

  // Silence is the floor everywhere: log10(1e-10) = -10 -> (-10 + 4) / 4.
  const torch::Tensor quiet = WhisperLogMel({}, mels, frames);
  CHECK(quiet.eq(-1.5f).all().item<bool>());
}
