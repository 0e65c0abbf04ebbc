// Reading a whole file for the loaders (configs, hardware profiles, graphs, ONNX models), with
// the system's reason when it cannot be read: "Is a directory" says more than a parser's
// complaint about an empty or odd input.
#pragma once

#include <string>

namespace merak {

// The bytes of the file at `path` into *bytes; false with the system's reason in *why ("No such
// file or directory", "Is a directory", ...) when it cannot be opened or read.
bool read_file(const std::string& path, std::string* bytes, std::string* why);

}  // namespace merak
