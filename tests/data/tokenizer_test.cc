// tokenizer.json (data/hf_tokenizer.h), the chat templates (data/chat_template.h) and the token table
// (data/token_table.h): on small tokenizer files whose ids can be worked out by hand (tests/data/testdata/
// tokenizers: a word-level BPE with special tokens, and the Llama-2 layout), and on trained tokenizers of today's
// layouts against the ids of an independent implementation (fixtures of tests/data/make_tokenizer_fixtures.mjs).
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cornstarch/data/conversation.h"
#include "cornstarch/data/hf_tokenizer.h"
#include "cornstarch/data/token_table.h"
#include "tests/error_of.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Ids = std::vector<int64_t>;

namespace {

const std::string kDir = "tests/data/testdata/tokenizers/";

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The ids whose position carries a loss, in order (labels are shifted: position t's label is token t + 1).
Ids Learned(const TokenizedSample& t) {
  Ids out;
  for (size_t i = 0; i + 1 < t.ids.size(); ++i) {
    if (t.labels[i] != -100) {
      CHECK(t.labels[i] == t.ids[i + 1]);
      out.push_back(t.labels[i]);
    }
  }
  return out;
}

ConversationSample Chat(std::vector<Turn> turns) {
  ConversationSample s;
  s.turns = std::move(turns);
  return s;
}

// "Hi <image>" answered "Hello", with one image.
ConversationSample HiWithImage() {
  ConversationSample s = Chat({{"human", "Hi <image>"}, {"gpt", "Hello"}});
  s.images = {"a.png"};
  return s;
}

MediaSlot ImageSlot(const Tokenizer& tok, int64_t tokens) {
  MediaSlot slot;
  slot.placeholder = "<image>";
  slot.placeholder_id = tok.PlaceholderId("<image>");
  slot.tokens = tokens;
  return slot;
}

}  // namespace

TEST_CASE("tokenizer.json: BPE with byte fallback, Llama-2 normalisers and decoder") {
  const HfTokenizer tok = HfTokenizer::FromFile(kDir + "metaspace_fallback.json");
  // "ab 中" -> "▁ab▁中": ▁ a b ▁ <0xE4><0xB8><0xAD>; merges by rank: ▁+a, then ▁a+b.
  CHECK(tok.Encode("ab \xe4\xb8\xad") == Ids{11, 6, 3, 4, 5});
  CHECK(tok.Decode({11, 6, 3, 4, 5}) == "ab \xe4\xb8\xad");
  // An unknown character without byte pieces is unk, a run of them one unk (fuse_unk).
  CHECK(tok.Encode("a xy") == Ids{9, 6, 0});
  // Special tokens split the text first; the stretch after one gets its own Prepend.
  CHECK(tok.Encode("<s>ab</s>") == Ids{1, 11, 2});
  // A lone byte piece that is not valid UTF-8 decodes to U+FFFD.
  CHECK(tok.Decode({3}) == "\xef\xbf\xbd");
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  CHECK(tok.unk() == 0);
  CHECK(tok.Piece(11) == "\xe2\x96\x81" "ab");
  CHECK(tok.vocab_size() == 12);
}

TEST_CASE("tokenizer.json: split pattern, ignore_merges, added tokens") {
  const HfTokenizer tok = HfTokenizer::FromFile(kDir + "words.json");
  CHECK(tok.Encode("USER: Hi") == Ids{3, 4, 5, 7});
  CHECK(tok.Encode("Hello<|eot_id|>\n") == Ids{8, 23, 9});
  CHECK(tok.Encode("Hx") == Ids{10, 0});  // not a word of the vocabulary: characters, x unknown
  CHECK(tok.Decode({3, 4, 5, 7, 23}) == "USER: Hi<|eot_id|>");
  CHECK(tok.TokenId("<|im_end|>") == std::optional<int64_t>(25));
  CHECK(!tok.TokenId("<image>"));
  CHECK(tok.PlaceholderId("<image>") == 0);  // unk
  CHECK(tok.bos() == 20);
  CHECK(tok.eos() == 2);
}

TEST_CASE("tokenizer.json: unsupported or malformed parts are errors naming the JSON path") {
  std::string text = Slurp(kDir + "words.json");
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    REQUIRE(t.find(from) != std::string::npos);
    return t.replace(t.find(from), from.size(), to);
  };
  CHECK(ErrorOf([&] { HfTokenizer::FromJson(with("\"type\": \"Split\"", "\"type\": \"Whitespace\""), "t.json"); }) ==
        "t.json: tokenizer.json.pre_tokenizer.type: pre-tokenizer 'Whitespace' is not supported (supported: "
        "ByteLevel, Split, Metaspace, Sequence)");
  CHECK(ErrorOf([&] { HfTokenizer::FromJson(with("\"type\": \"BPE\"", "\"type\": \"Unigram\""), "t.json"); }) ==
        "t.json: tokenizer.json.model.type: model 'Unigram' is not supported (supported: BPE)");
  CHECK(ErrorOf([&] { HfTokenizer::FromJson(with("\"H i\"", "\"H q\""), "t.json"); }) ==
        "t.json: tokenizer.json.model.merges[0]: merges 'H' and 'q', which (or whose union) is not in model.vocab");
  CHECK(ErrorOf([&] { HfTokenizer::FromJson(with("[A-Za-z]+|", "([A-Za-z]+|"), "t.json"); })
            .find("t.json: tokenizer.json.pre_tokenizer.pattern.Regex: the pattern does not compile") == 0);
  CHECK(ErrorOf([&] { HfTokenizer::FromJson(with("\"id\": 20", "\"id\": 99999999"), "t.json"); }) ==
        "t.json: tokenizer.json.added_tokens[0].id: token id 99999999 outside [0, 2^24)");
  CHECK(ErrorOf([&] { HfTokenizer::FromFile(kDir + "absent.json"); }) ==
        kDir + "absent.json: cannot open the tokenizer file");
  CHECK(ErrorOf([&] { HfTokenizer::FromJson("{\"model\": 3", "t.json"); }).find("t.json") == 0);
}

