// Reading and writing the safetensors format: an 8-byte little-endian header length N, N bytes
// of JSON naming each tensor's dtype, shape and [begin, end) byte range in the data buffer that
// follows, and an optional "__metadata__" map of strings.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::checkpoint {

// A safetensors file written one tensor at a time, so that a whole model need never be in memory
// at once: the header for `tensors` (in that order) is written on construction, then each
// tensor's data by write(), in the same order, each as a contiguous row-major block; the header
// is padded by spaces to a multiple of 8 bytes. Atomic: everything goes to a temporary file
// beside `path`, which commit() makes durable and renames over it; a writer destroyed before
// commit() removes it, and `path` is untouched.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Spec>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next declared tensor's data: a CPU tensor of its dtype and shape.
  void write(const Tensor& tensor);
  // Every declared tensor written: fsync, then rename into place.
  void commit();
  // Where the bytes go until commit() (for a tool that removes it when interrupted).
  const std::string& temporary_path() const { return tmp_; }

 private:
  [[noreturn]] void abandon(const std::string& problem);  // removes the temporary file, throws

  std::string path_, tmp_;
  std::vector<Spec> tensors_;
  size_t written_ = 0;
  FILE* file_ = nullptr;
};

// All `tensors` through one SafetensorsWriter.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A safetensors file open for reading one tensor at a time: its header is read and checked on
// opening, and read() takes only the bytes of the tensor asked for. A rank starting from a
// 20B model's weights holds one whole tensor at a time, not the model.
// Rejects, naming the file and the problem, what the safetensors library rejects: truncated
// files, bad header lengths or JSON, unknown dtypes, byte ranges that do not match the shape,
// overlap, leave gaps or run past the data.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // The tensors' names in the order of their data in the file.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor `name` in CPU memory; throws naming the file and the tensor when it has none.
  Tensor read(const std::string& name) const;

  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    int64_t begin = 0, end = 0;  // byte range in the data buffer
  };

 private:
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;              // file offset of the data buffer
  std::vector<Entry> entries_;          // in data order
  std::map<std::string, size_t> index_;  // name -> entries_ position
  std::map<std::string, std::string> metadata_;
};

// Reads every tensor into CPU memory, in the order of their data in the file, and the metadata
// when asked (a SafetensorsReader read whole).
std::vector<std::pair<std::string, Tensor>> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace merak::checkpoint
