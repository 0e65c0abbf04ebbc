// libFuzzer target for token files. An input with no fuzz_files.h separator is one shard file
// for open_shard (our MERAKTOK format or llm.c's .bin: the magic decides); an input with one is
// a Megatron indexed dataset, PREFIX.idx then PREFIX.bin. Whatever the bytes, opening returns a
// dataset or throws merak::Error, and on a dataset that opened, size(), read() of windows at its
// start, middle and end and (Megatron) sequence() and document_begin() work.
// Anything else (a crash, a sanitizer report, another exception, a leak, a hang) is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/dataset.h"
#include "merak/data/megatron.h"
#include "tools/fuzz/fuzz_files.h"

namespace {

void read_windows(const merak::data::TokenDataset& data) {
  const int64_t n = data.size();
  const int64_t w = std::min<int64_t>(n, 33);
  std::vector<int64_t> out(size_t(w) + 1);
  if (w == 0) return;
  data.read(0, w, out.data());
  data.read((n - w) / 2, w, out.data());
  data.read(n - w, w, out.data());
  data.read(n - 1, 1, out.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace md = merak::data;
  const auto parts = merak::fuzz::split_input(data, size, 2);
  try {
    if (parts.size() == 1) {
      read_windows(*md::open_shard(merak::fuzz::write_temp("shard.bin", parts[0])));
      return 0;
    }
    merak::fuzz::write_temp("mega.idx", parts[0]);
    const std::string bin = merak::fuzz::write_temp("mega.bin", parts[1]);
    const auto mega = md::open_megatron(bin.substr(0, bin.size() - 4));
    read_windows(*mega);
    (void)mega->dtype_code();
    const int64_t sequences = mega->sequence_count(), documents = mega->document_count();
    for (const int64_t i : {int64_t(0), sequences / 2, sequences - 1})
      if (i >= 0 && i < sequences) (void)mega->sequence(i);
    for (const int64_t d : {int64_t(0), documents / 2, documents})
      if (d >= 0 && d <= documents) (void)mega->document_begin(d);
  } catch (const merak::Error&) {
  }
  return 0;
}
