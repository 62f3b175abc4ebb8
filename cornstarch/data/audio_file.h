// Audio files (WAV, FLAC, ... via libsndfile) to mono samples, and WAV writing. No tensors, so the decoder is
// fuzzed on its own (fuzz/audio_fuzz.cc). A file's declared length is checked before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cornstarch {

struct Audio {
  int sample_rate = 0;
  std::vector<float> samples;  // mono, in [-1, 1]
};

// Reads an audio file, averaging its channels to mono. Throws Error naming the file when it is missing, not audio
// libsndfile can decode, or longer than an hour (at most 2^28 samples over all channels).
Audio ReadAudio(const std::string& path);
// The same over the file's bytes; `path` names it in errors.
Audio DecodeAudio(const std::vector<uint8_t>& bytes, const std::string& path);

// Writes 16-bit PCM WAV. Used for generated datasets and test fixtures.
void WriteWav(const std::string& path, const Audio& audio);

}  // namespace cornstarch
