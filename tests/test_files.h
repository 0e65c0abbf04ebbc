// Files for tests: runfiles, scratch paths under Bazel's per-test temporary directory, and whole
// files read or written as bytes. Failures stop the test case (Catch2 REQUIRE).
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace merak::testing {

// A file of this test's runfiles: $TEST_SRCDIR/$TEST_WORKSPACE/rel (both must be set).
inline std::string runfile(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  REQUIRE(srcdir != nullptr);
  REQUIRE(workspace != nullptr);
  return std::string(srcdir) + "/" + workspace + "/" + rel;
}

// A scratch path: $TEST_TMPDIR/name (/tmp/name outside Bazel); name carries the caller's prefix.
inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// The whole file at path, as bytes; the file must open.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces the file at path with exactly these bytes; the write must succeed.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out);
}

}  // namespace merak::testing
