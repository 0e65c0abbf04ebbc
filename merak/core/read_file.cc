#include "merak/core/read_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace merak {

bool read_file(const std::string& path, std::string* bytes, std::string* why) {
  bytes->clear();
  std::FILE* f = std::fopen(path.c_str(), "rb");  // a directory opens; reading it fails
  if (f == nullptr) {
    *why = std::strerror(errno);
    return false;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes->append(buf, n);
  const int err = errno;
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) *why = std::strerror(err);
  return !failed;
}

ssize_t pread_all(int fd, char* dst, size_t n, int64_t off) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, dst + got, n - got, off_t(off + int64_t(got)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return got > 0 ? ssize_t(got) : -1;
    if (r == 0) break;
    got += size_t(r);
  }
  return ssize_t(got);
}

}  // namespace merak
