#include "capture/interp/side_effects.h"

namespace nb = nanobind;

namespace ember::capture {

void apply_stores(const std::vector<AttrStore>& stores, const std::vector<at::Tensor>& outs,
                  const std::vector<nb::object>& values, std::vector<nb::object>& memo) {
  for (const AttrStore& s : stores) {
    nb::object v = build_output(s.value, outs, values, memo);
    PyObject* target = values[static_cast<size_t>(s.object_source)].ptr();
    int r = 0;
    if (s.name.is_valid()) {
      r = PyObject_SetAttr(target, s.name.ptr(), v.ptr());
    } else if (PyList_Check(target)) {
      r = PyList_SetSlice(target, 0, PY_SSIZE_T_MAX, v.ptr());
    } else {
      PyDict_Clear(target);
      r = PyDict_Update(target, v.ptr());
    }
    if (r < 0) throw nb::python_error();
  }
}

}  // namespace ember::capture
