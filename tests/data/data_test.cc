// Real-data path: the native sentencepiece BPE tokenizer against Debian's spm_encode on the same model, LLaVA
// JSON/JSONL reading, conversation tokenization (exact ids, placeholder positions, labels), packing, the dataset's
// batches (document isolation, restarting positions, media in placeholder order), every bad-input case in both
// policies, and the background loader. Fixtures are generated here: images, WAV files and a tokenizer trained by
// spm_train.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <numeric>
#include <set>
#include <string>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/data/conversation.h"
#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/data/dataset_file.h"
#include "cornstarch/data/image.h"
#include "cornstarch/plan/image_grid.h"
#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/loader.h"
#include "cornstarch/data/synthetic_layout.h"
#include "cornstarch/plan/packing.h"
#include "cornstarch/data/sentencepiece_tokenizer.h"
#include "cornstarch/plan/model_spec.h"
#include "tests/error_of.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Catch::Matchers::Contains;
using cornstarch::testing::TempPath;
namespace fs = std::filesystem;

namespace {


// One generated dataset for the whole binary.
const std::string& DemoDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("demo");
    WriteDemoDataset(d, {});
    return d;
  }();
  return dir;
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// spm_encode's ids for each line of `lines`.
std::vector<std::vector<int64_t>> SpmEncode(const std::string& model, const std::vector<std::string>& lines) {
  std::string input;
  for (const std::string& l : lines) input += l + "\n";
  WriteText(TempPath("spm_in.txt"), input);
  const std::string cmd = "spm_encode --model=" + model + " --output_format=id < " + TempPath("spm_in.txt") + " > " +
                          TempPath("spm_out.txt");
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::vector<std::vector<int64_t>> ids;
  std::istringstream out(ReadText(TempPath("spm_out.txt")));
  for (std::string line; std::getline(out, line);) {
    std::istringstream nums(line);
    ids.emplace_back();
    for (int64_t v; nums >> v;) ids.back().push_back(v);
  }
  return ids;
}

Config LlavaConfig(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {
      "data.type=llava", "data.path=" + DemoDir() + "/train.jsonl", "data.tokenizer=" + DemoDir() + "/tokenizer.model",
      "data.seq_len=96", "model.llm.vocab_size=512", "model.encoders.vision.type=vision",
      "model.encoders.vision.image_size=32", "model.encoders.vision.patch_size=8", "model.encoders.audio.type=audio",
      "model.encoders.audio.num_frames=32", "model.encoders.audio.num_mel_bins=16", "data.prefetch=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return ParseConfig("", "test", o);
}

}  // namespace

TEST_CASE("the native BPE tokenizer gives spm_encode's ids", "[data][tokenizer]") {
  const std::string model = DemoDir() + "/tokenizer.model";
  const SentencePieceTokenizer tok(model);
  const std::vector<std::string> lines = {
      "What colour is this picture?", "It is purple.", "  extra   spaces  between   words ", "USER: <image> and <audio>.",
      "unseen characters: ~ {} é ü 漢字 🙂", "purplegreenyellow", "a", "The sound is high, then low."};
  const auto expected = SpmEncode(model, lines);
  REQUIRE(expected.size() == lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    CHECK(tok.Encode(lines[i]) == expected[i]);
  }
  CHECK(tok.Encode("").empty());
  CHECK(tok.Decode(tok.Encode("It is purple.")) == "It is purple.");
  CHECK(tok.Decode(tok.Encode("snow 漢字")) == "snow 漢字");  // through byte pieces
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  CHECK(tok.PlaceholderId("<image>") != tok.unk());
  const std::vector<int64_t> ph = tok.Encode("<image>");  // a user-defined symbol stays one piece
  CHECK(ph.back() == tok.PlaceholderId("<image>"));
}

