// What reading and writing checkpoint files with direct I/O (O_DIRECT: disk to memory, no
// page-cache copy) both need: the alignment the file system asks for, and an aligned buffer for
// the ends of a transfer that are off it.
#pragma once

#include <cstddef>

namespace merak::checkpoint {

// The alignment direct I/O on open file `fd` needs of both file offsets and memory addresses
// (the larger of the two); 0 when the file system has no direct I/O; `unknown` when the kernel
// does not say.
size_t direct_io_alignment(int fd, size_t unknown);

// This thread's buffer of at least `bytes` bytes aligned to `align` (a power of two), kept from
// call to call; valid until the thread's next call.
char* bounce_buffer(size_t bytes, size_t align);

}  // namespace merak::checkpoint
