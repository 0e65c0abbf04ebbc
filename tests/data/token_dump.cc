// For tokenize_test.sh: prints token ids on one line, space-separated, read back with the
// library's readers or encoded by Gpt2Tokenizer directly.
//   token_dump shard PATH                 open_shard (ours or llm.c's)
//   token_dump megatron PREFIX            open_megatron; then a line "documents N"
//   token_dump gpt2 VOCAB MERGES FILE...  Gpt2Tokenizer::encode of each file as plain text
//                                         (<|endoftext|> not special), a line each
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "merak/data/dataset.h"
#include "merak/data/gpt2_tokenizer.h"
#include "merak/data/megatron.h"

namespace {

void print(const std::vector<int64_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

std::vector<int64_t> all(const merak::data::TokenDataset& d) {
  std::vector<int64_t> ids(size_t(d.size()));
  d.read(0, d.size(), ids.data());
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  try {
    if (mode == "shard" && argc == 3) {
      print(all(*merak::data::open_shard(argv[2])));
    } else if (mode == "megatron" && argc == 3) {
      auto d = merak::data::open_megatron(std::string(argv[2]));
      print(all(*d));
      std::printf("documents %lld\n", static_cast<long long>(d->document_count()));
    } else if (mode == "gpt2" && argc >= 5) {
      auto tok = merak::data::Gpt2Tokenizer::load(argv[2], argv[3]);
      for (int i = 4; i < argc; ++i) {
        std::ifstream in(argv[i], std::ios::binary);
        if (!in) throw std::runtime_error(std::string(argv[i]) + ": cannot open");
        print(tok.encode(
            std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            false));
      }
    } else {
      std::fprintf(stderr, "usage: token_dump shard PATH | megatron PREFIX | gpt2 V M FILE...\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "token_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