TEST_CASE("tokenizer: unknown runs without byte fallback, and bad model files", "[data][tokenizer]") {
  WriteText(TempPath("corpus.txt"), ReadText(DemoDir() + "/tokenizer_corpus.txt"));
  TrainSentencePiece(TempPath("corpus.txt"), TempPath("nobytes"), 120, "", "--byte_fallback=false");
  const SentencePieceTokenizer tok(TempPath("nobytes.model"));
  const std::vector<std::string> lines = {"It is 漢字漢字 and ~~ purple.", "  more  spaces  "};
  const auto expected = SpmEncode(TempPath("nobytes.model"), lines);
  for (size_t i = 0; i < lines.size(); ++i) CHECK(tok.Encode(lines[i]) == expected[i]);

  CHECK(ErrorOf([] { SentencePieceTokenizer t(TempPath("absent.model")); }) == TempPath("absent.model") + ": cannot open the tokenizer model");
  WriteText(TempPath("garbage.model"), "\xff\xff\xff\xff this is not protobuf");
  CHECK_THROWS_WITH(SentencePieceTokenizer(TempPath("garbage.model")), Contains("garbage.model: not a sentencepiece model"));
  TrainSentencePiece(TempPath("corpus.txt"), TempPath("unigram"), 60, "", "--model_type=unigram --byte_fallback=false");
  CHECK_THROWS_WITH(SentencePieceTokenizer(TempPath("unigram.model")), Contains("only BPE models"));
}

TEST_CASE("LLaVA JSON and JSONL files, and their format errors", "[data][json]") {
  WriteText(TempPath("a.json"), R"([{"id": 7, "image": ["x.png", "y.png"], "conversations": [
      {"from": "human", "value": "<image><image> hi"}, {"from": "gpt", "value": "yo"}]},
      {"conversations": [{"from": "human", "value": "text only"}, {"from": "gpt", "value": "ok"}]}])");
  const auto json = ReadConversations(TempPath("a.json"));
  REQUIRE(json.size() == 2);
  CHECK(json[0].id == "7");
  CHECK(json[0].images == std::vector<std::string>{"x.png", "y.png"});
  CHECK(json[1].images.empty());
  CHECK(json[1].turns[1].value == "ok");
  WriteText(TempPath("a.jsonl"), "{\"audio\": \"a.wav\", \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}\n\n"
                            "{\"conversations\": [}\n");
  CHECK_THROWS_WITH(ReadConversations(TempPath("a.jsonl")), Contains("a.jsonl:3: malformed JSON"));
  WriteText(TempPath("b.jsonl"), "{\"id\": \"x\", \"conversations\": []}\n");
  CHECK_THROWS_WITH(ReadConversations(TempPath("b.jsonl")), Contains("b.jsonl:1 (sample 0): expected \"conversations\""));
  WriteText(TempPath("c.json"), "{\"conversations\": 1}");
  CHECK_THROWS_WITH(ReadConversations(TempPath("c.json")), Contains("c.json: expected a JSON array"));
  WriteText(TempPath("d.json"), "[{\"image\": 3, \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}]");
  CHECK_THROWS_WITH(ReadConversations(TempPath("d.json")), Contains("d.json: sample 0: \"image\" must be a path"));
  CHECK_THROWS_WITH(ReadConversations(TempPath("none.json")), Contains("none.json: cannot open"));
}

