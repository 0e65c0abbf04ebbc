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

TEST_CASE("an op drawing random numbers must declare its rate and where it draws",
          "[ops][registry]") {
  Registry r;  // not the global one
  const AttrSpec stream{"stream", AttrKind::Int, AttrValue(int64_t(0))},
      first_row{"first_row", AttrKind::Int, AttrValue(int64_t(0))},
      rows{"rows", AttrKind::Int, AttrValue(int64_t(0))}, p{"p", AttrKind::Float, std::nullopt};
  CHECK_THROWS_WITH(r.add(noise_op({stream, first_row, rows})),
                    Catch::Contains("op 'noise' draws random numbers but does not declare a "
                                    "float 'p' and ints 'stream', 'first_row' and 'rows'"));
  CHECK_THROWS_WITH(r.add(noise_op({p})),
                    Catch::Contains("does not declare a float 'p' and ints 'stream'"));
  CHECK_THROWS(r.add(noise_op({p, stream, rows})));  // no first_row
  CHECK_THROWS(r.add(noise_op({{"p", AttrKind::Int, std::nullopt}, stream, first_row, rows})));
  CHECK_NOTHROW(r.add(noise_op({p, stream, first_row, rows})));
  // The registry's own random ops were registered through the same check.
  for (const char* name : {"dropout", "sdpa"})
    CHECK_FALSE(Registry::get().at(name).random.rate.empty());
}
