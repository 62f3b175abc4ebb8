// Generates the independent fixtures of tests/data/tokenizer_test.cc: small tokenizer.json files of the layouts
// today's LLMs ship (Llama-3 and Qwen2 byte-level BPE with their split patterns, GPT-2's ByteLevel regex, Llama-2's
// normalisers with byte fallback, a Metaspace pre-tokenizer with prepend_scheme "first"), each with a vocabulary
// trained here by plain BPE on a mixed corpus, and the ids that Hugging Face's own JavaScript implementation of the
// format (@huggingface/tokenizers, a separate code base from ours) gives for a list of hard texts.
//
// Regenerate (Node.js 20 and the npm registry; nothing is installed into the repository):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install @huggingface/tokenizers@0.2.0
//   NODE_PATH=/tmp/tokref/node_modules node \
//     tests/data/make_tokenizer_fixtures.mjs tests/data/testdata/tokenizers
// It writes <out>/<name>/tokenizer.json and tokenizer_config.json, <out>/cases.json (per tokenizer: text, ids and
// decoded text; per chat template: a conversation, its rendered text and ids), and for the command-line tool
// <out>/lines.txt with <out>/<name>/lines.ids. The training is deterministic (ties broken by the pair's text), so a
// rerun writes the same files.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.env.NODE_PATH ?? ".", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");

const out = process.argv[2];
if (!out) throw new Error("usage: make_tokenizer_fixtures.mjs OUT_DIR");

// The training corpus: prose, code, numbers, accents, CJK, emoji, whitespace runs.
const corpus = `
The quick brown fox jumps over the lazy dog. The dog was not amused; it's the third time they've done this!
I'm sure we'll see what you'd say: "Don't panic." She said THE END, then left.
def train_step(model, batch):\n    loss = model(batch["input_ids"]).mean()\n    loss.backward()\n    return loss.item()
for (int i = 0; i < 1024; ++i) { total += values[i] * 0.5f; }  // sum of halves
Numbers: 3.14159, 2718281828, 1,000,000 and 42; version 2.1.3 released on 2024-06-30 at 12:45.
Café, naïve, résumé, façade, jalapeño, Ångström, Zürich, crème brûlée, São Paulo, Kraków.
机器学习是人工智能的一个分支。深度学习模型需要大量数据。中文文本和日本語のテキスト、한국어 문장도 있다.
Emoji: 😀 🚀 👍🏽 ❤️ 🇫🇷 — and a dash – and an ellipsis…
Tabs\tand\tspaces   between    words,\n\nblank lines\n   indented line\r\nwindows line end.
USER: <image>\nWhat is shown in the picture? ASSISTANT: A cat sitting on a red sofa next to a window.
the the the and and of of to to in in is is that that for for with with on on as as by by
`.repeat(3);

// GPT-2's reversible map from bytes to printable code points.
function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      ++n;
    }
  }
  const map = new Map();
  bs.forEach((b, i) => map.set(b, String.fromCodePoint(cs[i])));
  return map;
}
const byteChar = bytesToUnicode();
const toByteLevel = (s) => [...new TextEncoder().encode(s)].map((b) => byteChar.get(b)).join("");

// Plain BPE training over words given as arrays of symbols: repeatedly merge the most frequent adjacent pair.
function trainMerges(words, numMerges) {
  const counts = new Map();
  for (const w of words) counts.set(w.join("\u0000"), (counts.get(w.join("\u0000")) ?? 0) + 1);
  let seqs = [...counts.entries()].map(([k, c]) => ({ syms: k.split("\u0000"), c }));
  const merges = [];
  for (let m = 0; m < numMerges; ++m) {
    const pairs = new Map();
    for (const { syms, c } of seqs) {
      for (let i = 0; i + 1 < syms.length; ++i) {
        const key = syms[i] + "\u0000" + syms[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + c);
      }
    }
    let best = null;
    let bestCount = 1;
    for (const [key, c] of pairs) {
      if (c > bestCount || (c === bestCount && best !== null && key < best)) {
        best = key;
        bestCount = c;
      }
    }
    if (best === null) break;
    const [a, b] = best.split("\u0000");
    merges.push([a, b]);
    for (const s of seqs) {
      const next = [];
      for (let i = 0; i < s.syms.length; ++i) {
        if (i + 1 < s.syms.length && s.syms[i] === a && s.syms[i + 1] === b) {
          next.push(a + b);
          ++i;
        } else {
          next.push(s.syms[i]);
        }
      }
      s.syms = next;
    }
  }
  return merges;
}

const trainingWords = (text) => text.match(/ ?\p{L}+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+/gu) ?? [];