TEST_CASE("a conversation becomes the prompt format with expanded placeholders and assistant-only labels",
          "[data][conversation]") {
  const SentencePieceTokenizer tok(DemoDir() + "/tokenizer.model");
  const int64_t ph_image = tok.PlaceholderId("<image>"), ph_audio = tok.PlaceholderId("<audio>");
  const std::vector<MediaSlot> slots = {{true, "<image>", ph_image, 4}, {false, "<audio>", ph_audio, 3}};
  ConversationSample s;
  s.images = {"a.png"};
  s.audios = {"b.wav"};
  s.turns = {{"system", "Be brief."}, {"human", "Look <image> hear <audio> now"}, {"gpt", "It is red."},
             {"human", "And?"}, {"gpt", "low"}};
  const TokenizedSample t = TokenizeConversation(s, tok, slots);

  std::vector<int64_t> ids = {tok.bos()};
  std::vector<bool> loss = {false};
  const auto add = [&](const std::vector<int64_t>& piece, bool l) {
    ids.insert(ids.end(), piece.begin(), piece.end());
    loss.insert(loss.end(), piece.size(), l);
  };
  add(tok.Encode("Be brief."), false);
  add(tok.Encode("USER: Look "), false);
  const int64_t image_at = static_cast<int64_t>(ids.size());
  add(std::vector<int64_t>(4, ph_image), false);
  add(tok.Encode(" hear "), false);
  const int64_t audio_at = static_cast<int64_t>(ids.size());
  add(std::vector<int64_t>(3, ph_audio), false);
  add(tok.Encode(" now"), false);
  add(tok.Encode("ASSISTANT:"), false);
  add(tok.Encode("It is red."), true);
  add({tok.eos()}, true);
  add(tok.Encode("USER: And?"), false);
  add(tok.Encode("ASSISTANT:"), false);
  add(tok.Encode("low"), true);
  add({tok.eos()}, true);
  CHECK(t.ids == ids);
  REQUIRE(t.labels.size() == ids.size());
  for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK(t.labels[i] == (loss[i + 1] ? ids[i + 1] : -100));
  CHECK(t.labels.back() == -100);
  REQUIRE(t.media.size() == 2);
  CHECK(t.media[0].encoder == 0);
  CHECK(t.media[0].position == image_at);
  CHECK(t.media[0].path == "a.png");
  CHECK(t.media[1].encoder == 1);
  CHECK(t.media[1].position == audio_at);
  int64_t span_total = 0;
  for (const MaskSpan& sp : t.spans) span_total += sp.length;
  CHECK(span_total == t.length());
  CHECK(t.spans.size() == 5);  // text, image, text, audio, text

  // Media without placeholders go in front of the first human turn, one per line.
  ConversationSample bare;
  bare.images = {"x.png", "y.png"};
  bare.turns = {{"human", "Which?"}, {"gpt", "Both."}};
  const TokenizedSample b = TokenizeConversation(bare, tok, slots);
  REQUIRE(b.media.size() == 2);
  CHECK(b.media[0].position == 1 + static_cast<int64_t>(tok.Encode("USER: ").size()));
  CHECK(b.media[1].position == b.media[0].position + 4 + static_cast<int64_t>(tok.Encode("\n").size()));

  ConversationSample bad = s;
  bad.images = {"a.png", "c.png"};
  CHECK(ErrorOf([&] { TokenizeConversation(bad, tok, slots); }) == "1 <image> placeholders but 2 images");
  bad = s;
  bad.turns[2].value = "see <image>";
  bad.images = {"a.png", "c.png"};
  CHECK(ErrorOf([&] { TokenizeConversation(bad, tok, slots); }) == "<image> in an assistant turn");
  bad = s;
  bad.turns[0].from = "narrator";
  CHECK_THROWS_WITH(TokenizeConversation(bad, tok, slots), Contains("unknown conversation role 'narrator'"));
  CHECK(ErrorOf([&] { TokenizeConversation(s, tok, {slots[0]}); }) == "has audio but the model has no audio encoder");
}

// Greedy packing of `order` with JoinsSequence, as a stream packs its samples.
std::vector<std::vector<int64_t>> Pack(const std::vector<int64_t>& order, const std::vector<PackItem>& items,
                                       int64_t seq_len, bool pack) {
  std::vector<std::vector<int64_t>> sequences;
  int64_t tokens = 0;
  int groups = 0;
  for (int64_t i : order) {
    if (sequences.empty() || !JoinsSequence(tokens, groups, items[i], seq_len, pack)) {
      sequences.emplace_back();
      tokens = groups = 0;
    }
    sequences.back().push_back(i);
    tokens += items[i].length;
    groups += items[i].groups;
  }
  return sequences;
}

