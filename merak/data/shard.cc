// Token shards on disk: our format and llm.c's, memory-mapped read-only; atomic shard writes,
// and llm.c's .bin streamed.
// The byte layouts are documented in merak/data/README.md.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "merak/data/dataset.h"
#include "merak/data/little_endian.h"
#include "merak/data/mapped_file.h"

namespace merak::data {
namespace {

constexpr char kMagic[8] = {'M', 'E', 'R', 'A', 'K', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 64;
constexpr uint32_t kLlmcMagic = 20240520;
constexpr uint32_t kLlmcVersion = 1;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

class ShardDataset : public TokenDataset {
 public:
  ShardDataset(std::string path, std::unique_ptr<MappedFile> map, int64_t header, int width,
               int64_t count)
      : path_(std::move(path)), map_(std::move(map)), tokens_(map_->bytes() + header),
        width_(width), count_(count) {}

  int64_t size() const override { return count_; }

  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= count_ - count, path_, ": read of tokens [",
                start, ", ", start + count, ") outside the shard's ", count_, " tokens");
    const unsigned char* p = tokens_ + start * width_;
    for (int64_t i = 0; i < count; ++i) out[i] = int64_t(load_le(p + i * width_, width_));
  }

  std::string place(int64_t i) const override {
    return path_ + ": byte " + std::to_string(int64_t(tokens_ - map_->bytes()) + i * width_);
  }

 private:
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  const unsigned char* tokens_;
  int width_;
  int64_t count_;
};

// The file must hold exactly the header and `count` tokens of `width` bytes.
void check_size(const std::string& path, int64_t file_bytes, int64_t header, int width,
                uint64_t count) {
  const uint64_t body = uint64_t(file_bytes - header);
  const uint64_t held = body / uint64_t(width);
  MERAK_CHECK(count <= held, path, ": truncated: header says ", count, " tokens, file holds ",
              held);
  MERAK_CHECK(body == count * uint64_t(width), path, ": header says ", count,
              " tokens, but the file holds ", body - count * uint64_t(width),
              " bytes more than that");
}

std::string hex_prefix(const unsigned char* p, int64_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s.empty() ? "none, the file is empty" : s;
}

}  // namespace

std::unique_ptr<TokenDataset> open_shard(const std::string& path) {
  auto map = std::make_unique<MappedFile>(path);
  const unsigned char* b = map->bytes();
  const int64_t n = map->size();
  int64_t header = 0, count = 0;
  int width = 0;
  if (n >= 8 && std::memcmp(b, kMagic, 8) == 0) {
    MERAK_CHECK(n >= kHeaderBytes, path, ": truncated: ", n, " bytes, less than the ",
                kHeaderBytes, "-byte header");
    const uint64_t version = load_le(b + 8, 4);
    MERAK_CHECK(version == kVersion, path, ": shard format version ", version,
                ", this build reads version ", kVersion);
    width = int(load_le(b + 12, 4));
    MERAK_CHECK(width == 2 || width == 4, path, ": bad bytes per token ", width,
                " (expected 2 or 4)");
    const uint64_t stated = load_le(b + 16, 8);
    check_size(path, n, kHeaderBytes, width, stated);
    header = kHeaderBytes;
    count = int64_t(stated);
  } else if (n >= 4 && load_le(b, 4) == kLlmcMagic) {
    MERAK_CHECK(n >= kLlmcHeaderBytes, path, ": truncated: ", n, " bytes, less than llm.c's ",
                kLlmcHeaderBytes, "-byte header");
    const uint64_t version = load_le(b + 4, 4);
    MERAK_CHECK(version == kLlmcVersion, path, ": llm.c shard version ", version,
                ", expected ", kLlmcVersion, " (uint16 tokens)");
    const int32_t stated = int32_t(load_le(b + 8, 4));
    MERAK_CHECK(stated >= 0, path, ": llm.c header gives a negative token count ", stated);
    width = 2;
    check_size(path, n, kLlmcHeaderBytes, width, uint64_t(stated));
    header = kLlmcHeaderBytes;
    count = stated;
  } else {
    MERAK_FAIL(path, ": not a token shard: unknown magic (first bytes ", hex_prefix(b, n),
               "; expected \"MERAKTOK\" or llm.c's int32 20240520)");
  }
  return std::make_unique<ShardDataset>(path, std::move(map), header, width, count);
}

