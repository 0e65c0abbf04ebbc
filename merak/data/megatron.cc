// Megatron-LM's indexed datasets: the memory-mapped reader with its index checks, blends of
// several prefixes, and the streaming writer. Layout and error format: merak/data/README.md.
#include "merak/data/megatron.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "merak/core/error.h"
#include "merak/data/little_endian.h"
#include "merak/data/mapped_file.h"

namespace merak::data {
namespace {

constexpr unsigned char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kIdxVersion = 1;
// Offsets of the index's fixed fields.
constexpr uint64_t kVersionAt = 9, kDtypeAt = 17, kSeqCountAt = 18, kDocCountAt = 26,
                   kArraysAt = 34;
constexpr uint8_t kUint16Code = 8, kInt32Code = 4;

// Bytes per token of a dtype code, 0 for codes that are not integer token types.
int code_width(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;   // uint8, int8
    case 3: case 8: return 2;   // int16, uint16
    case 4: return 4;           // int32
    case 5: return 8;           // int64
    default: return 0;
  }
}
bool code_signed(uint8_t code) { return code == 2 || code == 3 || code == 4 || code == 5; }

int64_t token_at(const unsigned char* p, int width, bool is_signed) {
  const uint64_t raw = load_le(p, width);
  if (!is_signed || width == 8) return int64_t(raw);
  const uint64_t sign = uint64_t(1) << (8 * width - 1);
  return int64_t((raw ^ sign) - sign);
}

}  // namespace

struct MegatronDataset::Impl {
  std::string prefix, idx_path, bin_path;
  std::unique_ptr<MappedFile> idx, bin;
  uint8_t code = 0;
  int width = 0;
  bool is_signed = false;
  uint64_t sequences = 0, doc_entries = 0;
  const unsigned char* sizes = nullptr;     // int32[S]
  const unsigned char* pointers = nullptr;  // int64[S]
  const unsigned char* doc_idx = nullptr;   // int64[D]
  int64_t tokens = 0;

  int64_t seq_size(uint64_t i) const { return int32_t(load_le(sizes + 4 * i, 4)); }
  int64_t seq_pointer(uint64_t i) const { return int64_t(load_le(pointers + 8 * i, 8)); }
  int64_t doc_entry(uint64_t d) const { return int64_t(load_le(doc_idx + 8 * d, 8)); }
  // Token offset of sequence i (i == S: the end).
  int64_t seq_begin(uint64_t i) const { return i < sequences ? seq_pointer(i) / width : tokens; }
};

