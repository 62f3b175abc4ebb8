#include "cornstarch/data/demo_dataset.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cornstarch/data/audio.h"
#include "cornstarch/data/image.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/random.h"

namespace cornstarch {

namespace fs = std::filesystem;

namespace {

struct Colour {
  const char* name;
  uint8_t r, g, b;
};
const Colour kColours[] = {{"red", 220, 30, 30}, {"green", 30, 200, 40}, {"blue", 30, 60, 220},
                           {"yellow", 230, 220, 40}, {"purple", 150, 40, 190}, {"white", 240, 240, 240}};
struct Tone {
  const char* name;
  double hz;
};
const Tone kTones[] = {{"low", 220.0}, {"middle", 660.0}, {"high", 1760.0}};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

void TrainSentencePiece(const std::string& text_file, const std::string& model_prefix, int vocab_size,
                        const std::string& symbols, const std::string& extra) {
  const std::string cmd = "spm_train --input=" + Quote(text_file) + " --model_prefix=" + Quote(model_prefix) +
                          " --vocab_size=" + std::to_string(vocab_size) +
                          " --model_type=bpe --byte_fallback=true --character_coverage=1.0"
                          " --normalization_rule_name=identity --num_threads=1 --minloglevel=2" +
                          (symbols.empty() ? "" : " --user_defined_symbols=" + Quote(symbols)) + " " + extra +
                          " > " + Quote(model_prefix + ".log") + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    throw Error("spm_train failed (is Debian's sentencepiece installed? tools/setup.sh installs it); see " +
                model_prefix + ".log");
  }
}

void WriteDemoDataset(const std::string& dir, const DemoDataOptions& options) {
  fs::create_directories(fs::path(dir) / "media");
  std::mt19937_64 rng(MixSeed(options.seed, 0x64656d6fULL));
  std::normal_distribution<double> noise(0.0, 12.0);
  const auto image = [&](const std::string& name, const Colour& c) {
    const int w = 32 + static_cast<int>(rng() % 3) * 8, h = 32 + static_cast<int>(rng() % 2) * 8;
    Image img{w, h, {}};
    for (int i = 0; i < w * h; ++i) {
      for (uint8_t v : {c.r, c.g, c.b}) {
        img.rgb.push_back(static_cast<uint8_t>(std::clamp(v + noise(rng), 0.0, 255.0)));
      }
    }
    const bool png = rng() % 2 == 0;
    const std::string file = "media/" + name + (png ? ".png" : ".jpg");
    if (png) WritePng((fs::path(dir) / file).string(), img);
    else WriteJpeg((fs::path(dir) / file).string(), img, 90);
    return file;
  };
  const auto tone = [&](const std::string& name, const Tone& t) {
    Audio a;
    a.sample_rate = rng() % 2 == 0 ? 16000 : 22050;
    const int n = a.sample_rate * 3 / 10;  // 0.3 s
    std::uniform_real_distribution<double> phase(0, 6.28);
    const double p = phase(rng);
    for (int i = 0; i < n; ++i) a.samples.push_back(static_cast<float>(0.5 * std::sin(2 * M_PI * t.hz * i / a.sample_rate + p)));
    const std::string file = "media/" + name + ".wav";
    WriteWav((fs::path(dir) / file).string(), a);
    return file;
  };

  nlohmann::json samples = nlohmann::json::array();
  std::string corpus;
  for (int64_t i = 0; i < options.samples; ++i) {
    const std::string id = "demo-" + std::to_string(i);
    nlohmann::json s = {{"id", id}};
    std::string question, answer;
    const Colour& c = kColours[rng() % std::size(kColours)];
    const Tone& t = kTones[rng() % std::size(kTones)];
    switch (i % 5) {
      case 0:
        s["image"] = image(id, c);
        question = "<image>\nWhat colour is this picture?";
        answer = std::string("It is ") + c.name + ".";
        break;
      case 1:
        s["audio"] = tone(id, t);
        question = "<audio>\nIs this sound low, middle or high?";
        answer = std::string("The sound is ") + t.name + ".";
        break;
      case 2:
        s["image"] = image(id, c);
        s["audio"] = tone(id, t);
        question = "Look at <image> and listen to <audio>. Describe both.";
        answer = std::string("A ") + c.name + " picture and a " + t.name + " sound.";
        break;
      case 3: {
        const Colour& d = kColours[rng() % std::size(kColours)];
        s["image"] = {image(id + "-a", c), image(id + "-b", d)};
        question = "First <image> then <image>. Which colours?";
        answer = std::string("First ") + c.name + ", then " + d.name + ".";
        break;
      }
      default:
        question = "Name a colour and a pitch.";
        answer = std::string(c.name) + " and " + t.name + ".";
    }
    s["conversations"] = {{{"from", "human"}, {"value", question}}, {{"from", "gpt"}, {"value", answer}}};
    samples.push_back(s);
    corpus += "USER: " + question + "\nASSISTANT: " + answer + "\n";
  }
  const fs::path data = fs::path(dir) / (options.jsonl ? "train.jsonl" : "train.json");
  {
    std::ofstream out(data);
    if (options.jsonl) {
      for (const auto& s : samples) out << s.dump() << "\n";
    } else {
      out << samples.dump(1) << "\n";
    }
    if (!out) throw Error(data.string() + ": cannot write");
  }
  const fs::path text = fs::path(dir) / "tokenizer_corpus.txt";
  std::ofstream(text) << corpus;
  TrainSentencePiece(text.string(), (fs::path(dir) / "tokenizer").string(), options.vocab_size, "<image>,<audio>");
}

}  // namespace cornstarch
