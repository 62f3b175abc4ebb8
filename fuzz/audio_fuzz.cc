// The audio reader (data/audio_file.h: libsndfile from memory, the length limits) on arbitrary bytes. Seeds: WAV
// files written by the project.
#include "cornstarch/data/audio_file.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly(
      [&] { cornstarch::DecodeAudio(std::vector<uint8_t>(data, data + size), "fuzz.wav"); });
}
