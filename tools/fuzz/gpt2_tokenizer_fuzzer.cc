// libFuzzer target for the GPT-2 tokenizer's files: the input is encoder.json, vocab.bpe and
// optionally some text, joined by fuzz_files.h's separator. Whatever the bytes, load returns a
// tokenizer or throws merak::Error; a tokenizer that loaded encodes a fixed text (plus the
// input's text, if any) into ids in [0, vocab_size()), and decoding them gives the text back
// (the tokenizer is lossless on any bytes). Anything else (a crash, a sanitizer report, another
// exception, a leak, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/gpt2_tokenizer.h"
#include "tools/fuzz/fuzz_files.h"

namespace {

// Letters, digits, punctuation, spaces and newlines, contractions, non-ASCII UTF-8, a byte that
// is not UTF-8, and the end-of-text token.
const std::string kText =
    "Hello, world! It's 2026; don't panic.\n\n  Tabs\tand  spaces 12345 "
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xff<|endoftext|>The end.";

void check_round_trip(merak::data::Gpt2Tokenizer& tokenizer, const std::string& text,
                      bool allow_special) {
  const std::vector<int64_t> ids = tokenizer.encode(text, allow_special);
  for (const int64_t id : ids)
    if (id < 0 || id >= tokenizer.vocab_size()) {
      std::fprintf(stderr, "encode gave id %lld outside [0, %lld)\n", (long long)id,
                   (long long)tokenizer.vocab_size());
      std::abort();
    }
  if (tokenizer.decode(ids) != text) {
    std::fprintf(stderr, "decode(encode(text)) != text\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = merak::fuzz::split_input(data, size, 3);
  const std::string vocab = merak::fuzz::write_temp("encoder.json", merak::fuzz::part(parts, 0));
  const std::string merges = merak::fuzz::write_temp("vocab.bpe", merak::fuzz::part(parts, 1));
  try {
    auto tokenizer = merak::data::Gpt2Tokenizer::load(vocab, merges);
    check_round_trip(tokenizer, kText, true);
    check_round_trip(tokenizer, kText, false);
    check_round_trip(tokenizer, std::string(merak::fuzz::part(parts, 2)), true);
  } catch (const merak::Error&) {
  }
  return 0;
}
