#!/usr/bin/env bash
# cornstarch-data as a user runs it: --tokenize-file gives, line for line, the ids Hugging Face's JavaScript
# tokenizers gave (tests/data/make_tokenizer_fixtures.mjs wrote both files); --sample and --sequence print one line
# per token of a generated LLaVA dataset (every placeholder named, every label shown); bad requests exit 1 saying why.
#   data_tool_test.sh CORNSTARCH_DATA MAKE_DEMO_DATA TINY_LLAVA_CONFIG FIXTURE_DIR
set -euo pipefail
tool=$1
make_data=$2
llava_config=$3
fixtures=$4
dir="${TEST_TMPDIR:-/tmp}/data-tool"
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }

for name in llama3 qwen2 gpt2 llama2 metaspace_first; do
  "$tool" --set data.tokenizer="$fixtures/$name/tokenizer.json" --tokenize-file "$fixtures/lines.txt" > "$dir/$name.ids"
  diff "$fixtures/$name/lines.ids" "$dir/$name.ids" || fail "$name: the ids differ from the reference's"
done
first=$("$tool" --set data.tokenizer="$fixtures/llama3/tokenizer.json" --tokenize "$(head -1 "$fixtures/lines.txt")")
[ "$first" = "$(head -1 "$fixtures/llama3/lines.ids")" ] || fail "--tokenize gave '$first'"

"$make_data" "$dir/demo" --samples 12 > /dev/null
llava=(--config "$llava_config" --set data.path="$dir/demo/train.jsonl" --set data.tokenizer="$dir/demo/tokenizer.model")
"$tool" "${llava[@]}" --sample 3 > "$dir/sample.txt"
"$tool" "${llava[@]}" --sequence 1 > "$dir/sequence.txt"
# Rows: the title line and the header, then one per token; a sequence has data.seq_len (128) of them.
[ "$(($(wc -l < "$dir/sequence.txt") - 2))" -eq 128 ] || fail "sequence 1 has $(wc -l < "$dir/sequence.txt") lines"
# The vision tower takes 16 placeholder tokens an image (32 px, patch 8), the audio tower 16 an audio clip.
images=$(grep -c ' vision ' "$dir/sample.txt" || true)
[ "$images" -gt 0 ] && [ $((images % 16)) -eq 0 ] || fail "sample 3 has $images vision placeholder rows"
grep -q '^ *[0-9]* *[0-9]* *"[^"]*" *- ' "$dir/sample.txt" || fail "no ignored label in sample 3"
grep -qE '^ *[0-9]+ +[0-9]+ +"[^"]*" +[0-9]+ ' "$dir/sample.txt" || fail "no learned label in sample 3"
grep -q 'text g1' "$dir/sample.txt" || fail "no text mask group in sample 3"

expect_error() {  # expect_error MESSAGE ARGS...: exit 1 with MESSAGE on stderr
  local message=$1
  shift
  if "$tool" "$@" > "$dir/out.txt" 2> "$dir/err.txt"; then fail "'$*' succeeded"; fi
  grep -qF -- "$message" "$dir/err.txt" || { cat "$dir/err.txt"; fail "'$*': expected '$message'"; }
}
expect_error "--tokenize: data.tokenizer is not set" --tokenize hi
expect_error "--sample: needs data.type: llava" --sample 0
expect_error "is past the 12 samples" "${llava[@]}" --sample 12
expect_error "data.tokenizer: $dir/absent.json: cannot open the tokenizer file" \
  --set data.tokenizer="$dir/absent.json" --tokenize hi
expect_error "nothing to show" --set data.seq_len=64
echo "PASS: ids equal the reference's on 5 tokenizers; sample and sequence tables; errors"
