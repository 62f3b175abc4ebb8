#include "cornstarch/data/chat_template.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

enum class Role { kSystem, kUser, kAssistant };

Role RoleOf(const Turn& t) {
  if (t.from == "human" || t.from == "user") return Role::kUser;
  if (t.from == "gpt" || t.from == "assistant") return Role::kAssistant;
  if (t.from == "system") return Role::kSystem;
  throw Error("unknown conversation role '" + t.from + "' (expected human, gpt or system)");
}

std::string Trim(const std::string& s) {
  const char* space = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

const char* kVicunaSystem =
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions.";

struct Parts {
  std::vector<ChatPart> list;
  void Text(const std::string& s, bool loss = false) { list.push_back({ChatPart::Kind::kText, s, 0, loss}); }
  void Token(int64_t id, bool loss = false) { list.push_back({ChatPart::Kind::kToken, "", id, loss}); }
  void Break() {
    ChatPart b;
    b.kind = ChatPart::Kind::kBreak;
    list.push_back(b);
  }
};

int64_t Bos(const Tokenizer& t, const char* chat) {
  if (t.bos() < 0) throw Error(t.name() + ": the tokenizer has no BOS token, which data.chat_template: " + chat + " needs");
  return t.bos();
}
int64_t Eos(const Tokenizer& t, const char* chat) {
  if (t.eos() < 0) throw Error(t.name() + ": the tokenizer has no EOS token, which data.chat_template: " + chat + " needs");
  return t.eos();
}

bool HasSystem(const std::vector<Turn>& turns) {
  for (const Turn& t : turns) if (RoleOf(t) == Role::kSystem) return true;
  return false;
}

// llava_v1 and vicuna: every piece encoded on its own, as LLaVA's v1 conversations are.
void LlavaV1(Parts& p, const std::vector<Turn>& turns, const Tokenizer& tok, const std::string& system) {
  p.Token(Bos(tok, "llava_v1"));
  p.Break();
  if (!system.empty() && !HasSystem(turns)) {
    p.Text(system);
    p.Break();
  }
  for (const Turn& t : turns) {
    switch (RoleOf(t)) {
      case Role::kSystem: p.Text(t.value); break;
      case Role::kUser: p.Text("USER: " + t.value); break;
      case Role::kAssistant:
        p.Text("ASSISTANT:");
        p.Break();
        p.Text(t.value, true);
        p.Token(Eos(tok, "llava_v1"), true);
        break;
    }
    p.Break();
  }
}

void Plain(Parts& p, const std::vector<Turn>& turns, const Tokenizer& tok) {
  p.Token(Bos(tok, "plain"));
  for (const Turn& t : turns) {
    const Role r = RoleOf(t);
    if (r == Role::kUser) p.list.push_back({ChatPart::Kind::kText, t.value, 0, false, true});
    if (r == Role::kAssistant) p.Text(t.value + "\n", true);
    p.Break();
  }
}

void Llama2(Parts& p, const std::vector<Turn>& turns, const Tokenizer& tok, std::string system) {
  for (const Turn& t : turns) {
    switch (RoleOf(t)) {
      case Role::kSystem: system = t.value; break;
      case Role::kUser: {
        std::string content = t.value;
        if (!system.empty()) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
        system.clear();
        p.Token(Bos(tok, "llama2"));
        p.Text("[INST] " + Trim(content) + " [/INST]");
        break;
      }
      case Role::kAssistant:
        p.Text(" " + Trim(t.value) + " ", true);
        p.Token(Eos(tok, "llama2"), true);
        break;
    }
  }
}

void Llama3(Parts& p, const std::vector<Turn>& turns, const Tokenizer& tok, const std::string& system) {
  const int64_t start = tok.RequireToken("<|start_header_id|>", "data.chat_template: llama3");
  const int64_t end = tok.RequireToken("<|end_header_id|>", "data.chat_template: llama3");
  const int64_t eot = tok.RequireToken("<|eot_id|>", "data.chat_template: llama3");
  const auto turn = [&](const char* role, const std::string& content, bool loss) {
    p.Token(start);
    p.Text(role);
    p.Token(end);
    p.Text("\n\n");
    p.Text(Trim(content), loss);
    p.Token(eot, loss);
  };
  p.Token(Bos(tok, "llama3"));
  if (!system.empty() && !HasSystem(turns)) turn("system", system, false);
  for (const Turn& t : turns) {
    const Role r = RoleOf(t);
    turn(r == Role::kSystem ? "system" : r == Role::kUser ? "user" : "assistant", t.value, r == Role::kAssistant);
  }
}

void Chatml(Parts& p, const std::vector<Turn>& turns, const Tokenizer& tok, const std::string& system) {
  const int64_t start = tok.RequireToken("<|im_start|>", "data.chat_template: chatml");
  const int64_t end = tok.RequireToken("<|im_end|>", "data.chat_template: chatml");
  const auto turn = [&](const char* role, const std::string& content, bool loss) {
    p.Token(start);
    p.Text(std::string(role) + "\n");
    p.Text(content, loss);
    p.Token(end, loss);
    p.Text("\n");
  };
  if (!system.empty() && !HasSystem(turns)) turn("system", system, false);
  for (const Turn& t : turns) {
    const Role r = RoleOf(t);
    turn(r == Role::kSystem ? "system" : r == Role::kUser ? "user" : "assistant", t.value, r == Role::kAssistant);
  }
}

}  // namespace

std::vector<ChatPart> RenderChat(ChatTemplate chat, const std::vector<Turn>& turns, const Tokenizer& tokenizer,
                                 const std::string& system_prompt) {
  Parts p;
  switch (chat) {
    case ChatTemplate::kLlavaV1: LlavaV1(p, turns, tokenizer, system_prompt); break;
    case ChatTemplate::kVicuna:
      LlavaV1(p, turns, tokenizer, system_prompt.empty() ? kVicunaSystem : system_prompt);
      break;
    case ChatTemplate::kPlain: Plain(p, turns, tokenizer); break;
    case ChatTemplate::kLlama2: Llama2(p, turns, tokenizer, system_prompt); break;
    case ChatTemplate::kLlama3: Llama3(p, turns, tokenizer, system_prompt); break;
    case ChatTemplate::kChatml: Chatml(p, turns, tokenizer, system_prompt); break;
  }
  return p.list;
}

}  // namespace cornstarch