function addedToken(id, content, special) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special };
}

// A byte-level BPE tokenizer (Llama-3, Qwen2, GPT-2 layouts).
function byteLevel({ preTokenizer, normalizer, specials, extraAdded, mergesAsPairs, ignoreMerges }) {
  const words = trainingWords(corpus.normalize("NFC")).map((w) => [...toByteLevel(w)]);
  const merges = trainMerges(words, 420);
  const vocab = {};
  let id = 0;
  for (let b = 0; b < 256; ++b) vocab[byteChar.get(b)] = id++;
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = id++;
  const added = [];
  for (const s of specials) added.push(addedToken(id++, s, true));
  for (const s of extraAdded) added.push(addedToken(id++, s, false));
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer,
    pre_tokenizer: preTokenizer,
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: ignoreMerges,
      vocab,
      merges: mergesAsPairs ? merges : merges.map(([a, b]) => `${a} ${b}`),
    },
  };
}

// A sentencepiece-style BPE (▁ for spaces, <0xXX> byte pieces for characters outside the vocabulary).
function metaspace({ normalizer, preTokenizer, decoder }) {
  const text = corpus.replace(/ /g, "\u2581");
  // Characters seen at least 6 times are symbols; the rest (rare CJK, emoji) fall back to bytes.
  const seen = new Map();
  for (const ch of text) seen.set(ch, (seen.get(ch) ?? 0) + 1);
  const chars = [...seen.entries()].filter(([ch, c]) => c >= 6 && ch !== "\n").map(([ch]) => ch).sort();
  const words = (text.match(/\u2581?[^\u2581\n]+|\n/gu) ?? []).map((w) => [...w].filter((ch) => chars.includes(ch)));
  const merges = trainMerges(words.filter((w) => w.length > 1), 300);
  const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  let id = 3;
  for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = id++;
  for (const ch of chars) if (!(ch in vocab)) vocab[ch] = id++;
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = id++;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [addedToken(0, "<unk>", true), addedToken(1, "<s>", true), addedToken(2, "</s>", true)],
    normalizer,
    pre_tokenizer: preTokenizer,
    post_processor: null,
    decoder,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: "<unk>",
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges: merges.map(([a, b]) => `${a} ${b}`),
    },
  };
}

const LLAMA3 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const splitThenBytes = (pattern) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
});
const sentencepieceDecoder = {
  type: "Sequence",
  decoders: [
    { type: "Replace", pattern: { String: "\u2581" }, content: " " },
    { type: "ByteFallback" },
    { type: "Fuse" },
    { type: "Strip", content: " ", start: 1, stop: 0 },
  ],
};

