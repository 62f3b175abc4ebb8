// A small generated LLaVA-style dataset: coloured images (PNG and JPEG, of several sizes), tones (WAV at 16 and
// 22.05 kHz), conversations that ask about them (image-only, audio-only, both, several images, text-only), and a
// sentencepiece BPE tokenizer trained on their text. Answers depend on the media, so a model that learns shows it.
// For the example config and the tests; the tokenizer is trained by `spm_train` (Debian's sentencepiece).
#pragma once

#include <cstdint>
#include <string>

namespace cornstarch {

struct DemoDataOptions {
  int64_t samples = 96;
  uint64_t seed = 0;
  int vocab_size = 384;  // 256 byte pieces + the corpus's characters and merges
  bool jsonl = true;     // else one JSON array
};

// Writes `dir`/train.jsonl (or train.json), `dir`/media/*, `dir`/tokenizer.model. Throws Error when a file cannot
// be written or spm_train fails.
void WriteDemoDataset(const std::string& dir, const DemoDataOptions& options = {});

// Trains a BPE model on the lines of `text_file` into `<model_prefix>.model` with spm_train: byte fallback, no
// Unicode normalisation, `symbols` as user-defined pieces. `extra` is appended to the command line.
void TrainSentencePiece(const std::string& text_file, const std::string& model_prefix, int vocab_size,
                        const std::string& symbols, const std::string& extra = "");

}  // namespace cornstarch