TEST_CASE("chat templates: the ids of one conversation per template, loss on the answers and their end token") {
  const HfTokenizer tok = HfTokenizer::FromFile(kDir + "words.json");
  const ConversationSample chat = Chat({{"human", "Hi"}, {"gpt", "Hello"}});

  SECTION("llava_v1 and vicuna, with an image") {
    const ConversationSample s = HiWithImage();
    const MediaSlot slot = ImageSlot(tok, 2);
    const TokenizedSample t = TokenizeConversation(s, tok, {slot}, {ChatTemplate::kLlavaV1, ""});
    CHECK(t.ids == Ids{20, 3, 4, 5, 7, 5, 0, 0, 6, 4, 8, 2});
    CHECK(Learned(t) == Ids{8, 2});
    REQUIRE(t.media.size() == 1);
    CHECK(t.media[0].position == 6);
    // vicuna: the same after Vicuna's system prompt, encoded on its own.
    const TokenizedSample v = TokenizeConversation(s, tok, {slot}, {ChatTemplate::kVicuna, ""});
    Ids expected{20};
    for (int64_t id : tok.Encode("A chat between a curious user and an artificial intelligence assistant. The "
                                 "assistant gives helpful, detailed, and polite answers to the user's questions.")) {
      expected.push_back(id);
    }
    expected.insert(expected.end(), t.ids.begin() + 1, t.ids.end());
    CHECK(v.ids == expected);
    CHECK(Learned(v) == Ids{8, 2});
  }
  SECTION("plain: media only from the human turn, then the caption and a newline") {
    const TokenizedSample t = TokenizeConversation(HiWithImage(), tok, {ImageSlot(tok, 3)}, {ChatTemplate::kPlain, ""});
    CHECK(t.ids == Ids{20, 0, 0, 0, 8, 9});
    CHECK(Learned(t) == Ids{8, 9});
  }
  SECTION("llama3") {
    const TokenizedSample t = TokenizeConversation(chat, tok, {}, {ChatTemplate::kLlama3, ""});
    CHECK(t.ids == Ids{20, 21, 12, 22, 9, 9, 7, 23, 21, 13, 22, 9, 9, 8, 23});
    CHECK(Learned(t) == Ids{8, 23});
    // A system prompt from the config when the sample has none.
    const TokenizedSample sys = TokenizeConversation(chat, tok, {}, {ChatTemplate::kLlama3, "Hi"});
    CHECK(Ids(sys.ids.begin(), sys.ids.begin() + 8) == Ids{20, 21, 14, 22, 9, 9, 7, 23});
  }
  SECTION("chatml") {
    const TokenizedSample t = TokenizeConversation(chat, tok, {}, {ChatTemplate::kChatml, ""});
    CHECK(t.ids == Ids{24, 12, 9, 7, 25, 9, 24, 13, 9, 8, 25, 9});
    CHECK(Learned(t) == Ids{8, 25});
  }
  SECTION("llama2") {
    // [ and / are unknown here: one unk per run of them (fuse_unk), "INST" too.
    const TokenizedSample t = TokenizeConversation(chat, tok, {}, {ChatTemplate::kLlama2, ""});
    const Ids prompt = tok.Encode("[INST] Hi [/INST]");
    Ids expected{tok.bos()};
    expected.insert(expected.end(), prompt.begin(), prompt.end());
    for (int64_t id : {5, 8, 5, 2}) expected.push_back(id);
    CHECK(t.ids == expected);
    CHECK(Learned(t) == Ids{5, 8, 5, 2});
  }
  SECTION("a template's special token missing from the tokenizer") {
    const HfTokenizer plain = HfTokenizer::FromFile(kDir + "metaspace_fallback.json");
    CHECK(ErrorOf([&] { TokenizeConversation(chat, plain, {}, {ChatTemplate::kChatml, ""}); }) ==
          kDir + "metaspace_fallback.json: the tokenizer has no token '<|im_start|>', which data.chat_template: "
                 "chatml needs");
  }
}

