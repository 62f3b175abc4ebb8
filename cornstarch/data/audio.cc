#include "cornstarch/data/audio.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Slaney's mel scale: linear below 1 kHz, logarithmic above.
constexpr double kMelLinearHz = 200.0 / 3.0;
constexpr double kMelLogStartHz = 1000.0;
const double kMelLogStep = std::log(6.4) / 27.0;

double HzToMel(double hz) {
  if (hz < kMelLogStartHz) return hz / kMelLinearHz;
  return kMelLogStartHz / kMelLinearHz + std::log(hz / kMelLogStartHz) / kMelLogStep;
}

double MelToHz(double mel) {
  const double start = kMelLogStartHz / kMelLinearHz;
  if (mel < start) return mel * kMelLinearHz;
  return kMelLogStartHz * std::exp(kMelLogStep * (mel - start));
}

}  // namespace

std::vector<float> Resample(const std::vector<float>& samples, int from_rate, int to_rate) {
  CS_CHECK(from_rate > 0 && to_rate > 0, "resample ", from_rate, " -> ", to_rate);
  if (from_rate == to_rate || samples.empty()) return samples;
  const double ratio = static_cast<double>(to_rate) / from_rate;
  const double cutoff = std::min(1.0, ratio);  // of the input Nyquist frequency
  constexpr int kZeroCrossings = 16;
  const double half_width = kZeroCrossings / cutoff;  // in input samples
  const int64_t n_in = static_cast<int64_t>(samples.size());
  const int64_t n_out = static_cast<int64_t>(std::llround(n_in * ratio));
  std::vector<float> out(n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    const double t = o / ratio;  // position in input samples
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(t - half_width)));
    const int64_t hi = std::min<int64_t>(n_in - 1, static_cast<int64_t>(std::floor(t + half_width)));
    double sum = 0;
    for (int64_t i = lo; i <= hi; ++i) {
      const double x = (i - t) * cutoff;
      const double sinc = x == 0 ? 1.0 : std::sin(kPi * x) / (kPi * x);
      const double window = 0.5 + 0.5 * std::cos(kPi * (i - t) / half_width);
      sum += samples[i] * cutoff * sinc * window;
    }
    out[o] = static_cast<float>(sum);
  }
  return out;
}

std::vector<float> MelFilterbank(int num_mels, int n_fft, int sample_rate) {
  CS_CHECK(num_mels > 0 && n_fft > 0 && sample_rate > 0, "mel filterbank");
  const int bins = n_fft / 2 + 1;
  const double max_mel = HzToMel(sample_rate / 2.0);
  std::vector<double> edges(num_mels + 2);  // in Hz, evenly spaced in mel
  for (int m = 0; m < num_mels + 2; ++m) edges[m] = MelToHz(max_mel * m / (num_mels + 1));
  std::vector<float> weights(static_cast<size_t>(num_mels) * bins);
  for (int m = 0; m < num_mels; ++m) {
    const double norm = 2.0 / (edges[m + 2] - edges[m]);  // Slaney: every filter has the same area
    for (int b = 0; b < bins; ++b) {
      const double hz = static_cast<double>(b) * sample_rate / n_fft;
      const double rising = (hz - edges[m]) / (edges[m + 1] - edges[m]);
      const double falling = (edges[m + 2] - hz) / (edges[m + 2] - edges[m + 1]);
      weights[static_cast<size_t>(m) * bins + b] = static_cast<float>(norm * std::max(0.0, std::min(rising, falling)));
    }
  }
  return weights;
}

torch::Tensor WhisperLogMel(const std::vector<float>& samples_16k, int num_mels, int64_t num_frames) {
  CS_CHECK(num_frames > 0, "num_frames=", num_frames);
  const int64_t n = num_frames * kWhisperHop;
  torch::Tensor audio = torch::zeros({n}, torch::kFloat);
  std::copy_n(samples_16k.begin(), std::min<int64_t>(n, samples_16k.size()), audio.data_ptr<float>());
  const torch::Tensor window = torch::hann_window(kWhisperFft, torch::kFloat);
  const torch::Tensor spectrum = torch::stft(audio, kWhisperFft, kWhisperHop, kWhisperFft, window, /*center=*/true,
                                             "reflect", /*normalized=*/false, /*onesided=*/true,
                                             /*return_complex=*/true);
  // n / hop + 1 centred frames; like Whisper, drop the last so num_frames remain.
  const torch::Tensor power = torch::abs(spectrum).pow(2).narrow(1, 0, num_frames);
  const int bins = kWhisperFft / 2 + 1;
  std::vector<float> bank = MelFilterbank(num_mels, kWhisperFft, kWhisperSampleRate);
  const torch::Tensor filters = torch::from_blob(bank.data(), {num_mels, bins}, torch::kFloat);
  torch::Tensor log_spec = torch::matmul(filters, power).clamp_min(1e-10).log10();
  log_spec = torch::maximum(log_spec, log_spec.max() - 8.0);
  return ((log_spec + 4.0) / 4.0).contiguous();
}

}  // namespace cornstarch
