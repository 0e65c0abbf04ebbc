// The checksum every piece of a checkpoint carries: 64 bits over its bytes, fast enough to run at
// disk speed (four independent multiply-rotate lanes over 8-byte words, mixed at the end), so
// that a truncated or bit-flipped file is caught before a value from it is used. Not
// cryptographic: it guards against accidents, not adversaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace merak::checkpoint {

// Over 1 MiB blocks, summed on the thread pool when `parallel` (the same value either way: a
// writer thread beside training passes false and keeps off the pool).
uint64_t checksum(const void* data, size_t bytes, bool parallel = true);

// The same sum taken in parts, for bytes that arrive a chunk at a time: the sum of each
// kChecksumBlock-byte block (the last may be shorter), in order, combined over `bytes` in all.
constexpr size_t kChecksumBlock = size_t(1) << 20;
uint64_t block_checksum(const void* data, size_t bytes);
uint64_t combine_checksums(size_t bytes, const uint64_t* block_sums, size_t blocks);
std::string checksum_hex(uint64_t c);  // 16 lower-case hex digits
// The reverse, as an index is read: the sum its 1 to 16 hex digits write; false if it is not one.
bool checksum_from_hex(const std::string& text, uint64_t* c);

}  // namespace merak::checkpoint
