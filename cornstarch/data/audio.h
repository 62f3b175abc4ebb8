// Audio for Whisper-style encoders: resampling to 16 kHz and the log-mel features the encoder consumes (files are
// read by data/audio_file.h).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/data/audio_file.h"

namespace cornstarch {

// Band-limited resampling (Hann-windowed sinc, cut at the lower Nyquist frequency).
std::vector<float> Resample(const std::vector<float>& samples, int from_rate, int to_rate);

// Whisper's feature extractor at 16 kHz: n_fft 400, hop 160, Hann window, reflect-padded centred frames; the
// signal is zero-padded or cut to num_frames * 160 samples first, as Whisper pads every clip to 30 s.
constexpr int kWhisperSampleRate = 16000;
constexpr int kWhisperFft = 400;
constexpr int kWhisperHop = 160;

// Slaney-style mel filterbank (librosa's default, which Whisper uses): [num_mels, n_fft / 2 + 1], row-major.
std::vector<float> MelFilterbank(int num_mels, int n_fft, int sample_rate);

// [num_mels, num_frames] log-mel features: log10 of the mel power clamped at 1e-10, floored at its maximum - 8,
// then (x + 4) / 4.
torch::Tensor WhisperLogMel(const std::vector<float>& samples_16k, int num_mels, int64_t num_frames);

}  // namespace cornstarch
