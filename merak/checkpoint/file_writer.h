// Writing a checkpoint's shard file: spans of memory placed at given offsets of a new file,
// each span's checksum taken as it goes out.
//
// The spans go to the disk with direct I/O where the file system allows it: no copy into the
// page cache (on a virtual machine, fresh page-cache pages cost a fault each, and a single writer
// thread copying 1.5 GB into them ran at a third of the disk's speed), and no cache filled with
// bytes nobody reads back soon. The mirror of reader.cc: 8 MiB chunks (whole checksum blocks)
// taken in file order by a few threads, each summing its chunk before writing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace merak::checkpoint {

// `bytes` bytes at `data` go to offset `offset` of the file.
struct FileSpan {
  int64_t offset = 0;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Where spans may start so that a file can be written with direct I/O: every span's offset must
// be a multiple of it (the bytes between spans read as zeros).
constexpr int64_t kSpanAlignment = 4096;

// Creates `path` holding `spans` and zeros elsewhere, exactly `size` bytes long, fsynced; returns
// each span's checksum (checksum() of its bytes). A full disk or any other failed write: a
// CheckpointError naming the path.
std::vector<uint64_t> write_file(const std::string& path, int64_t size,
                                 const std::vector<FileSpan>& spans);

}  // namespace merak::checkpoint