TEST_CASE("packing fills sequences greedily within tokens and mask groups", "[data][packing]") {
  const std::vector<PackItem> items = {{5, 2}, {4, 1}, {3, 1}, {8, 1}, {1, 1}};
  using Seqs = std::vector<std::vector<int64_t>>;
  CHECK(Pack({0, 1, 2, 3, 4}, items, 10, true) == Seqs{{0, 1}, {2}, {3, 4}});
  CHECK(Pack({4, 3, 2, 1, 0}, items, 10, true) == Seqs{{4, 3}, {2, 1}, {0}});
  CHECK(Pack({0, 1, 2}, items, 10, false) == Seqs{{0}, {1}, {2}});
  // 61 group bits per sequence: 20 items of 3 groups fit, the 21st starts a new sequence.
  const std::vector<PackItem> groups(21, PackItem{1, 3});
  std::vector<int64_t> order(21);
  std::iota(order.begin(), order.end(), 0);
  const Seqs g = Pack(order, groups, 1000, true);
  REQUIRE(g.size() == 2);
  CHECK(g[0].size() == 20);
  CHECK_THROWS(JoinsSequence(0, 0, PackItem{11, 1}, 10, true));  // longer than a sequence

  const std::vector<int64_t> e0 = EpochOrder(50, 3, 0, true), e1 = EpochOrder(50, 3, 1, true);
  CHECK(e0 == EpochOrder(50, 3, 0, true));
  CHECK(e0 != e1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == EpochOrder(50, 3, 0, false));
}

TEST_CASE("llava batches: packed samples isolated, positions restart, features at their placeholders",
          "[data][dataset]") {
  const Config cfg = LlavaConfig();
  const LlavaDataset data(cfg, 5);
  const Batch batch = data.Get(0, 4);
  CHECK(batch.input_ids.sizes() == torch::IntArrayRef({4, 96}));
  const int64_t s = 96;
  std::vector<int64_t> media_per_encoder(2, 0);
  for (int64_t b = 0; b < 4; ++b) {
    const std::vector<LlavaDataset::Packed> members = data.Sequence(b);
    CHECK(members.size() >= 1);
    int64_t offset = 0;
    std::vector<int64_t> doc_of(s, -1);
    for (size_t d = 0; d < members.size(); ++d) {
      const TokenizedSample& t = members[d].tokens;
      for (int64_t k = 0; k < t.length(); ++k) {
        REQUIRE(batch.input_ids[b][offset + k].item<int64_t>() == t.ids[k]);
        REQUIRE(batch.labels[b][offset + k].item<int64_t>() == t.labels[k]);
        REQUIRE(batch.positions[b][offset + k].item<int64_t>() == k);
        doc_of[offset + k] = static_cast<int64_t>(d);
      }
      for (const MediaRef& m : t.media) ++media_per_encoder[m.encoder];
      offset += t.length();
    }
    CHECK(offset <= s);
    const torch::Tensor words = batch.mask_words[b].contiguous();
    const int64_t* w = words.data_ptr<int64_t>();
    for (int64_t i = 0; i < s; ++i) {
      if (i >= offset) REQUIRE(w[i] == 0);
      for (int64_t j = 0; j <= i; ++j) {
        if (doc_of[i] != doc_of[j]) REQUIRE_FALSE(MaskAllows(w[i], w[j], i, j));
      }
    }
  }
  // Features land on placeholder ids, in order; one input per media file of the batch.
  const SentencePieceTokenizer tok(cfg.data.tokenizer);
  for (int k = 0; k < 2; ++k) {
    const ModalityInput& mi = batch.modalities[k];
    CHECK(mi.inputs.size(0) == media_per_encoder[k]);
    CHECK(mi.positions.numel() == media_per_encoder[k] * EncoderTokens(cfg.model.encoders[k]));
    const int64_t ph = tok.PlaceholderId(k == 0 ? "<image>" : "<audio>");
    for (int64_t p = 0; p < mi.positions.numel(); ++p) {
      REQUIRE(batch.input_ids.view(-1)[mi.positions[p].item<int64_t>()].item<int64_t>() == ph);
    }
  }
  CHECK(batch.modalities[0].inputs.sizes().slice(1) == torch::IntArrayRef({3, 32, 32}));
  CHECK(batch.modalities[1].inputs.sizes().slice(1) == torch::IntArrayRef({16, 32}));
  // Pure in the index: the same batch again, and a later epoch differs in order but not in content.
  CHECK(torch::equal(data.Get(0, 4).input_ids, batch.input_ids));
  CHECK(torch::equal(data.Get(2, 1).modalities[0].inputs, data.Get(2, 2).modalities[0].inputs.narrow(
                                                               0, 0, data.Get(2, 1).modalities[0].inputs.size(0))));
  // The first epoch reads each of the 96 samples exactly once, packed into fewer sequences.
  std::set<std::string> seen;
  int64_t g = 0;
  for (; seen.size() < 96; ++g) {
    for (const LlavaDataset::Packed& p : data.Sequence(g)) REQUIRE(seen.insert(p.where).second);
  }
  CHECK(g < 96);
  CHECK(data.skipped() == 0);

  const LlavaDataset unpacked(LlavaConfig({"data.pack=false", "data.shuffle=false"}), 5);
  for (int64_t i = 0; i < 5; ++i) {
    const std::vector<LlavaDataset::Packed> one = unpacked.Sequence(i);
    REQUIRE(one.size() == 1);
    CHECK_THAT(one[0].where, Catch::Matchers::StartsWith(cfg.data.path[0] + ": sample " + std::to_string(i) + " "));
  }
}

