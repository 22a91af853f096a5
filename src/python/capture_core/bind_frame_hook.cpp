#include "python/capture_core/capture_core.h"

namespace ember::python {

void bind_frame_hook(nanobind::module_& m) {}

}  // namespace ember::python
