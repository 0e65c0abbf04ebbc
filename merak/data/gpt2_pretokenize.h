// GPT-2's pre-tokenisation, without a regex engine: the pieces that the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, as the JavaScript reference (flag u) finds them. Private to merak/data.
#pragma once

#include <cstddef>
#include <string_view>

namespace merak::data {

// End of the piece that starts at byte `begin` (< text.size()) of `text`. Pieces tile the text:
// every byte is in exactly one. Bytes that are not valid UTF-8 count as one character each, of
// the class [^\s\p{L}\p{N}] (as a lone surrogate is in JavaScript), so any bytes split.
size_t gpt2_piece_end(std::string_view text, size_t begin);

}  // namespace merak::data
