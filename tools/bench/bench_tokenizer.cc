// GPT-2 tokenizer speed, one thread: a text file encoded line by line (each line with its
// newline, as a data pipeline feeds documents), first with an empty word cache (cold), then
// again with the cache filled (warm, best of two). tools/bench/bench_tokenizer.sh runs the
// reference encoder on the same file and prints the ratio.
//   bench_tokenizer ENCODER_JSON VOCAB_BPE TEXT_FILE [IDS_OUT]
// IDS_OUT gets the ids, one per line, to compare with the reference's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "merak/data/gpt2_tokenizer.h"

using merak::data::Gpt2Tokenizer;

namespace {

// Seconds to encode every line of `text`; the ids into `ids`.
double encode_lines(Gpt2Tokenizer& t, std::string_view text, std::vector<int64_t>* ids) {
  ids->clear();
  const auto start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::vector<int64_t> line = t.encode(text.substr(at, end - at), false);
    ids->insert(ids->end(), line.begin(), line.end());
    at = end;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ENCODER_JSON VOCAB_BPE TEXT_FILE [IDS_OUT]\n", argv[0]);
    return 2;
  }
  try {
    Gpt2Tokenizer t = Gpt2Tokenizer::load(argv[1], argv[2]);
    std::ifstream in(argv[3], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read\n", argv[3]);
      return 1;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const double mb = double(text.size()) / 1e6;

    std::vector<int64_t> ids;
    const double cold = encode_lines(t, text, &ids);
    double warm = encode_lines(t, text, &ids);
    warm = std::min(warm, encode_lines(t, text, &ids));
    std::printf("ours:      cold %7.2f MB/s, warm %7.2f MB/s (%zu ids from %.2f MB)\n", mb / cold,
                mb / warm, ids.size(), mb);

    if (argc > 4) {
      std::ofstream out(argv[4]);
      for (int64_t id : ids) out << id << '\n';
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