TEST_CASE("llava batches at the images' own resolution or tiled: placeholders, patches and tower words per view",
          "[data][dataset][dynamic]") {
  for (const bool anyres : {false, true}) {
    INFO((anyres ? "anyres" : "dynamic resolution"));
    const Config cfg = LlavaConfig(
        {"data.image_preset=siglip", anyres ? "model.encoders.vision.anyres_max_tiles=2" : "data.seq_len=96",
         anyres ? "data.seq_len=192" : "model.encoders.vision.dynamic_resolution=true",
         "model.encoders.vision.max_patches=20"});
    const EncoderConfig& e = cfg.model.encoders[0];
    const int64_t s = cfg.data.seq_len;
    const LlavaDataset data(cfg, 5);
    const Batch batch = data.Get(0, 4);
    const ModalityInput& m = batch.modalities[0];
    const SentencePieceTokenizer tok(cfg.data.tokenizer);
    const int64_t ph = tok.PlaceholderId("<image>");
    const torch::Tensor rows = m.inputs.reshape({-1, 3 * 8 * 8});
    int64_t view = 0, patch = 0;
    std::set<int64_t> tokens_per_image, tile_rows;
    for (int64_t b = 0; b < 4; ++b) {
      int64_t offset = 0;
      for (const LlavaDataset::Packed& p : data.Sequence(b)) {
        const TokenizedSample& t = p.tokens;
        size_t span = 0;
        for (size_t j = 0; j < t.media.size(); ++j) {
          while (t.spans[span].kind == kTextToken) ++span;
          const int64_t length = t.spans[span++].length;
          if (t.media[j].encoder != 0) continue;
          // Its views from the decoded file, its placeholders as many as their patches, each view's patches the
          // file preprocessed for it and cut into 8 x 8 patches (read back index by index).
          const Image img = DecodeImage(ReadMedia(p.media[j]), p.media[j].name);
          INFO(p.media[j].name << ": " << img.width << " x " << img.height);
          const std::vector<PatchGrid> views = ImageViews(img.width, img.height, e);
          std::vector<std::vector<float>> pixels;
          const ImagePreprocess pre = PresetPreprocess(ImagePreset::kSiglip, 32);
          if (anyres) {
            const PatchGrid tiles = AnyresTiles(img.width, img.height, e);
            tile_rows.insert(tiles.rows);
            REQUIRE(views.size() == static_cast<size_t>(1 + tiles.patches()));
            pixels = PreprocessAnyres(img, pre, static_cast<int>(tiles.rows), static_cast<int>(tiles.cols));
          } else {
            REQUIRE(views.size() == 1);
            REQUIRE(views[0].patches() <= 20);
            pixels.push_back(PreprocessImageAt(img, pre, static_cast<int>(views[0].cols * 8),
                                               static_cast<int>(views[0].rows * 8)));
          }
          int64_t in_image = 0;
          int64_t last_word = -1;
          for (size_t v = 0; v < views.size(); ++v, ++view) {
            const PatchGrid& g = views[v];
            REQUIRE(m.grid[view][0].item<int64_t>() == g.rows);
            REQUIRE(m.grid[view][1].item<int64_t>() == g.cols);
            const int64_t first = m.patches[patch].item<int64_t>();
            const int64_t word = m.words.view(-1)[first].item<int64_t>();
            CHECK(__builtin_popcountll(word) == 1);
            CHECK(word != last_word);  // each view its own attention group
            last_word = word;
            for (int64_t k = 0; k < g.patches(); ++k, ++patch, ++in_image) {
              const int64_t at = m.patches[patch].item<int64_t>();
              REQUIRE(at == first + k);  // a view's patches lie together, row by row
              REQUIRE(m.words.view(-1)[at].item<int64_t>() == word);
              REQUIRE(m.positions[patch].item<int64_t>() == b * s + offset + t.media[j].position + in_image);
              REQUIRE(batch.input_ids.view(-1)[m.positions[patch].item<int64_t>()].item<int64_t>() == ph);
              const int64_t r = k / g.cols, c = k % g.cols;
              for (int64_t ch = 0; ch < 3; ++ch) {
                for (int64_t y = 0; y < 8; ++y) {
                  for (int64_t x = 0; x < 8; ++x) {
                    const float want = pixels[v][(ch * g.rows * 8 + r * 8 + y) * g.cols * 8 + c * 8 + x];
                    REQUIRE(rows[at][(ch * 8 + y) * 8 + x].item<float>() == want);
                  }
                }
              }
            }
          }
          REQUIRE(length == in_image);
          tokens_per_image.insert(in_image);
        }
        offset += t.length();
      }
    }
    CHECK(view == m.grid.size(0));
    CHECK(patch == m.patches.numel());
    CHECK(patch == m.positions.numel());
    CHECK(m.words.ne(0).sum().item<int64_t>() == patch);  // the rest is padding
    // The demo images differ in size, so in tokens, or (all in two tiles) in the tiles' layout.
    CHECK((anyres ? tile_rows : tokens_per_image).size() >= 2);
  }
}

