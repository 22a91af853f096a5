#include "capture/compile/output_template.h"

#include <torch/csrc/autograd/python_variable.h>

#include "support/error.h"
#include "sym/eval.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

void remember(std::vector<nb::object>& memo, int slot, nb::handle obj) {
  if (slot < 0) return;
  if (memo.size() <= static_cast<size_t>(slot)) memo.resize(static_cast<size_t>(slot) + 1);
  memo[static_cast<size_t>(slot)] = nb::borrow(obj);
}

}  // namespace

nb::object build_output(const OutputTemplate& t, const std::vector<at::Tensor>& outs,
                        const std::vector<nb::object>& values) {
  std::vector<nb::object> memo;
  return build_output(t, outs, values, memo);
}

nb::object build_output(const OutputTemplate& t, const std::vector<at::Tensor>& outs,
                        const std::vector<nb::object>& values, std::vector<nb::object>& memo) {
  switch (t.kind) {
    case OutputTemplate::Kind::Tensor:
      return nb::steal(THPVariable_Wrap(outs[static_cast<size_t>(t.index)]));
    case OutputTemplate::Kind::Constant:
      return t.value;
    case OutputTemplate::Kind::Source:
      return values[static_cast<size_t>(t.index)];
    case OutputTemplate::Kind::Size: {
      sym::Bindings bindings;
      for (const auto& [id, at] : t.size_sources) {
        const nb::object& tensor = values[static_cast<size_t>(at.first)];
        EMBER_INTERNAL_ASSERT(THPVariable_Check(tensor.ptr()))
            << "a shape symbol's source is not a tensor";
        bindings[id] = THPVariable_Unpack(tensor.ptr()).size(at.second);
      }
      return nb::steal(PyLong_FromLongLong(sym::evaluate(t.size, bindings)));
    }
    case OutputTemplate::Kind::BoundMethod: {
      nb::object self = build_output(t.items[0], outs, values, memo);
      PyObject* m = PyObject_GetAttr(self.ptr(), t.value.ptr());
      if (m == nullptr) throw nb::python_error();
      return nb::steal(m);
    }
    case OutputTemplate::Kind::Tuple:
    case OutputTemplate::Kind::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(t.items.size());
      nb::object seq =
          nb::steal(t.kind == OutputTemplate::Kind::Tuple ? PyTuple_New(n) : PyList_New(n));
      if (!seq.is_valid()) throw nb::python_error();
      remember(memo, t.slot, seq);
      for (Py_ssize_t i = 0; i < n; ++i) {
        nb::object item = build_output(t.items[static_cast<size_t>(i)], outs, values, memo);
        if (t.kind == OutputTemplate::Kind::Tuple) {
          PyTuple_SET_ITEM(seq.ptr(), i, item.release().ptr());
        } else {
          PyList_SET_ITEM(seq.ptr(), i, item.release().ptr());
        }
      }
      if (t.kind == OutputTemplate::Kind::Tuple && t.value.is_valid()) {
        // A namedtuple: tuple.__new__(its class, items).
        nb::object args = nb::steal(PyTuple_Pack(1, seq.ptr()));
        auto* type = reinterpret_cast<PyTypeObject*>(t.value.ptr());
        PyObject* named = PyTuple_Type.tp_new(type, args.ptr(), nullptr);
        if (named == nullptr) throw nb::python_error();
        return nb::steal(named);
      }
      return seq;
    }
    case OutputTemplate::Kind::Alias:
      return memo.at(static_cast<size_t>(t.slot));
    case OutputTemplate::Kind::Object: {
      // A new object of a plain class, its state set without running its methods: its
      // attributes into its __dict__, its items through its static base's item assignment.
      auto* type = reinterpret_cast<PyTypeObject*>(t.value.ptr());
      nb::object empty = nb::steal(PyTuple_New(0));
      nb::object obj = nb::steal(type->tp_new(type, empty.ptr(), nullptr));
      if (!obj.is_valid()) throw nb::python_error();
      remember(memo, t.slot, obj);
      nb::object attrs = build_output(t.items[0], outs, values, memo);
      nb::object dict = nb::steal(PyObject_GenericGetDict(obj.ptr(), nullptr));
      if (!dict.is_valid() || PyDict_Update(dict.ptr(), attrs.ptr()) < 0) throw nb::python_error();
      if (t.items.size() > 1) {
        auto* base = reinterpret_cast<PyTypeObject*>(t.base.ptr());
        nb::object items = build_output(t.items[1], outs, values, memo);
        PyObject* key = nullptr;
        PyObject* value = nullptr;
        Py_ssize_t pos = 0;
        while (PyDict_Next(items.ptr(), &pos, &key, &value)) {
          if (base->tp_as_mapping->mp_ass_subscript(obj.ptr(), key, value) < 0) {
            throw nb::python_error();
          }
        }
      }
      return obj;
    }
    case OutputTemplate::Kind::Dict: {
      nb::object d = nb::steal(PyDict_New());
      if (!d.is_valid()) throw nb::python_error();
      remember(memo, t.slot, d);
      for (size_t i = 0; i < t.items.size(); ++i) {
        nb::object item = build_output(t.items[i], outs, values, memo);
        if (PyDict_SetItem(d.ptr(), PyTuple_GET_ITEM(t.value.ptr(), static_cast<Py_ssize_t>(i)),
                           item.ptr()) < 0) {
          throw nb::python_error();
        }
      }
      return d;
    }
  }
  return nb::none();
}

}  // namespace ember::capture
