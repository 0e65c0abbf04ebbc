// The byte-level tokenizer: vocab 256, id = byte value, so any text round-trips exactly.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "merak/data/dataset.h"
#include "merak/data/tokenize_text.h"

namespace merak::data {

std::vector<int64_t> tokenize_bytes(const std::string& text) {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string detokenize_bytes(const std::vector<int64_t>& ids) {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    MERAK_CHECK(ids[i] >= 0 && ids[i] < 256, "detokenize_bytes: id ", ids[i], " at position ",
                i, " is not a byte");
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::unique_ptr<TokenDataset> tokenize_text_files(const std::vector<std::string>& paths) {
  MERAK_CHECK(!paths.empty(), "tokenize_text_files: no files given");
  // One part a file, so that a token's place names its file (token i of a file is its byte i).
  std::vector<std::unique_ptr<TokenDataset>> parts;
  for (const auto& path : paths) {
    input_file_bytes(path);  // a directory, a device or a pipe is refused before it is opened
    std::ifstream in(path, std::ios::binary);
    MERAK_CHECK(in, path, ": cannot read: ", std::strerror(errno));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    MERAK_CHECK(!in.bad(), path, ": read failed");
    parts.push_back(in_memory(tokenize_bytes(text), 256, path + " read as bytes"));
  }
  return concat(std::move(parts));
}

}  // namespace merak::data