TEST_CASE("bad samples: an error naming file and sample, or skipped and counted", "[data][dataset]") {
  const std::string dir = TempPath("bad");
  fs::create_directories(dir + "/media");
  fs::copy_file(DemoDir() + "/media/demo-0.png", dir + "/media/good.png", fs::copy_options::overwrite_existing);
  WriteText(dir + "/media/broken.png", "\x89PNG\r\n\x1a\nnot really");
  const std::string turns = R"("conversations": [{"from": "human", "value": "<image> What?"}, {"from": "gpt", "value": "red"}])";
  const std::string long_text(400, 'x');
  WriteText(dir + "/train.jsonl",
            "{\"id\": \"ok\", \"image\": \"media/good.png\", " + turns + "}\n" +
                "{\"id\": \"gone\", \"image\": \"media/missing.png\", " + turns + "}\n" +
                "{\"id\": \"two\", \"image\": [\"media/good.png\", \"media/good.png\"], " + turns + "}\n" +
                "{\"id\": \"long\", \"conversations\": [{\"from\": \"human\", \"value\": \"" + long_text +
                "\"}]}\n" + "{\"id\": \"corrupt\", \"image\": \"media/broken.png\", " + turns + "}\n");
  const std::vector<std::string> base = {"data.path=" + dir + "/train.jsonl", "data.shuffle=false", "data.pack=false"};
  const auto config = [&](const std::string& policy) {
    std::vector<std::string> o = base;
    o.push_back("data.on_bad_sample=" + policy);
    return LlavaConfig(o);
  };
  const std::string file = dir + "/train.jsonl";
  // Nothing is read at start: a bad sample shows when its sequence is.
  const LlavaDataset strict_all(config("error"), 0);
  CHECK(ErrorOf([&] { strict_all.Get(0, 2); }) ==
        file + ": sample 1 (id gone): " + dir + "/media/missing.png: no such file (data.on_bad_sample: skip leaves "
        "such samples out)");

  const LlavaDataset skip(config("skip"), 0);
  const Batch b = skip.Get(0, 2);  // ok; then gone, two, long left out and corrupt padded at load
  CHECK(skip.skipped() == 4);
  CHECK(b.modalities[0].inputs.size(0) == 1);
  CHECK(b.labels[1].eq(-100).all().item<bool>());  // the corrupt sample's tokens are padding
  CHECK(b.mask_words[1].eq(0).all().item<bool>());
  CHECK(torch::equal(skip.Get(0, 2).input_ids, b.input_ids));  // read again: the same, counted once

  // Only the corrupt file left: skipping at start passes, loading it in 'error' mode names it.
  WriteText(dir + "/only.jsonl", "{\"id\": \"corrupt\", \"image\": \"media/broken.png\", " + turns + "}\n");
  std::vector<std::string> o = base;
  o[0] = "data.path=" + dir + "/only.jsonl";
  const LlavaDataset strict(LlavaConfig(o), 0);
  CHECK_THROWS_WITH(strict.Get(0, 1), Contains(dir + "/only.jsonl: sample 0 (id corrupt): " + dir +
                                               "/media/broken.png: "));
  o.push_back("model.llm.vocab_size=300");
  CHECK_THROWS_WITH(LlavaDataset(LlavaConfig(o), 0), Contains("model.llm.vocab_size: must be at least 384"));
  CHECK_THROWS_WITH(LlavaConfig({"data.tokenizer="}), Contains("data.tokenizer: llava data needs"));
  CHECK_THROWS_WITH(LlavaConfig({"data.image_mean=[0.5, 0.5]"}), Contains("data.image_mean: must be empty or"));
  CHECK_THROWS_WITH(LlavaConfig({"model.encoders.v2.type=vision"}), Contains("model.encoders.v2: llava data feeds"));
}

