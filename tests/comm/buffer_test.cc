#include <catch2/catch.hpp>

#include "merak/comm/buffer.h"

using namespace merak;
using namespace merak::comm;

TEST_CASE("a contiguous tensor is a buffer over its elements", "[comm][buffer]") {
  Tensor t = Tensor::zeros({4, 6}, DType::BF16);
  Buffer b = t;
  CHECK(b.data == t.raw_data());
  CHECK(b.numel == 24);
  CHECK(b.bytes() == 48);
  CHECK(b.dtype == DType::BF16);
  CHECK(b.device.is_cpu());
  CHECK(b.owner.same(t));

  // A narrowed row range is contiguous: the buffer starts at its first element.
  Tensor rows = t.narrow(0, 1, 2);
  Buffer rb = rows;
  CHECK(rb.data == static_cast<char*>(t.raw_data()) + 6 * 2);
  CHECK(rb.numel == 12);

  Buffer s = b.slice(5, 10);
  CHECK(s.data == static_cast<char*>(b.data) + 10);
  CHECK(s.numel == 10);
  CHECK_THROWS_WITH(b.slice(20, 5), Catch::Contains("slice [20, 25) of 24 elements"));
}

TEST_CASE("tensors a communicator cannot use are refused with the reason", "[comm][buffer]") {
  Tensor t = Tensor::zeros({4, 6});
  CHECK_THROWS_WITH(Buffer(t.transpose(0, 1)), Catch::Contains("not contiguous"));
  CHECK_THROWS_WITH(Buffer(Tensor::empty({3}, DType::F32, Device::meta())),
                    Catch::Contains("Meta"));
  float x = 0;
  CHECK_THROWS_WITH(Buffer(&x, -1, DType::F32, Device::cpu()), Catch::Contains("negative"));
  CHECK(comm_dtype(DType::I64));
  CHECK_FALSE(comm_dtype(DType::Bool));
  CHECK_FALSE(comm_dtype(DType::F64));
}
