// What Registry::add refuses: definitions the rest of the system could not use.
#include <catch2/catch.hpp>

#include "merak/ops/registry.h"

using namespace merak;
using namespace merak::ops;

namespace {

OpDef noise_op(std::vector<AttrSpec> attrs) {
  OpDef d;
  d.name = "noise";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = std::move(attrs);
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return in; };
  d.random = {"p", /*identity_at_zero=*/true};
  return d;
}

}  // namespace

TEST_CASE("an op drawing random numbers must declare its rate and stream attributes",
          "[ops][registry]") {
  Registry r;  // not the global one
  CHECK_THROWS_WITH(r.add(noise_op({{"stream", AttrKind::Int, AttrValue(int64_t(0))}})),
                    Catch::Contains("op 'noise' draws random numbers but does not declare a "
                                    "float 'p' and an int 'stream'"));
  CHECK_THROWS_WITH(r.add(noise_op({{"p", AttrKind::Float, std::nullopt}})),
                    Catch::Contains("does not declare a float 'p' and an int 'stream'"));
  CHECK_THROWS(r.add(noise_op({{"p", AttrKind::Int, std::nullopt},
                               {"stream", AttrKind::Int, AttrValue(int64_t(0))}})));
  CHECK_NOTHROW(r.add(noise_op({{"p", AttrKind::Float, std::nullopt},
                                {"stream", AttrKind::Int, AttrValue(int64_t(0))}})));
  // The registry's own random ops were registered through the same check.
  for (const char* name : {"dropout", "sdpa"})
    CHECK_FALSE(Registry::get().at(name).random.rate.empty());
}