void write_shard(const std::string& path, const std::vector<int64_t>& tokens) {
  int width = 2;
  for (size_t i = 0; i < tokens.size(); ++i) {
    MERAK_CHECK(tokens[i] >= 0 && tokens[i] <= int64_t(UINT32_MAX), path,
                ": cannot write token id ", tokens[i], " at position ", i,
                " (ids must fit in uint32)");
    if (tokens[i] > int64_t(UINT16_MAX)) width = 4;
  }
  std::vector<unsigned char> bytes(size_t(kHeaderBytes) + tokens.size() * width, 0);
  std::memcpy(bytes.data(), kMagic, 8);
  store_le(bytes.data() + 8, kVersion, 4);
  store_le(bytes.data() + 12, uint64_t(width), 4);
  store_le(bytes.data() + 16, tokens.size(), 8);
  for (size_t i = 0; i < tokens.size(); ++i)
    store_le(bytes.data() + kHeaderBytes + i * width, uint64_t(tokens[i]), width);

  // Write beside the target, then rename: readers see the old file or the whole new one.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MERAK_CHECK(fd >= 0, tmp, ": cannot create: ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      MERAK_FAIL(tmp, ": write failed: ", std::strerror(err));
    }
    done += size_t(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_err = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    MERAK_FAIL(tmp, ": fsync failed: ", std::strerror(sync_err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MERAK_FAIL(path, ": cannot rename ", tmp, " into place: ", std::strerror(err));
  }
}

LlmcWriter::LlmcWriter(std::string path, int64_t vocab_size)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  MERAK_CHECK(vocab_size <= 65536, path_,
              ": llm.c's format holds uint16 tokens; the vocabulary has ", vocab_size);
  file_ = std::fopen(tmp_.c_str(), "wb");
  MERAK_CHECK(file_, tmp_, ": cannot create: ", std::strerror(errno));
  const std::vector<unsigned char> header(size_t(kLlmcHeaderBytes), 0);  // counted at close()
  put(header.data(), header.size());
}

LlmcWriter::~LlmcWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void LlmcWriter::put(const unsigned char* bytes, size_t n) {
  MERAK_CHECK(file_, path_, ": write after close");
  MERAK_CHECK(std::fwrite(bytes, 1, n, file_) == n, tmp_, ": write failed: ",
              std::strerror(errno));
}

void LlmcWriter::add(const std::vector<int64_t>& ids) {
  std::vector<unsigned char> bytes(ids.size() * 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    MERAK_CHECK(ids[i] >= 0 && ids[i] <= int64_t(UINT16_MAX), path_, ": cannot write token id ",
                ids[i], " (llm.c's tokens are uint16)");
    store_le(bytes.data() + 2 * i, uint64_t(ids[i]), 2);
  }
  put(bytes.data(), bytes.size());
  tokens_ += int64_t(ids.size());
  MERAK_CHECK(tokens_ <= INT32_MAX, path_,
              ": more than 2^31 - 1 tokens, the most llm.c's int32 header can count");
}

void LlmcWriter::close() {
  MERAK_CHECK(file_, path_, ": closed twice");
  unsigned char header[12];
  store_le(header, kLlmcMagic, 4);
  store_le(header + 4, kLlmcVersion, 4);
  store_le(header + 8, uint64_t(tokens_), 4);
  if (std::fflush(file_) != 0 || std::fseek(file_, 0, SEEK_SET) != 0 ||
      std::fwrite(header, 1, 12, file_) != 12 || std::fflush(file_) != 0 ||
      ::fsync(fileno(file_)) != 0)
    MERAK_FAIL(tmp_, ": write failed: ", std::strerror(errno));
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    const int err = errno;
    std::remove(tmp_.c_str());
    MERAK_FAIL(tmp_, ": write failed: ", std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_.c_str());
    MERAK_FAIL(path_, ": cannot rename ", tmp_, " into place: ", std::strerror(err));
  }
}

}  // namespace merak::data
