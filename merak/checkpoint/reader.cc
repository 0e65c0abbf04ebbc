#include "merak/checkpoint/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "merak/checkpoint/checksum.h"
#include "merak/checkpoint/direct_io.h"
#include "merak/core/read_file.h"

namespace merak::checkpoint {
namespace {

// A chunk is a whole number of checksum blocks, so each chunk's blocks are summed on their own.
constexpr size_t kChunkBytes = 8 * kChecksumBlock;
// Reading streams: enough to keep a fast disk's queue full, few enough to stay sequential.
constexpr size_t kStreams = 8;

[[noreturn]] void fail(const std::string& what) { throw CheckpointError(what); }

bool same_region(const Region& a, const Region& b) {
  return a.offset == b.offset && a.shape == b.shape && a.begin == b.begin &&
         a.flat_end() == b.flat_end();
}

// A file the pieces are in, opened once through the page cache and once for direct I/O (where
// the file system allows it), with the alignment direct I/O needs of offsets and addresses.
struct OpenFile {
  int fd = -1, direct_fd = -1;
  size_t align = 4096;
  int64_t size = 0;  // bytes, when opened
};

class Files {
 public:
  ~Files() {
    for (auto& [path, f] : files_) {
      ::close(f.fd);
      if (f.direct_fd >= 0) ::close(f.direct_fd);
    }
  }
  const OpenFile& open(const std::string& path, const std::string& tensor) {
    auto it = files_.find(path);
    if (it != files_.end()) return it->second;
    OpenFile f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0)
      fail("cannot open '" + path + "': " + std::strerror(errno) + " (tensor '" + tensor + "')");
    struct stat st;
    if (::fstat(f.fd, &st) != 0)
      fail("cannot stat '" + path + "': " + std::strerror(errno) + " (tensor '" + tensor + "')");
    f.size = int64_t(st.st_size);
    if (const size_t a = direct_io_alignment(f.fd, f.align)) {
      f.align = a;
      f.direct_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    }
    return files_[path] = f;
  }

 private:
  std::map<std::string, OpenFile> files_;
};

// Reads `n` bytes at `off` into `dst` with direct I/O as far as it goes (it may refuse, or stop
// short off the block grid), the rest through the page cache; the count read.
size_t read_span(const OpenFile& f, char* dst, size_t n, int64_t off) {
  size_t got = size_t(std::max<ssize_t>(0, pread_all(f.direct_fd, dst, n, off)));
  if (got < n)
    got += size_t(std::max<ssize_t>(0, pread_all(f.fd, dst + got, n - got, off + int64_t(got))));
  return got;
}

// Reads `n` bytes at `off` into `dst`; the count read (short only where the file ends). When
// `dst` and `off` sit alike against the direct-I/O alignment (pieces start on a page, and so do
// large tensors and the staging buffers), the aligned middle goes straight from the disk into
// `dst`, the unaligned ends through one aligned block each; otherwise all through the page cache.
size_t read_bytes(const OpenFile& f, char* dst, size_t n, int64_t off) {
  const int64_t a = int64_t(f.align);
  if (f.direct_fd < 0 || (reinterpret_cast<uintptr_t>(dst) - uint64_t(off)) % uint64_t(a) != 0)
    return size_t(std::max<ssize_t>(0, pread_all(f.fd, dst, n, off)));
  // Bytes [from, to) of the file, inside one aligned block, through the bounce buffer.
  auto through_block = [&](int64_t from, int64_t to) {
    char* bounce = bounce_buffer(size_t(a), size_t(a));
    const int64_t block = from / a * a;
    const int64_t got = int64_t(read_span(f, bounce, size_t(a), block));
    if (got < to - block) return false;
    std::memcpy(dst + (from - off), bounce + (from - block), size_t(to - from));
    return true;
  };
  const int64_t end = off + int64_t(n);
  const int64_t mid_begin = std::min(end, (off + a - 1) / a * a);
  const int64_t mid_end = std::max(mid_begin, end / a * a);
  if (mid_begin > off && !through_block(off, mid_begin)) return 0;
  if (mid_end > mid_begin) {
    const size_t len = size_t(mid_end - mid_begin);
    const size_t got = read_span(f, dst + (mid_begin - off), len, mid_begin);
    if (got < len) return size_t(mid_begin - off) + got;
  }
  if (end > mid_end && !through_block(mid_end, end)) return size_t(mid_end - off);
  return n;
}

// One piece of the checkpoint that some reads overlap: read once, checked once, its overlap
// copied into each of them.
struct PieceRead {
  const PieceEntry* entry = nullptr;
  const std::string* tensor = nullptr;
  std::string path;
  const OpenFile* file = nullptr;
  std::vector<size_t> readers;  // indices of the reads it serves
  char* direct = nullptr;       // the one reader's destination, when it wants exactly this
  // Otherwise the bytes go here (made at the piece's first chunk, freed at its last).
  std::unique_ptr<char, decltype(&std::free)> staging{nullptr, &std::free};
  char* staging_data = nullptr;
  std::once_flag staged;
  std::vector<uint64_t> block_sums;
  std::atomic<size_t> chunks_left{0};

