#include "merak/autograd/grad_mode.h"

namespace merak::autograd {
namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace merak::autograd
