#include "capture/side_effects.h"

namespace nb = nanobind;

namespace ember::capture {

void apply_stores(const std::vector<AttrStore>& stores, const std::vector<at::Tensor>& outs,
                  const std::vector<nb::object>& values, std::vector<nb::object>& memo) {
  for (const AttrStore& s : stores) {
    nb::object v = build_output(s.value, outs, values, memo);
    if (PyObject_SetAttr(values[static_cast<size_t>(s.object_source)].ptr(), s.name.ptr(),
                         v.ptr()) < 0) {
      throw nb::python_error();
    }
  }
}

}  // namespace ember::capture
