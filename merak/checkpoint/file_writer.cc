#include "merak/checkpoint/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "merak/checkpoint/checksum.h"
#include "merak/checkpoint/direct_io.h"
#include "merak/checkpoint/store.h"
#include "merak/core/error.h"

namespace merak::checkpoint {
namespace {

constexpr size_t kChunkBytes = 8 * kChecksumBlock;  // whole blocks: summed on their own
constexpr size_t kStreams = 4;  // enough requests in flight; the disk, not the CPU, is the limit

[[noreturn]] void fail_os(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " '" + path + "': " + std::strerror(errno));
}

// The new file: a plain descriptor, and a direct-I/O one when the file system takes it with an
// alignment the spans' offsets meet.
struct OutputFile {
  std::string path;
  int fd = -1, direct_fd = -1;
  size_t align = 0;  // of offsets and addresses, for direct I/O

  explicit OutputFile(const std::string& p) : path(p) {
    fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail_os("cannot create", p);
    align = direct_io_alignment(fd, /*unknown=*/512);
    if (align == 0 || align > size_t(kSpanAlignment)) return;  // spans could not meet it
    direct_fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  }
  ~OutputFile() {
    if (fd >= 0) ::close(fd);
    if (direct_fd >= 0) ::close(direct_fd);
  }

  void pwrite_all(int to, const char* src, size_t n, int64_t off) const {
    while (n > 0) {
      const ssize_t w = ::pwrite(to, src, n, off_t(off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail_os("cannot write", path);
      src += w;
      n -= size_t(w);
      off += w;
    }
  }

  // Writes `n` bytes at `off` (a multiple of kSpanAlignment). Direct I/O wants whole aligned
  // blocks from an aligned address: the aligned part goes straight from `src`; the rest, with
  // zeros up to the block's end, through an aligned buffer (the zeros fall into the gap before
  // the next span, which starts on an aligned offset, or past the end, which is cut at the end).
  void write(const char* src, size_t n, int64_t off) const {
    if (direct_fd < 0) {
      pwrite_all(fd, src, n, off);
      // Start the disk now, so the final fsync waits for the tail only.
      ::sync_file_range(fd, off, off_t(n), SYNC_FILE_RANGE_WRITE);
      return;
    }
    const size_t block = size_t(kSpanAlignment);
    const size_t straight =
        reinterpret_cast<uintptr_t>(src) % align == 0 ? n / block * block : 0;
    if (straight > 0) pwrite_all(direct_fd, src, straight, off);
    if (straight == n) return;
    const size_t rest = n - straight, padded = (rest + block - 1) / block * block;
    char* bounce = bounce_buffer(padded, block);
    std::memcpy(bounce, src + straight, rest);
    std::memset(bounce + rest, 0, padded - rest);
    pwrite_all(direct_fd, bounce, padded, off + int64_t(straight));
  }
};

struct Chunk {
  size_t span;
  size_t begin, end;  // bytes of the span
};

}  // namespace

std::vector<uint64_t> write_file(const std::string& path, int64_t size,
                                 const std::vector<FileSpan>& spans) {
  std::vector<Chunk> chunks;
  std::vector<std::vector<uint64_t>> block_sums(spans.size());
  for (size_t s = 0; s < spans.size(); ++s) {
    MERAK_CHECK(spans[s].offset % kSpanAlignment == 0 &&
                    spans[s].offset + int64_t(spans[s].bytes) <= size,
                "write_file '", path, "': span at ", spans[s].offset, " of ", spans[s].bytes,
                " bytes is off the ", kSpanAlignment, "-byte grid or past the end (", size, ")");
    block_sums[s].resize((spans[s].bytes + kChecksumBlock - 1) / kChecksumBlock);
    for (size_t at = 0; at < spans[s].bytes; at += kChunkBytes)
      chunks.push_back({s, at, std::min(spans[s].bytes, at + kChunkBytes)});
  }
  OutputFile out(path);

  // Streams take chunks in order; the first failure stops them all and is reported.
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
  auto stream = [&] {
    for (size_t c = next++; c < chunks.size() && !failed; c = next++) {
      const Chunk& k = chunks[c];
      const char* bytes = static_cast<const char*>(spans[k.span].data);
      for (size_t at = k.begin; at < k.end; at += kChecksumBlock)
        block_sums[k.span][at / kChecksumBlock] =
            block_checksum(bytes + at, std::min(kChecksumBlock, k.end - at));
      try {
        out.write(bytes + k.begin, k.end - k.begin, spans[k.span].offset + int64_t(k.begin));
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!failed.exchange(true)) error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t s = 1; s < std::min(kStreams, chunks.size()); ++s) threads.emplace_back(stream);
  stream();
  for (std::thread& t : threads) t.join();
  if (failed) throw CheckpointError(error);

  if (::ftruncate(out.fd, off_t(size)) != 0) fail_os("cannot size", path);
  if (::fsync(out.fd) != 0) fail_os("cannot fsync", path);
  const int fd = out.fd;
  out.fd = -1;
  if (::close(fd) != 0) fail_os("cannot close", path);

  std::vector<uint64_t> sums(spans.size());
  for (size_t s = 0; s < spans.size(); ++s)
    sums[s] = spans[s].bytes == 0 ? block_checksum(nullptr, 0)
                                  : combine_checksums(spans[s].bytes, block_sums[s].data(),
                                                      block_sums[s].size());
  return sums;
}

}  // namespace merak::checkpoint
