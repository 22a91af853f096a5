#include "capture/bytecode/py_ref.h"

namespace ember::capture::bytecode {

std::string fetch_python_error() {
  if (!PyErr_Occurred()) return "";
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyRef t(type), v(value), b(tb);
  std::string out = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
  if (v) {
    PyRef s(PyObject_Str(v.get()));
    const char* text = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    if (text != nullptr) out += std::string(": ") + text;
    PyErr_Clear();
  }
  return out;
}

}  // namespace ember::capture::bytecode
