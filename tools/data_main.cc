// cornstarch-data: what the model sees, before any GPU hour is spent on it. Prints, for sample N of a llava
// dataset or packed sequence N of any dataset (as training reads it at step 0: same seed, same packing), every token
// with its id, piece, label, RoPE position, mask group and media instance (data/token_table.h); and the ids the
// configured tokenizer gives a text or each line of a file (one line of ids per input line, no special tokens added).
//   cornstarch-data [--config FILE] [--set key=value ...] [--sample N] [--sequence N] [--tokenize TEXT]
//                   [--tokenize-file F]
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/dataset_file.h"
#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/token_table.h"
#include "cornstarch/data/tokenizer.h"
#include "cornstarch/plan/config.h"
#include "tools/command_line.h"

namespace {

using namespace cornstarch;

std::vector<std::string> EncoderNames(const Config& config) {
  std::vector<std::string> names;
  for (const EncoderConfig& e : config.model.encoders) names.push_back(e.name);
  return names;
}

std::unique_ptr<Tokenizer> ConfiguredTokenizer(const Config& config, const char* flag) {
  if (config.data.tokenizer.empty()) throw Error(std::string(flag) + ": data.tokenizer is not set in the config");
  try {
    return OpenTokenizer(config.data.tokenizer);
  } catch (const Error& e) {
    throw Error("data.tokenizer: " + std::string(e.what()));
  }
}

void PrintIds(const Tokenizer& tokenizer, const std::string& text) {
  std::string line;
  for (int64_t id : tokenizer.Encode(text)) line += (line.empty() ? "" : " ") + std::to_string(id);
  std::cout << line << "\n";
}

// Packed sequence `n` as Dataset::Get gives it, with the encoders' placeholder positions named.
std::vector<TokenRow> SequenceRows(const Config& config, const Dataset& data, int64_t n) {
  const Batch b = data.Get(n, 1);
  const int64_t s = b.seq_len();
  const auto* id = b.input_ids.data_ptr<int64_t>();
  const auto* label = b.labels.data_ptr<int64_t>();
  const auto* pos = b.positions.data_ptr<int64_t>();
  const auto* word = b.mask_words.data_ptr<int64_t>();
  std::vector<TokenRow> rows(s);
  for (int64_t i = 0; i < s; ++i) rows[i] = {id[i], label[i], pos[i], word[i], ""};
  for (size_t e = 0; e < b.modalities.size(); ++e) {
    const ModalityInput& m = b.modalities[e];
    // Which instance each placeholder belongs to: a fixed count each, or each image's own grid.
    std::vector<int64_t> instance_of;
    if (m.grid.defined()) {
      for (int64_t i = 0; i < m.grid.size(0); ++i) {
        instance_of.insert(instance_of.end(), m.grid[i][0].item<int64_t>() * m.grid[i][1].item<int64_t>(), i);
      }
    } else {
      const int64_t per = m.positions.numel() / std::max<int64_t>(1, m.inputs.size(0));
      for (int64_t k = 0; k < m.positions.numel(); ++k) instance_of.push_back(k / per);
    }
    for (int64_t k = 0; k < m.positions.numel(); ++k) {
      rows[m.positions[k].item<int64_t>()].media =
          config.model.encoders[e].name + " #" + std::to_string(instance_of[k]);
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  tools::EnterUserDirectory();  // under `bazel run`, paths are relative to where the user is
  try {
    std::string config_path;
    std::vector<std::string> overrides, texts, files;
    int64_t sample = -1, sequence = -1;
    const char* usage =
        "usage: cornstarch-data [--config FILE] [--set key=value ...] [--sample N] [--sequence N] "
        "[--tokenize TEXT] [--tokenize-file F]\n"
        "  --sample N: sample N of the files of data.path (llava) as its chat template lays it out\n"
        "  --sequence N: packed sequence N as training reads it (any data.type)\n"
        "  --tokenize TEXT / --tokenize-file F: the ids data.tokenizer gives, one line per text or per line of F\n";
    tools::ParseCommandLine(
        argc, argv, usage,
        {{"--config", true, [&](const std::string& v) { config_path = v; }},
         {"--set", true, [&](const std::string& v) { overrides.push_back(v); }},
         {"--sample", true, [&](const std::string& v) { sample = tools::ParseInteger("--sample", v); }},
         {"--sequence", true, [&](const std::string& v) { sequence = tools::ParseInteger("--sequence", v); }},
         {"--tokenize", true, [&](const std::string& v) { texts.push_back(v); }},
         {"--tokenize-file", true, [&](const std::string& v) { files.push_back(v); }}});
    if (sample < 0 && sequence < 0 && texts.empty() && files.empty()) {
      throw Error(std::string("nothing to show; ") + usage);
    }
    const Config config = tools::LoadToolConfig(config_path, overrides);
    InitLogging(0, NameOf(config.logging.level));  // on stderr: stdout is the tables and ids

    if (!texts.empty() || !files.empty()) {
      const auto tokenizer = ConfiguredTokenizer(config, texts.empty() ? "--tokenize-file" : "--tokenize");
      for (const std::string& t : texts) PrintIds(*tokenizer, t);
      for (const std::string& f : files) {
        std::ifstream in(f);
        if (!in) throw Error(f + ": cannot open the file to tokenize");
        for (std::string line; std::getline(in, line);) PrintIds(*tokenizer, line);
      }
    }
    if (sample >= 0) {
      if (config.data.type != DataType::kLlava) throw Error("--sample: needs data.type: llava (use --sequence)");
      const LlavaDataset data(config, static_cast<uint64_t>(config.train.seed));
      // Sample N counts through the files of the first dataset in their sorted order.
      int64_t left = sample, total = 0;
      std::optional<LlavaDataset::Packed> packed;
      for (const std::string& path : data.sources().at(0).files) {
        const DatasetFile file(path, data.sources()[0].media_dir);
        total += file.size();
        if (!packed && left < file.size()) packed = data.Prepare(file, left);
        if (!packed) left -= file.size();
      }
      if (!packed) {
        throw Error("--sample: " + std::to_string(sample) + " is past the " + std::to_string(total) +
                    " samples of the dataset's files");
      }
      const auto tokenizer = ConfiguredTokenizer(config, "--sample");
      std::cout << packed->where << ", chat template " << NameOf(config.data.chat_template) << ":\n"
                << TokenTable(SampleRows(packed->tokens, EncoderNames(config)), tokenizer.get());
    }
    if (sequence >= 0) {
      const auto data = MakeDataset(config, static_cast<uint64_t>(config.train.seed));
      const auto tokenizer = config.data.type == DataType::kLlava ? ConfiguredTokenizer(config, "--sequence") : nullptr;
      std::cout << "sequence " << sequence << " (" << config.data.seq_len << " tokens):\n"
                << TokenTable(SequenceRows(config, *data, sequence), tokenizer.get());
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "cornstarch-data: " << e.what() << "\n";
    return 1;
  }
}
