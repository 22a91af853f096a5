#include "python/capture_core/capture_core.h"

namespace ember::python {

void bind_bytecode(nanobind::module_& m) {}

}  // namespace ember::python
