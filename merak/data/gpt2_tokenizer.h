// GPT-2's byte-level BPE tokenizer (vocabulary 50257, `<|endoftext|>` = 50256), encode and
// decode, giving the same ids as the reference encoder of the npm package gpt-3-encoder 1.1.4
// on valid UTF-8 text, and lossless on any bytes: decode(encode(x)) == x. The letter and number
// classes of the pre-tokenisation come from the installed ICU (72, Unicode 15.0, on Debian 12):
// a character assigned in a later Unicode version is neither, so text holding one can split
// otherwise than the reference does under a newer ICU (merak/data/README.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace merak::data {

class Gpt2Tokenizer {
 public:
  // The vocabulary (encoder.json: token -> id) and the ranked merges (vocab.bpe), both in
  // GPT-2's byte-to-unicode spelling. Errors (missing file, malformed JSON or merge line, a
  // merge of unknown tokens) throw merak::Error naming the file and the offset, key or line.
  static Gpt2Tokenizer load(const std::string& vocab_path, const std::string& merges_path);

  // Ids of `text`, any bytes. With `allow_special`, each `<|endoftext|>` in the text becomes
  // eot_id() and the text between is encoded on its own; without, it is encoded as plain text.
  // Not thread-safe: it fills a cache of words -> ids (one tokenizer per thread).
  std::vector<int64_t> encode(std::string_view text, bool allow_special = true);
  // The bytes of `ids`; an id outside [0, vocab_size()) throws.
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const { return int64_t(token_bytes_.size()); }
  int64_t eot_id() const { return eot_id_; }

 private:
  struct Merge {
    int32_t rank;    // lower merges first
    int32_t result;  // id of the merged token
  };
  // One pair of adjacent symbols waiting in the merge loop's heap.
  struct Candidate {
    int32_t rank, left, right, left_token, right_token;
  };

  Gpt2Tokenizer() = default;
  // Appends the ids of one pre-token (a regex match) to `out`.
  void encode_piece(std::string_view piece, std::vector<int64_t>* out);
  // The BPE merges of one pre-token, into symbols_.
  void merge(std::string_view piece);
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::vector<std::string> token_bytes_;  // id -> the token's bytes
  std::array<int32_t, 256> byte_token_{};  // byte -> id of its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  int64_t eot_id_ = -1;

  // Words seen before: bytes -> [offset, offset + count) in cache_ids_.
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> cache_;
  std::vector<int32_t> cache_ids_;
  // Scratch of the merge loop, kept to avoid allocating per word.
  std::vector<int32_t> symbols_, next_, prev_;
  std::vector<Candidate> heap_, round_, held_;
};

}  // namespace merak::data