namespace {

// Counts calls and fails on request `fail_at`.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t fail_at) : fail_at_(fail_at) {}
  Batch Get(int64_t first, int64_t count) const override {
    if (first == fail_at_) throw Error("cannot load " + std::to_string(first));
    Batch b;
    b.input_ids = torch::arange(first, first + count, torch::kLong).view({1, count});
    return b;
  }

 private:
  int64_t fail_at_;
};

}  // namespace

TEST_CASE("the background loader serves the requests in order and rethrows a failure", "[data][loader]") {
  const CountingDataset data(30);
  for (const int64_t depth : {0, 1, 4}) {
    BatchLoader loader(data, [](int64_t i) { return BatchLoader::Slice{i * 3, 3}; }, depth);
    for (int64_t i = 0; i < 10; ++i) {
      INFO("depth " << depth << " request " << i);
      CHECK(loader.Next().input_ids[0][0].item<int64_t>() == i * 3);
    }
    CHECK_THROWS_WITH(loader.Next(), "cannot load 30");
  }
  // The real dataset through the loader equals direct reads.
  const Config cfg = LlavaConfig();
  const LlavaDataset llava(cfg, 1);
  BatchLoader loader(llava, [](int64_t i) { return BatchLoader::Slice{i * 2, 2}; }, 3);
  for (int64_t i = 0; i < 4; ++i) CHECK(torch::equal(loader.Next().mask_words, llava.Get(i * 2, 2).mask_words));
}

TEST_CASE("the synthetic data's checks of the config name the field", "[data]") {
  const char* base = "model:\n  encoders:\n    vision:\n      type: vision\n    audio:\n      type: audio\n";
  const auto error = [&](const std::string& yaml, const std::vector<std::string>& overrides) {
    return ErrorOf([&] { ValidateSyntheticData(ParseConfig(yaml, "test.yaml", overrides)); });
  };
  CHECK(error(base, {}) == "no error");
  CHECK(error(base, {"data.seq_len=20"}) ==
        "data.seq_len: must hold the longest synthetic sample of 46 tokens (32 of them modality tokens), got 20");
  CHECK(error(base, {"model.llm.vocab_size=20"}) ==
        "model.llm.vocab_size: must be at least 38 for the synthetic data (2 encoders x 8 classes + special and 8 "
        "prompt tokens), got 20");
  CHECK(error("model: {}\n", {}) == "model.encoders: the synthetic data needs at least one encoder, got 'none'");
  CHECK(error("model: {}\ndata: {type: llava, path: x.jsonl, tokenizer: t.model}\n", {}) == "no error");
}