const tokenizers = {
  llama3: {
    json: byteLevel({
      preTokenizer: splitThenBytes(LLAMA3),
      normalizer: null,
      specials: ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
      extraAdded: [],
      mergesAsPairs: false,
      ignoreMerges: true,
    }),
    config: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  },
  qwen2: {
    json: byteLevel({
      preTokenizer: splitThenBytes(QWEN2),
      normalizer: { type: "NFC" },
      specials: ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
      extraAdded: ["<image>"],
      mergesAsPairs: true,
      ignoreMerges: false,
    }),
    config: { bos_token: null, eos_token: "<|im_end|>" },
  },
  gpt2: {
    json: byteLevel({
      preTokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      normalizer: null,
      specials: ["<|endoftext|>"],
      extraAdded: [],
      mergesAsPairs: false,
      ignoreMerges: false,
    }),
    config: { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>" },
  },
  llama2: {
    json: metaspace({
      normalizer: {
        type: "Sequence",
        normalizers: [
          { type: "Prepend", prepend: "\u2581" },
          { type: "Replace", pattern: { String: " " }, content: "\u2581" },
        ],
      },
      preTokenizer: null,
      decoder: sentencepieceDecoder,
    }),
    config: { bos_token: "<s>", eos_token: "</s>" },
  },
  metaspace_first: {
    json: metaspace({
      normalizer: null,
      preTokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
      decoder: {
        type: "Sequence",
        decoders: [
          { type: "ByteFallback" },
          { type: "Fuse" },
          { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
        ],
      },
    }),
    config: { bos_token: "<s>", eos_token: "</s>" },
  },
};

// The texts: each stresses a part of the format; none of them is the training corpus verbatim.
const texts = [
  "Hello world",
  "The quick brown fox jumps over the lazy dog.",
  "  leading spaces and trailing ones   ",
  "DON'T stop; they'RE here, we'll see. It's I'M.",
  "def f(x):\n    return x**2  # square\n\n\tprint(f(12345678))",
  "Prices: $1,299.99 or 3.14e-10; 2024-12-04T18:00Z; 007 0x1F",
  "Café naïve résumé — Zürich, Ångström.",
  "Cafe\u0301 decomposed e\u0301 and composed \u00e9",
  "机器学习很有趣。日本語のテキスト、한국어도.",
  "Emoji 😀🚀 👍🏽 family 👨‍👩‍👧 flag 🇯🇵 heart ❤️",
  "tabs\t\tand\nnewlines\r\n\r\n  \n end",
  "<|im_start|>user\n<image>\nWhat is this?<|im_end|>\n<|im_start|>assistant\nA cat.<|im_end|>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
  "<s>[INST] Describe the image. [/INST] A red sofa.</s>",
  "a   b    c\n\n\n  d \n \n",
  "1234567 89 0.5 12,345,678",
  "'s 'S 'll 'LL x'd O'Neil's",
  "hello<|im_end|>world<|endoftext|>again<|eot_id|>",
  "non\u00a0breaking\u2003em space \u200bzero width",
  "a",
  " ",
  "",
  "x".repeat(40) + " " + "ab".repeat(25),
];

// One conversation rendered as each family's own chat template renders it (the text of its Jinja template, spelled
// out here), to be compared with data.chat_template's layout: system, two rounds.
const turns = [
  { from: "system", value: "You are terse." },
  { from: "human", value: "What's 2+2?" },
  { from: "gpt", value: "4." },
  { from: "human", value: "And 10 × 3?" },
  { from: "gpt", value: "30, of course!" },
];
const rendered = {
  llama3: (t) =>
    "<|begin_of_text|>" +
    t.map((x) => {
      const role = { system: "system", human: "user", gpt: "assistant" }[x.from];
      return `<|start_header_id|>${role}<|end_header_id|>\n\n${x.value.trim()}<|eot_id|>`;
    }).join(""),
  chatml: (t) =>
    t.map((x) => {
      const role = { system: "system", human: "user", gpt: "assistant" }[x.from];
      return `<|im_start|>${role}\n${x.value}<|im_end|>\n`;
    }).join(""),
  llama2: (t) => {
    let system = "";
    let text = "";
    for (const x of t) {
      if (x.from === "system") system = x.value;
      if (x.from === "human") {
        const content = system ? `<<SYS>>\n${system}\n<</SYS>>\n\n${x.value}` : x.value;
        system = "";
        text += `<s>[INST] ${content.trim()} [/INST]`;
      }
      if (x.from === "gpt") text += ` ${x.value.trim()} </s>`;
    }
    return text;
  },
};
const chats = [
  ["llama3", "llama3"],
  ["qwen2", "chatml"],
  ["llama2", "llama2"],
];

fs.mkdirSync(out, { recursive: true });
const cases = { encode: {}, chats: [] };
for (const [name, { json, config }] of Object.entries(tokenizers)) {
  fs.mkdirSync(path.join(out, name), { recursive: true });
  fs.writeFileSync(path.join(out, name, "tokenizer.json"), JSON.stringify(json) + "\n");
  const fullConfig = { ...config, clean_up_tokenization_spaces: false };
  fs.writeFileSync(path.join(out, name, "tokenizer_config.json"), JSON.stringify(fullConfig, null, 1) + "\n");
  const tok = new Tokenizer(json, fullConfig);
  cases.encode[name] = texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    return { text, ids, decoded: ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "" };
  });
}
for (const [name, template] of chats) {
  const { json, config } = tokenizers[name];
  const tok = new Tokenizer(json, { ...config, clean_up_tokenization_spaces: false });
  const text = rendered[template](turns);
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  cases.chats.push({ tokenizer: name, template, turns, text, ids });
}
// For `cornstarch-data --tokenize-file`: the one-line texts, and per tokenizer their ids, a line each.
const lines = texts.filter((t) => !/[\r\n]/.test(t));
fs.writeFileSync(path.join(out, "lines.txt"), lines.join("\n") + "\n");
for (const [name, { json, config }] of Object.entries(tokenizers)) {
  const tok = new Tokenizer(json, { ...config, clean_up_tokenization_spaces: false });
  const ids = lines.map((t) => tok.encode(t, { add_special_tokens: false }).ids.join(" "));
  fs.writeFileSync(path.join(out, name, "lines.ids"), ids.join("\n") + "\n");
}
fs.writeFileSync(path.join(out, "cases.json"), JSON.stringify(cases, null, 1) + "\n");
console.log(`wrote ${Object.keys(tokenizers).length} tokenizers and ${texts.length} texts each to ${out}`);
