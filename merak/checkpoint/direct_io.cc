#include "merak/checkpoint/direct_io.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "merak/core/error.h"

namespace merak::checkpoint {

size_t direct_io_alignment(int fd, size_t unknown) {
  struct statx st;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) != 0 || !(st.stx_mask & STATX_DIOALIGN))
    return unknown;
  if (st.stx_dio_offset_align == 0) return 0;
  return std::max<size_t>(st.stx_dio_mem_align, st.stx_dio_offset_align);
}

char* bounce_buffer(size_t bytes, size_t align) {
  thread_local std::unique_ptr<char, decltype(&std::free)> buffer(nullptr, &std::free);
  thread_local size_t size = 0, alignment = 0;
  if (size < bytes || alignment < align) {
    const size_t rounded = (bytes + align - 1) / align * align;
    buffer.reset(static_cast<char*>(std::aligned_alloc(align, rounded)));
    MERAK_CHECK(buffer, "cannot allocate a ", rounded, "-byte direct-I/O buffer");
    size = rounded;
    alignment = align;
  }
  return buffer.get();
}

}  // namespace merak::checkpoint