TEST_CASE("chat templates: a merge across the prompt/answer boundary goes to the answer, counted once") {
  // The Llama-2 layout encodes "[INST] ... [/INST]" and " answer " as one run: with a merge of "a" and "b"
  // spanning the boundary, the merged token belongs to the later (answer) part.
  const HfTokenizer tok = HfTokenizer::FromFile(kDir + "metaspace_fallback.json");
  const ConversationSample chat = Chat({{"human", "a"}, {"gpt", "b"}});
  const TokenizedSample t = TokenizeConversation(chat, tok, {}, {ChatTemplate::kLlama2, ""});
  const Ids run = tok.Encode("[INST] a [/INST] b ", true);
  REQUIRE(t.ids.size() == run.size() + 2);
  CHECK(Ids(t.ids.begin() + 1, t.ids.end() - 1) == run);
  const Ids learned = Learned(t);
  REQUIRE(!learned.empty());
  CHECK(learned.back() == 2);
  CHECK(learned.size() <= run.size() + 1);
}

// Fixtures of an independent implementation of the format (Hugging Face's JavaScript tokenizers, run by
// tests/data/make_tokenizer_fixtures.mjs, which says how to regenerate them): five trained tokenizer.json layouts
// (Llama-3 and Qwen2 split patterns with byte-level BPE, GPT-2's ByteLevel regex, Llama-2's normalisers with byte
// fallback, a Metaspace pre-tokenizer with prepend_scheme first) and texts with code, numbers, emoji, CJK, accents,
// whitespace runs and special tokens. Exact ids and decoded text are required.
TEST_CASE("tokenizer.json: ids and decoded text equal an independent implementation's") {
  const nlohmann::json cases = nlohmann::json::parse(Slurp(kDir + "cases.json"));
  REQUIRE(cases.at("encode").size() == 5);
  for (const auto& [name, list] : cases.at("encode").items()) {
    const auto tok = OpenTokenizer(kDir + name + "/tokenizer.json");
    REQUIRE(list.size() >= 20);
    for (const auto& c : list) {
      const std::string text = c.at("text");
      INFO(name << ": " << nlohmann::json(text).dump());
      const Ids want = c.at("ids").get<Ids>();
      CHECK(tok->Encode(text) == want);
      if (!want.empty()) CHECK(tok->Decode(want) == c.at("decoded").get<std::string>());
    }
  }
}

