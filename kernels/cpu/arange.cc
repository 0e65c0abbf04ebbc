// CPU kernel of arange: y[i] = i.
#include "merak/ops/op_util.h"

namespace merak::ops {

MERAK_REGISTER_KERNEL(arange, CPU,
                      [](const std::vector<Tensor>&, const std::vector<Tensor>& out, const Attrs&) {
                        int64_t* y = out[0].data<int64_t>();
                        for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = i;
                      });

}  // namespace merak::ops
