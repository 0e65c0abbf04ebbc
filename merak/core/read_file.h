// Reading a whole file for the loaders (configs, hardware profiles, graphs, ONNX models), with
// the system's reason when it cannot be read: "Is a directory" says more than a parser's
// complaint about an empty or odd input. And reading part of an open file in full.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace merak {

// The bytes of the file at `path` into *bytes; false with the system's reason in *why ("No such
// file or directory", "Is a directory", ...) when it cannot be opened or read.
bool read_file(const std::string& path, std::string* bytes, std::string* why);

// pread until `n` bytes at `off` are in `dst` or the file ends (a pread may return less than
// asked, and caps at 2 GiB; EINTR is retried): the count read, or -1 when the first call fails
// (errno says why).
ssize_t pread_all(int fd, char* dst, size_t n, int64_t off);

}  // namespace merak
