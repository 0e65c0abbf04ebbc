// Reading and writing the safetensors format: an 8-byte little-endian header length N, N bytes
// of JSON naming each tensor's dtype, shape and [begin, end) byte range in the data buffer that
// follows, and an optional "__metadata__" map of strings.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::checkpoint {

// Writes the tensors in the given order, each as a contiguous row-major block, with the header
// padded by spaces to a multiple of 8 bytes. Atomic: the file appears complete or not at all
// (written to a temporary file next to it, then renamed).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor into CPU memory, in the order of their data in the file, and the metadata
// when asked. Rejects, naming the file and the problem, what the safetensors library rejects:
// truncated files, bad header lengths or JSON, unknown dtypes, byte ranges that do not match
// the shape, overlap, leave gaps or run past the data.
std::vector<std::pair<std::string, Tensor>> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace merak::checkpoint