MegatronDataset::MegatronDataset(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MegatronDataset::~MegatronDataset() = default;

std::unique_ptr<MegatronDataset> MegatronDataset::open(const std::string& prefix) {
  auto m = std::make_unique<Impl>();
  m->prefix = prefix;
  m->idx_path = prefix + ".idx";
  m->bin_path = prefix + ".bin";
  // A file's name given for the prefix (Megatron's --data-path takes prefixes too).
  const size_t n_prefix = prefix.size();
  const bool file_named = n_prefix > 4 && (prefix.compare(n_prefix - 4, 4, ".bin") == 0 ||
                                           prefix.compare(n_prefix - 4, 4, ".idx") == 0);
  struct stat st;
  if (file_named && ::stat(m->idx_path.c_str(), &st) != 0) {
    const std::string stem = prefix.substr(0, n_prefix - 4);
    MERAK_FAIL(prefix, ": a Megatron dataset is named by its prefix, '", stem, "' for ", stem,
               ".bin and ", stem, ".idx, not by one of its files");
  }
  m->idx = std::make_unique<MappedFile>(m->idx_path);
  const std::string& ip = m->idx_path;
  const unsigned char* b = m->idx->bytes();
  const uint64_t n = uint64_t(m->idx->size());

  // A field of `bytes` bytes at `at` must lie inside the file.
  auto need = [&](uint64_t at, uint64_t bytes, const char* what) {
    MERAK_CHECK(at <= n && bytes <= n - at, ip, ": byte ", std::min(at, n), ": truncated: ",
                what, " needs bytes [", at, ", ", at + bytes, "), the file ends at byte ", n);
  };
  need(0, 9, "the magic");
  MERAK_CHECK(std::memcmp(b, kIdxMagic, 9) == 0, ip,
              ": byte 0: not a Megatron index: bad magic (expected \"MMIDIDX\\0\\0\")");
  need(kVersionAt, 8, "the version");
  const uint64_t version = load_le(b + kVersionAt, 8);
  MERAK_CHECK(version == kIdxVersion, ip, ": byte ", kVersionAt, ": index version ", version,
              ", this build reads version ", kIdxVersion);
  need(kDtypeAt, 1, "the dtype code");
  m->code = b[kDtypeAt];
  m->width = code_width(m->code);
  MERAK_CHECK(m->code != 6 && m->code != 7, ip, ": byte ", kDtypeAt, ": dtype code ",
              int(m->code), " is a float type, not token ids");
  MERAK_CHECK(m->width > 0, ip, ": byte ", kDtypeAt, ": unknown dtype code ", int(m->code),
              " (expected 1..8)");
  m->is_signed = code_signed(m->code);
  need(kSeqCountAt, 8, "the sequence count");
  m->sequences = load_le(b + kSeqCountAt, 8);
  need(kDocCountAt, 8, "the document count");
  m->doc_entries = load_le(b + kDocCountAt, 8);
  const uint64_t S = m->sequences, D = m->doc_entries;

  // The arrays: int32 sizes[S], int64 pointers[S], int64 doc_idx[D]. Counts too large for the
  // file are reported as truncation at the array's start (no overflow: checked one by one).
  const uint64_t room = n - kArraysAt;
  MERAK_CHECK(S <= room / 4, ip, ": byte ", kArraysAt, ": truncated: ", S,
              " sequence sizes (int32) do not fit in the file's ", n, " bytes");
  const uint64_t pointers_at = kArraysAt + 4 * S;
  MERAK_CHECK(S <= (n - pointers_at) / 8, ip, ": byte ", pointers_at, ": truncated: ", S,
              " sequence pointers (int64) do not fit in the file's ", n, " bytes");
  const uint64_t docs_at = pointers_at + 8 * S;
  MERAK_CHECK(D <= (n - docs_at) / 8, ip, ": byte ", docs_at, ": truncated: ", D,
              " document index entries (int64) do not fit in the file's ", n, " bytes");
  const uint64_t end = docs_at + 8 * D;
  // Multimodal indexes carry one int8 mode per sequence after the document index; we accept
  // and ignore them. Anything else after the document index is an error.
  MERAK_CHECK(n == end || n == end + S, ip, ": byte ", end, ": ", n - end,
              " unexpected bytes after the document index (expected none, or ", S,
              " sequence modes)");
  m->sizes = b + kArraysAt;
  m->pointers = b + pointers_at;
  m->doc_idx = b + docs_at;

  // Sequences lie back to back from byte 0 of the .bin: pointer[i] = sum of the sizes before
  // it times the token width.
  uint64_t expected = 0;
  const uint64_t w = uint64_t(m->width);
  for (uint64_t i = 0; i < S; ++i) {
    const int64_t size = m->seq_size(i);
    MERAK_CHECK(size >= 0, ip, ": byte ", kArraysAt + 4 * i, ": sequence ", i,
                " has a negative size ", size);
    const uint64_t ptr = load_le(m->pointers + 8 * i, 8);
    MERAK_CHECK(ptr == expected, ip, ": byte ", pointers_at + 8 * i, ": pointer of sequence ",
                i, " is ", int64_t(ptr), ", expected ", expected,
                " (the sequences before it hold that many bytes)");
    expected += uint64_t(size) * w;
  }
  MERAK_CHECK(D >= 1, ip, ": byte ", kDocCountAt,
              ": the document index is empty (it needs at least the leading 0)");
  int64_t prev = 0;
  for (uint64_t d = 0; d < D; ++d) {
    const int64_t e = m->doc_entry(d);
    const uint64_t at = docs_at + 8 * d;
    if (d == 0) {
      MERAK_CHECK(e == 0, ip, ": byte ", at, ": document index starts at ", e,
                  ", expected 0");
    } else {
      MERAK_CHECK(e >= prev, ip, ": byte ", at, ": document index entry ", d, " (", e,
                  ") is less than the one before (", prev, ")");
    }
    MERAK_CHECK(e >= 0 && uint64_t(e) <= S, ip, ": byte ", at, ": document index entry ", d,
                " (", e, ") is outside [0, ", S, "]");
    prev = e;
  }
  MERAK_CHECK(uint64_t(prev) == S, ip, ": byte ", docs_at + 8 * (D - 1),
              ": the document index ends at sequence ", prev, ", expected the sequence count ",
              S);

  m->bin = std::make_unique<MappedFile>(m->bin_path);
  const uint64_t bin_bytes = uint64_t(m->bin->size());
  MERAK_CHECK(bin_bytes >= expected, m->bin_path, ": byte ", bin_bytes, ": truncated: ",
              m->idx_path, " places its sequences in bytes [0, ", expected,
              "), the file ends at byte ", bin_bytes);
  MERAK_CHECK(bin_bytes == expected, m->bin_path, ": byte ", expected, ": ",
              bin_bytes - expected, " bytes after the last sequence that ", m->idx_path,
              " does not account for");
  m->tokens = int64_t(expected / w);
  return std::unique_ptr<MegatronDataset>(new MegatronDataset(std::move(m)));
}

int64_t MegatronDataset::size() const { return impl_->tokens; }

void MegatronDataset::read(int64_t start, int64_t count, int64_t* out) const {
  const Impl& m = *impl_;
  MERAK_CHECK(start >= 0 && count >= 0 && start <= m.tokens - count, m.prefix,
              ": read of tokens [", start, ", ", start + count, ") outside the dataset's ",
              m.tokens, " tokens");
  const unsigned char* p = m.bin->bytes() + start * m.width;
  for (int64_t i = 0; i < count; ++i) out[i] = token_at(p + i * m.width, m.width, m.is_signed);
}

std::string MegatronDataset::place(int64_t i) const {
  return impl_->bin_path + ": byte " + std::to_string(i * impl_->width);
}

int64_t MegatronDataset::sequence_count() const { return int64_t(impl_->sequences); }
int64_t MegatronDataset::document_count() const { return int64_t(impl_->doc_entries) - 1; }

std::vector<int64_t> MegatronDataset::sequence(int64_t i) const {
  const Impl& m = *impl_;
  MERAK_CHECK(i >= 0 && uint64_t(i) < m.sequences, m.prefix, ": sequence ", i,
              " outside [0, ", m.sequences, ")");
  std::vector<int64_t> ids(size_t(m.seq_size(uint64_t(i))));
  read(m.seq_begin(uint64_t(i)), int64_t(ids.size()), ids.data());
  return ids;
}

int64_t MegatronDataset::document_begin(int64_t d) const {
  const Impl& m = *impl_;
  MERAK_CHECK(d >= 0 && d <= document_count(), m.prefix, ": document ", d, " outside [0, ",
              document_count(), "]");
  return m.seq_begin(uint64_t(m.doc_entry(uint64_t(d))));
}

int MegatronDataset::dtype_code() const { return impl_->code; }
const std::string& MegatronDataset::prefix() const { return impl_->prefix; }

std::unique_ptr<MegatronDataset> open_megatron(const std::string& prefix) {
  return MegatronDataset::open(prefix);
}

std::unique_ptr<TokenDataset> open_megatron(const std::vector<std::string>& prefixes,
                                            const std::vector<double>& weights) {
  MERAK_CHECK(!prefixes.empty(), "open_megatron: no prefixes given");
  MERAK_CHECK(weights.empty() || weights.size() == prefixes.size(), "open_megatron: ",
              weights.size(), " weights for ", prefixes.size(), " prefixes");
  std::vector<std::unique_ptr<TokenDataset>> sources;
  for (const std::string& p : prefixes) sources.push_back(MegatronDataset::open(p));
  if (weights.empty()) return concat(std::move(sources));
  return blend(std::move(sources), weights, prefixes);
}

// ---- writer ----

MegatronWriter::MegatronWriter(std::string prefix, int64_t vocab_size)
    : prefix_(std::move(prefix)), width_(vocab_size < 65500 ? 2 : 4), vocab_(vocab_size) {
  MERAK_CHECK(vocab_size > 0 && vocab_size <= int64_t(INT32_MAX) + 1, prefix_,
              ": vocabulary size ", vocab_size, " (must be in [1, 2^31])");
  const std::string tmp = prefix_ + ".bin.tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  MERAK_CHECK(bin_ != nullptr, tmp, ": cannot create: ", std::strerror(errno));
}

MegatronWriter::~MegatronWriter() {
  if (!closed_) {
    if (bin_) std::fclose(bin_);
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
}

void MegatronWriter::add_tokens(const int64_t* ids, int64_t count) {
  MERAK_CHECK(!closed_, prefix_, ": add_tokens after close");
  MERAK_CHECK(current_ + count <= int64_t(INT32_MAX), prefix_, ": document ", sizes_.size(),
              " has more than 2^31 - 1 tokens (Megatron's sizes are int32)");
  const size_t at = buffer_.size();
  buffer_.resize(at + size_t(count) * size_t(width_));
  unsigned char* out = buffer_.data() + at;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t id = uint64_t(ids[i]);
    if (id >= uint64_t(vocab_)) {  // negative ids too
      buffer_.resize(at);
      MERAK_FAIL(prefix_, ": token id ", ids[i], " in document ", sizes_.size(),
                 " is outside the vocabulary [0, ", vocab_, ")");
    }
    store_le(out, id, width_);
    out += width_;
  }
  current_ += count;
  tokens_ += count;
  if (buffer_.size() >= (size_t(1) << 20)) flush();
}

void MegatronWriter::end_document() {
  MERAK_CHECK(!closed_, prefix_, ": end_document after close");
  sizes_.push_back(int32_t(current_));
  current_ = 0;
}

void MegatronWriter::flush() {
  if (buffer_.empty()) return;
  const size_t put = std::fwrite(buffer_.data(), 1, buffer_.size(), bin_);
  MERAK_CHECK(put == buffer_.size(), prefix_, ".bin.tmp: write failed: ", std::strerror(errno));
  buffer_.clear();
}

namespace {

// Flushes, fsyncs and closes `f`; an error names `path`.
void sync_close(std::FILE* f, const std::string& path) {
  int err = 0;
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0) MERAK_FAIL(path, ": write failed: ", std::strerror(err));
}

void rename_into_place(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    MERAK_FAIL(path, ": cannot rename ", tmp, " into place: ", std::strerror(errno));
}

}  // namespace

