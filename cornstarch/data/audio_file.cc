#include "cornstarch/data/audio_file.h"

#include <sndfile.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// An hour of 48 kHz stereo: far beyond any clip an encoder takes, small enough to allocate.
constexpr sf_count_t kMaxSamples = sf_count_t{1} << 28;
constexpr int kMaxChannels = 64;

// libsndfile reading from memory: the callbacks of its virtual I/O over a byte buffer.
struct Memory {
  const std::vector<uint8_t>& bytes;
  sf_count_t at = 0;
};

sf_count_t Length(void* user) { return static_cast<sf_count_t>(static_cast<Memory*>(user)->bytes.size()); }

sf_count_t Seek(sf_count_t offset, int whence, void* user) {
  auto* m = static_cast<Memory*>(user);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->at : Length(user);
  m->at = std::clamp<sf_count_t>(base + offset, 0, Length(user));
  return m->at;
}

sf_count_t Read(void* out, sf_count_t count, void* user) {
  auto* m = static_cast<Memory*>(user);
  const sf_count_t n = std::clamp<sf_count_t>(Length(user) - m->at, 0, std::max<sf_count_t>(count, 0));
  if (n > 0) std::memcpy(out, m->bytes.data() + m->at, static_cast<size_t>(n));
  m->at += n;
  return n;
}

sf_count_t Write(const void*, sf_count_t, void*) { return 0; }

sf_count_t Tell(void* user) { return static_cast<Memory*>(user)->at; }

}  // namespace

Audio ReadAudio(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read audio: " + std::strerror(errno));
  return DecodeAudio(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}), path);
}

Audio DecodeAudio(const std::vector<uint8_t>& bytes, const std::string& path) {
  SF_VIRTUAL_IO io{Length, Seek, Read, Write, Tell};
  Memory memory{bytes};
  SF_INFO info;
  std::memset(&info, 0, sizeof info);
  SNDFILE* file = sf_open_virtual(&io, SFM_READ, &info, &memory);
  if (!file) throw Error(path + ": cannot read audio: " + sf_strerror(nullptr));
  if (info.channels < 1 || info.channels > kMaxChannels || info.frames < 0 || info.samplerate <= 0 ||
      info.frames > kMaxSamples / info.channels) {
    sf_close(file);
    throw Error(path + ": audio of " + std::to_string(info.frames) + " frames x " + std::to_string(info.channels) +
                " channels at " + std::to_string(info.samplerate) + " Hz is outside the limits (1-" +
                std::to_string(kMaxChannels) + " channels, a positive rate, at most " + std::to_string(kMaxSamples) +
                " samples)");
  }
  std::vector<float> interleaved(static_cast<size_t>(info.frames) * info.channels);
  const sf_count_t read = sf_readf_float(file, interleaved.data(), info.frames);
  const std::string error = sf_error(file) ? sf_strerror(file) : "";
  sf_close(file);
  if (!error.empty() || read != info.frames) {
    throw Error(path + ": corrupt audio: read " + std::to_string(read) + " of " + std::to_string(info.frames) +
                " frames" + (error.empty() ? "" : ": " + error));
  }
  Audio audio;
  audio.sample_rate = info.samplerate;
  audio.samples.resize(static_cast<size_t>(info.frames));
  for (sf_count_t f = 0; f < info.frames; ++f) {
    double sum = 0;
    for (int c = 0; c < info.channels; ++c) sum += interleaved[static_cast<size_t>(f * info.channels + c)];
    audio.samples[static_cast<size_t>(f)] = static_cast<float>(sum / info.channels);
  }
  return audio;
}

void WriteWav(const std::string& path, const Audio& audio) {
  SF_INFO info;
  std::memset(&info, 0, sizeof info);
  info.samplerate = audio.sample_rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!file) throw Error(path + ": cannot write WAV: " + sf_strerror(nullptr));
  const sf_count_t n = static_cast<sf_count_t>(audio.samples.size());
  const sf_count_t written = sf_writef_float(file, audio.samples.data(), n);
  sf_close(file);
  if (written != n) throw Error(path + ": cannot write WAV: wrote " + std::to_string(written) + " of " +
                                std::to_string(n) + " frames");
}

}  // namespace cornstarch
