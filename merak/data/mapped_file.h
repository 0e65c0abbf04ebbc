// A whole file mapped read-only (token shards, Megatron's .idx and .bin): the pages are the
// page cache's, read on demand, shared by every process that maps the file.
#pragma once

#include <cstdint>
#include <string>

namespace merak::data {

class MappedFile {
 public:
  // Errors (cannot open, stat or map) throw merak::Error starting with the path.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* bytes() const { return bytes_; }  // null for an empty file
  int64_t size() const { return size_; }

 private:
  const unsigned char* bytes_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace merak::data
