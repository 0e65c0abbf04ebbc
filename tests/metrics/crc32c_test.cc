// CRC-32C: the published check values (the "123456789" check and RFC 3720's iSCSI vectors), the
// SSE4.2 path against the table path at every length and alignment, chunked extension, masking.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "merak/metrics/crc32c.h"

using namespace merak::metrics;

namespace {

std::vector<uint8_t> bytes_of(int n, uint8_t first, int step) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = uint8_t(first + step * i);
  return v;
}

// Both paths must agree with the vector.
void check_vector(const std::vector<uint8_t>& data, uint32_t want) {
  CHECK(crc32c(data.data(), data.size()) == want);
  CHECK(crc32c_extend_portable(0, data.data(), data.size()) == want);
}

}  // namespace

TEST_CASE("crc32c: known vectors", "[metrics][crc32c]") {
  INFO("hardware path: " << crc32c_hardware());
  CHECK(crc32c(std::string_view("123456789")) == 0xE3069283u);
  CHECK(crc32c_extend_portable(0, "123456789", 9) == 0xE3069283u);
  CHECK(crc32c(std::string_view()) == 0u);
  check_vector(bytes_of(32, 0x00, 0), 0x8A9136AAu);   // 32 zero bytes
  check_vector(bytes_of(32, 0xFF, 0), 0x62A8AB43u);   // 32 bytes of 0xFF
  check_vector(bytes_of(32, 0x00, 1), 0x46DD794Eu);   // 0x00, 0x01, ..., 0x1F
  check_vector(bytes_of(32, 0x1F, -1), 0x113FDB5Cu);  // 0x1F, 0x1E, ..., 0x00
}

TEST_CASE("crc32c: hardware and table paths agree at every length and alignment",
          "[metrics][crc32c]") {
  std::mt19937 rng(1234);
  std::vector<uint8_t> buf(600);
  for (auto& b : buf) b = uint8_t(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n + offset <= 520; ++n) {
      const uint32_t a = crc32c(buf.data() + offset, n);
      const uint32_t b = crc32c_extend_portable(0, buf.data() + offset, n);
      if (a != b) FAIL("offset " << offset << " length " << n << ": " << a << " vs " << b);
    }
}

TEST_CASE("crc32c: extending chunk by chunk equals one pass", "[metrics][crc32c]") {
  std::mt19937 rng(99);
  std::vector<uint8_t> buf(1000);
  for (auto& b : buf) b = uint8_t(rng());
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    CHECK(crc32c_extend(crc32c(buf.data(), split), buf.data() + split, buf.size() - split) ==
          whole);
    CHECK(crc32c_extend_portable(crc32c_extend_portable(0, buf.data(), split), buf.data() + split,
                                 buf.size() - split) == whole);
  }
  // "123456789" in three pieces.
  CHECK(crc32c_extend(crc32c_extend(crc32c("12", 2), "3456", 4), "789", 3) == 0xE3069283u);
}

TEST_CASE("crc32c: TFRecord masking", "[metrics][crc32c]") {
  // Rotate right by 15, add 0xa282ead8 (mod 2^32).
  CHECK(crc32c_mask(0) == 0xA282EAD8u);
  CHECK(crc32c_mask(0x00008000u) == 0xA282EAD9u);
  CHECK(crc32c_mask(0x00000001u) == 0xA284EAD8u);
  CHECK(crc32c_mask(0xE3069283u) == ((((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u)));
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t c = uint32_t(rng());
    CHECK(crc32c_unmask(crc32c_mask(c)) == c);
  }
}