  size_t bytes() const { return size_t(entry->byte_end - entry->byte_begin); }
  char* data() { return direct ? direct : staging_data; }
};

struct Chunk {
  size_t piece;
  size_t begin, end;  // bytes of the piece
};

void check_read(const Index& index, const RegionRead& r) {
  const std::string where = "checkpoint " + index.dir;
  auto it = index.tensors.find(r.tensor);
  if (it == index.tensors.end())
    fail(where + ": no tensor '" + r.tensor + "' (of shape " + shape_str(r.global_shape) +
         "): a checkpoint of another model?");
  const TensorEntry& t = it->second;
  if (t.shape != r.global_shape)
    fail(where + ": tensor '" + r.tensor + "' has shape " + shape_str(t.shape) + " there, " +
         shape_str(r.global_shape) + " here: a checkpoint of another model?");
  if (t.dtype != r.dtype)
    fail(where + ": tensor '" + r.tensor + "' is " + dtype_name(t.dtype) + " there, " +
         dtype_name(r.dtype) + " here");
  MERAK_CHECK(r.out.device().is_cpu() && r.out.is_contiguous() && r.out.dtype() == r.dtype &&
                  r.out.numel() == r.target.numel(),
              "read_region of '", r.tensor, "': the output ", r.out.str(), " is not ",
              r.target.numel(), " contiguous ", dtype_name(r.dtype), " on the host");
}

// The file holds fewer bytes than the piece needs.
std::string truncated(const PieceRead& p) {
  return p.path + ": truncated: tensor '" + *p.tensor + "' needs bytes " +
         std::to_string(p.entry->byte_begin) + ".." + std::to_string(p.entry->byte_end);
}

// Reads one chunk into its piece and sums its checksum blocks.
void read_chunk(PieceRead& p, const Chunk& c) {
  if (!p.direct)  // placed as the piece is in the file against the direct-I/O alignment
    std::call_once(p.staged, [&] {
      const size_t a = p.file->align, shift = size_t(p.entry->byte_begin) % a;
      p.staging.reset(static_cast<char*>(std::aligned_alloc(a, (shift + p.bytes() + a) / a * a)));
      p.staging_data = p.staging.get() + shift;
    });
  char* bytes = p.data();
  const size_t got = c.begin + read_bytes(*p.file, bytes + c.begin, c.end - c.begin,
                                          p.entry->byte_begin + int64_t(c.begin));
  if (got != c.end) fail(truncated(p));
  for (size_t at = c.begin; at < c.end; at += kChecksumBlock)
    p.block_sums[at / kChecksumBlock] =
        block_checksum(bytes + at, std::min(kChecksumBlock, c.end - at));
}

// A piece whose chunks are all in: its checksum checked, its overlaps handed to its readers.
void finish_piece(PieceRead& p, const std::vector<RegionRead>& reads,
                  std::vector<std::atomic<int64_t>>& copied) {
  const uint64_t sum = p.bytes() == 0 ? block_checksum(nullptr, 0)
                                      : combine_checksums(p.bytes(), p.block_sums.data(),
                                                          p.block_sums.size());
  if (sum != p.entry->checksum)
    fail(p.path + ": checksum mismatch in tensor '" + *p.tensor + "' " + p.entry->region.str() +
         " (the file is damaged)");
  for (size_t r : p.readers) {
    const RegionRead& read = reads[r];
    copied[r] += p.direct ? read.target.numel()
                          : copy_overlap(p.entry->region, p.staging_data, read.target,
                                         read.out.raw_data(), dtype_size(read.dtype));
  }
  p.staging.reset();
}

}  // namespace