void MegatronWriter::close() {
  MERAK_CHECK(!closed_, prefix_, ": closed twice");
  if (current_ > 0) end_document();
  flush();
  const std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  std::FILE* bin = bin_;
  bin_ = nullptr;
  sync_close(bin, bin_tmp);

  const uint64_t S = sizes_.size(), D = S + 1;
  std::vector<unsigned char> idx(size_t(kArraysAt + 12 * S + 8 * D), 0);
  std::memcpy(idx.data(), kIdxMagic, 9);
  store_le(idx.data() + kVersionAt, kIdxVersion, 8);
  idx[kDtypeAt] = width_ == 2 ? kUint16Code : kInt32Code;
  store_le(idx.data() + kSeqCountAt, S, 8);
  store_le(idx.data() + kDocCountAt, D, 8);
  unsigned char* p = idx.data() + kArraysAt;
  for (uint64_t i = 0; i < S; ++i) store_le(p + 4 * i, uint64_t(uint32_t(sizes_[i])), 4);
  p += 4 * S;
  uint64_t ptr = 0;
  for (uint64_t i = 0; i < S; ++i) {
    store_le(p + 8 * i, ptr, 8);
    ptr += uint64_t(sizes_[i]) * uint64_t(width_);
  }
  p += 8 * S;
  // One sequence per document: document d starts at sequence d; the last entry is S.
  for (uint64_t d = 0; d < D; ++d) store_le(p + 8 * d, d, 8);

  std::FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  MERAK_CHECK(f != nullptr, idx_tmp, ": cannot create: ", std::strerror(errno));
  if (std::fwrite(idx.data(), 1, idx.size(), f) != idx.size()) {
    const int err = errno;
    std::fclose(f);
    MERAK_FAIL(idx_tmp, ": write failed: ", std::strerror(err));
  }
  sync_close(f, idx_tmp);
  // The .bin first: a reader that finds the new .idx finds the .bin it describes.
  rename_into_place(bin_tmp, prefix_ + ".bin");
  rename_into_place(idx_tmp, prefix_ + ".idx");
  closed_ = true;
}

}  // namespace merak::data