TEST_CASE("chat templates: the ids of each family's own template text, loss on the answers") {
  const nlohmann::json cases = nlohmann::json::parse(Slurp(kDir + "cases.json"));
  REQUIRE(cases.at("chats").size() == 3);
  for (const auto& c : cases.at("chats")) {
    const std::string name = c.at("tokenizer");
    INFO(name);
    const auto tok = OpenTokenizer(kDir + name + "/tokenizer.json");
    ConversationSample s;
    for (const auto& t : c.at("turns")) s.turns.push_back({t.at("from"), t.at("value")});
    ChatTemplate chat = ChatTemplate::kLlama3;
    if (c.at("template") == "chatml") chat = ChatTemplate::kChatml;
    if (c.at("template") == "llama2") chat = ChatTemplate::kLlama2;
    const TokenizedSample t = TokenizeConversation(s, *tok, {}, {chat, ""});
    CHECK(t.ids == c.at("ids").get<Ids>());
    // What the model learns: each answer and the token that ends its turn, nothing else.
    const std::string learned = tok->Decode(Learned(t));
    if (chat == ChatTemplate::kLlama3) CHECK(learned == "4.<|eot_id|>30, of course!<|eot_id|>");
    if (chat == ChatTemplate::kChatml) CHECK(learned == "4.<|im_end|>30, of course!<|im_end|>");
    if (chat == ChatTemplate::kLlama2) CHECK(learned == "4. </s> 30, of course! </s>");
  }
}

TEST_CASE("token table: what the model sees of one sample, token by token") {
  const HfTokenizer tok = HfTokenizer::FromFile(kDir + "words.json");
  const ConversationSample s = HiWithImage();
  const MediaSlot slot = ImageSlot(tok, 2);
  const TokenizedSample t = TokenizeConversation(s, tok, {slot}, {ChatTemplate::kChatml, ""});
  // <|im_start|> user \n Hi " " [image x2] <|im_end|> \n <|im_start|> assistant \n *Hello *<|im_end|> \n
  REQUIRE(t.ids == Ids{24, 12, 9, 7, 5, 0, 0, 25, 9, 24, 13, 9, 8, 25, 9});
  const std::vector<TokenRow> rows = SampleRows(t, {"vision"});
  REQUIRE(rows.size() == 15);
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].id == t.ids[i]);
    CHECK(rows[i].position == static_cast<int64_t>(i));
    // The document is group 1, its image group 2: text sees both, the image only itself.
    const bool image = i == 5 || i == 6;
    CHECK(DescribeMaskWord(rows[i].word) == (image ? "media g2" : "text g1,g2"));
    CHECK(rows[i].media == (image ? "vision a.png" : ""));
    // Position 11 (the "\n" after the assistant header) predicts "Hello", position 12 the end of the turn.
    CHECK(rows[i].label == (i == 11 ? 8 : i == 12 ? 25 : -100));
  }
  CHECK(DescribeMaskWord(0) == "pad");

  const std::string table = TokenTable(rows, &tok);
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(table.substr(at, nl - at));
  }
  REQUIRE(lines.size() == 16);  // the header, then one line per token
  CHECK(lines[0].find("label piece") != std::string::npos);
  CHECK(lines[6].find("\"<unk>\"") != std::string::npos);
  CHECK(lines[6].find("vision a.png") != std::string::npos);
  CHECK(lines[13].find("\"Hello\"") != std::string::npos);
  CHECK(lines[13].find("\"<|im_end|>\"") != std::string::npos);  // its label's piece
  CHECK(lines[3].find("\"\\n\"") != std::string::npos);           // control characters escaped
  // Without a tokenizer (synthetic data) the pieces stay empty.
  CHECK(TokenTable(rows, nullptr).find('"') == std::string::npos);
}