void read_regions(const Index& index, const std::vector<RegionRead>& reads) {
  for (const RegionRead& r : reads) check_read(index, r);

  // The pieces to read, each once, in file order.
  std::vector<std::unique_ptr<PieceRead>> pieces;
  std::map<const PieceEntry*, size_t> piece_of;
  for (size_t r = 0; r < reads.size(); ++r)
    for (const PieceEntry& e : index.tensors.at(reads[r].tensor).pieces) {
      // Boxes alone do not tell: ZeRO-1's pieces of a shard share its box, each a run of it.
      if (overlap_numel(e.region, reads[r].target) == 0) continue;
      auto [it, fresh] = piece_of.emplace(&e, pieces.size());
      if (fresh) {
        pieces.push_back(std::make_unique<PieceRead>());
        pieces.back()->entry = &e;
        pieces.back()->tensor = &reads[r].tensor;
        pieces.back()->path = index.dir + "/" + e.file;
      }
      pieces[it->second]->readers.push_back(r);
    }
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) {
    return std::tie(a->entry->file, a->entry->byte_begin) <
           std::tie(b->entry->file, b->entry->byte_begin);
  });
  Files files;
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < pieces.size(); ++k) {
    PieceRead& p = *pieces[k];
    p.file = &files.open(p.path, *p.tensor);
    // Checked before any read, so no offset past the file reaches the reads' arithmetic.
    if (p.entry->byte_end > p.file->size)
      fail(truncated(p) + ", the file ends at byte " + std::to_string(p.file->size));
    const RegionRead& first = reads[p.readers[0]];
    if (p.readers.size() == 1 && same_region(p.entry->region, first.target))
      p.direct = static_cast<char*>(first.out.raw_data());
    const size_t n = p.bytes();
    p.block_sums.resize((n + kChecksumBlock - 1) / kChecksumBlock);
    size_t count = 0;
    for (size_t at = 0; at < n || (n == 0 && count == 0); at += kChunkBytes, ++count)
      chunks.push_back({k, at, std::min(n, at + kChunkBytes)});
    p.chunks_left = count;
  }

  // Streams take chunks in order. The first failing chunk wins (the same error whatever the
  // timing): chunks after it are skipped, chunks before it still run.
  std::vector<std::atomic<int64_t>> copied(reads.size());
  std::atomic<size_t> next{0}, first_bad{chunks.size()};
  std::mutex error_mutex;
  std::string error;
  auto stream = [&] {
    for (size_t c = next++; c < chunks.size() && c < first_bad; c = next++) {
      PieceRead& p = *pieces[chunks[c].piece];
      try {
        read_chunk(p, chunks[c]);
        if (--p.chunks_left == 0) finish_piece(p, reads, copied);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (c < first_bad) {
          first_bad = c;
          error = e.what();
        }
      }
    }
  };
  // One stream per chunk's worth of bytes, up to kStreams: a small read (a tiny model, one
  // tensor) is not worth starting threads for.
  size_t total = 0;
  for (const auto& c : chunks) total += c.end - c.begin;
  const size_t streams = std::min({kStreams, chunks.size(), total / kChunkBytes + 1});
  std::vector<std::thread> threads;
  for (size_t s = 1; s < streams; ++s) threads.emplace_back(stream);
  stream();
  for (std::thread& t : threads) t.join();
  if (first_bad < chunks.size()) fail(error);

  for (size_t r = 0; r < reads.size(); ++r)
    if (copied[r] != reads[r].target.numel())
      fail("checkpoint " + index.dir + ": tensor '" + reads[r].tensor + "' " +
           reads[r].target.str() + ": the pieces hold " + std::to_string(copied[r]) +
           " of its " + std::to_string(reads[r].target.numel()) + " elements");
}

void read_region(const Index& index, const std::string& name, const Shape& global_shape,
                 DType dtype, const Region& target, const Tensor& out) {
  read_regions(index, {{name, global_shape, dtype, target, out}});
}

void check_no_other_tensors(const Index& index, const std::vector<std::string>& parameters) {
  std::set<std::string> known;
  for (const std::string& p : parameters)
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) known.insert(p + suffix);
  for (const auto& [name, t] : index.tensors)
    if (!known.count(name))
      fail("checkpoint " + index.dir + ": tensor '" + name + "' (of shape " + shape_str(t.shape) +
           ") is not this model's: a checkpoint of another model?");
}

}  // namespace merak::checkpoint
