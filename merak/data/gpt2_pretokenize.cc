// GPT-2's pre-tokenisation pattern as a hand-written scanner: the alternatives are tried in the
// pattern's order at each start, which is what the regex does, at a fraction of its cost.
// Letter and number classes come from ICU (general categories L* and N*).
#include "merak/data/gpt2_pretokenize.h"

#include <unicode/uchar.h>

#include <cstdint>

namespace merak::data {
namespace {

enum class Class : uint8_t { Letter, Number, Space, Other };

struct Char {
  Class cls;
  size_t len;  // bytes
};

// JavaScript's \s: WhiteSpace (tab, VT, FF, space, NBSP, ZWNBSP, category Zs) and
// LineTerminator (LF, CR, U+2028, U+2029). Narrower than Python's: U+0085 and U+001C..U+001F
// are not spaces here, as in the reference.
bool is_js_space(uint32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

Class class_of(uint32_t c) {
  if (is_js_space(c)) return Class::Space;
  const uint32_t mask = U_GET_GC_MASK(UChar32(c));
  if (mask & U_GC_L_MASK) return Class::Letter;
  if (mask & U_GC_N_MASK) return Class::Number;
  return Class::Other;
}

// Classes of the ASCII characters, looked up without ICU (most text is ASCII).
struct AsciiClasses {
  Class of[128];
  AsciiClasses() {
    for (uint32_t c = 0; c < 128; ++c) of[c] = class_of(c);
  }
};
const AsciiClasses ascii;

bool continuation(std::string_view s, size_t i) {
  return i < s.size() && (uint8_t(s[i]) & 0xC0) == 0x80;
}

// The character at byte i: a well-formed UTF-8 sequence (no overlongs, surrogates or code
// points past U+10FFFF), or else the single byte i as an Other.
Char char_at(std::string_view s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  if (b < 0x80) return {ascii.of[b], 1};
  size_t len = 0;
  uint32_t c = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range allowed for the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2, c = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, c = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, c = b & 0x07;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {Class::Other, 1};
  }
  if (i + 1 >= s.size() || uint8_t(s[i + 1]) < lo || uint8_t(s[i + 1]) > hi)
    return {Class::Other, 1};
  for (size_t k = 1; k < len; ++k) {
    if (!continuation(s, i + k)) return {Class::Other, 1};
    c = (c << 6) | (uint8_t(s[i + k]) & 0x3F);
  }
  return {class_of(c), len};
}

// End of the run of characters of class `cls` that starts at i.
size_t run_end(std::string_view s, size_t i, Class cls) {
  while (i < s.size()) {
    const Char ch = char_at(s, i);
    if (ch.cls != cls) break;
    i += ch.len;
  }
  return i;
}

// 's 't 're 've 'm 'll 'd (ASCII apostrophe, lower case, as in the pattern): their length, or 0.
size_t contraction(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char b = s[i + 2];
  if ((a == 'r' || a == 'v') && b == 'e') return 3;
  if (a == 'l' && b == 'l') return 3;
  return 0;
}

}  // namespace

size_t gpt2_piece_end(std::string_view s, size_t i) {
  if (size_t n = contraction(s, i)) return i + n;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one leading space joins the run after it.
  if (s[i] == ' ' && i + 1 < s.size()) {
    const Char next = char_at(s, i + 1);
    if (next.cls != Class::Space) return run_end(s, i + 1, next.cls);
  }
  const Char first = char_at(s, i);
  if (first.cls != Class::Space) return run_end(s, i, first.cls);
  // `\s+(?!\S)`: a run of spaces that ends the text is one piece; one followed by a non-space
  // gives up its last character (for the next piece's ` ?`), unless that is all it has; then
  // `\s+` takes the single character.
  size_t last = i, end = i;
  while (end < s.size()) {
    const Char ch = char_at(s, end);
    if (ch.cls != Class::Space) break;
    last = end;
    end += ch.len;
  }
  if (end == s.size() || last == i) return end;
  return last;
}

}  // namespace merak::data
