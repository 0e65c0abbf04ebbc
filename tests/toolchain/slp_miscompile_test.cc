// Guards the build flags against a GCC 12.2 AVX-512 miscompile: with SLP vectorisation on, this
// copy of {1, 1, 1, 0} stores four 1s. .bazelrc turns SLP vectorisation off; if someone drops
// that flag (or the compiler changes), this test says so.
#include <catch2/catch.hpp>

namespace {
__attribute__((noinline)) double last_of(const double* v) { return v[3]; }
}  // namespace

TEST_CASE("constant arrays copy correctly under the project's compiler flags", "[toolchain]") {
  double* p = new double[4];
  const double init[4] = {1, 1, 1, 0};
  for (int i = 0; i < 4; ++i) p[i] = init[i];
  CHECK(last_of(p) == 0.0);
  delete[] p;
}
