#include "merak/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "merak/core/error.h"
#include "merak/data/tokenize_text.h"

namespace merak::data {

MappedFile::MappedFile(const std::string& path) {
  input_file_bytes(path);  // a directory, a device or a pipe is refused before it is opened
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MERAK_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    MERAK_FAIL(path, ": cannot stat: ", std::strerror(err));
  }
  size_ = int64_t(st.st_size);
  if (size_ == 0) {  // mmap refuses a length of 0
    ::close(fd);
    return;
  }
  void* p = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  MERAK_CHECK(p != MAP_FAILED, path, ": cannot mmap: ", std::strerror(err));
  bytes_ = static_cast<const unsigned char*>(p);
}

MappedFile::~MappedFile() {
  if (bytes_) ::munmap(const_cast<unsigned char*>(bytes_), size_t(size_));
}

}  // namespace merak::data
