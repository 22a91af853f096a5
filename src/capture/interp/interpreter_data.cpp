/// \file
/// The interpreter's handlers for building and taking apart Python values (op_table.cpp):
/// slices, tuples, lists, sets, dicts, strings, unpacking and formatting. Objects that become
/// set members or dict keys are hashed by identity: pinned (pin_identity) before they are used.
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

void Interpreter::op_BUILD_SLICE(Frame& fr, const Instr& in, StepResult&) {
  nb::object step = in.arg == 3 ? pop(fr) : nb::object();
  nb::object stop = pop(fr);
  nb::object start = pop(fr);
  fr.stack.push_back(checked(PySlice_New(start.ptr(), stop.ptr(), step.ptr())));
}

void Interpreter::op_build_sequence(Frame& fr, const Instr& in, StepResult&) {
  auto& st = fr.stack;
  if (in.op == Op::BUILD_SET) {
    const size_t depth = st.size();
    for (size_t i = 0; i < static_cast<size_t>(in.arg) && i < depth; ++i)
      pin_identity(st[depth - 1 - i]);
  }
  std::vector<nb::object> items = pop_n(fr, static_cast<size_t>(in.arg));
  nb::object list = checked(PyList_New(static_cast<Py_ssize_t>(items.size())));
  for (size_t i = 0; i < items.size(); ++i) {
    PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), items[i].release().ptr());
  }
  if (in.op == Op::BUILD_TUPLE) {
    st.push_back(checked(PyList_AsTuple(list.ptr())));
  } else if (in.op == Op::BUILD_LIST) {
    st.push_back(fresh(list));
  } else {
    st.push_back(fresh(checked(PySet_New(list.ptr()))));
  }
}

void Interpreter::op_BUILD_MAP(Frame& fr, const Instr& in, StepResult&) {
  const size_t depth = fr.stack.size();
  for (size_t i = 0; i < static_cast<size_t>(in.arg) && 2 * i + 2 <= depth; ++i) {
    pin_identity(fr.stack[depth - 2 - 2 * i]);  // k1, v1, ..., kn, vn: the keys
  }
  std::vector<nb::object> kv = pop_n(fr, static_cast<size_t>(2 * in.arg));
  nb::object d = fresh(checked(PyDict_New()));
  for (size_t i = 0; i < kv.size(); i += 2) {
    if (PyDict_SetItem(d.ptr(), kv[i].ptr(), kv[i + 1].ptr()) < 0) throw nb::python_error();
  }
  fr.stack.push_back(d);
}

void Interpreter::op_BUILD_CONST_KEY_MAP(Frame& fr, const Instr& in, StepResult&) {
  nb::object keys = pop(fr);
  std::vector<nb::object> values = pop_n(fr, static_cast<size_t>(in.arg));
  nb::object d = fresh(checked(PyDict_New()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (PyDict_SetItem(d.ptr(), PyTuple_GET_ITEM(keys.ptr(), static_cast<Py_ssize_t>(i)),
                       values[i].ptr()) < 0) {
      throw nb::python_error();
    }
  }
  fr.stack.push_back(d);
}

void Interpreter::op_BUILD_STRING(Frame& fr, const Instr& in, StepResult&) {
  std::vector<nb::object> parts = pop_n(fr, static_cast<size_t>(in.arg));
  nb::object tuple = checked(PyTuple_New(static_cast<Py_ssize_t>(parts.size())));
  for (size_t i = 0; i < parts.size(); ++i) {
    PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(i), parts[i].release().ptr());
  }
  nb::object empty = checked(PyUnicode_FromString(""));
  fr.stack.push_back(checked(PyUnicode_Join(empty.ptr(), tuple.ptr())));
}

void Interpreter::op_LIST_APPEND(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = pop(fr);
  nb::handle target = peek(fr, static_cast<size_t>(in.arg));
  if (PyList_Append(target.ptr(), v.ptr()) < 0) throw nb::python_error();
}

void Interpreter::op_SET_ADD(Frame& fr, const Instr& in, StepResult&) {
  if (!fr.stack.empty()) pin_identity(fr.stack.back());
  nb::object v = pop(fr);
  nb::handle target = peek(fr, static_cast<size_t>(in.arg));
  if (PySet_Add(target.ptr(), v.ptr()) < 0) throw nb::python_error();
}

void Interpreter::op_LIST_EXTEND(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = pop(fr);
  nb::handle target = peek(fr, static_cast<size_t>(in.arg));
  std::vector<nb::object> items;
  if (!materialize(v, items)) {
    EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v))
        << "unpacking a " << type_name_of(v) << " at " << location();
    nb::object fast = checked(PySequence_Fast(v.ptr(), "cannot unpack"));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.ptr()); ++i) {
      items.push_back(nb::borrow(PySequence_Fast_GET_ITEM(fast.ptr(), i)));
    }
  }
  for (auto& item : items) {
    if (PyList_Append(target.ptr(), item.ptr()) < 0) throw nb::python_error();
  }
}

void Interpreter::op_SET_UPDATE(Frame& fr, const Instr& in, StepResult&) {
  if (!fr.stack.empty()) pin_identity(fr.stack.back());
  nb::object v = pop(fr);
  nb::handle target = peek(fr, static_cast<size_t>(in.arg));
  nb::object res = checked(PyObject_CallMethod(target.ptr(), "update", "O", v.ptr()));
}

void Interpreter::op_dict_update(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = pop(fr);
  nb::handle target = peek(fr, static_cast<size_t>(in.arg));
  if (PyDict_CheckExact(v.ptr())) {
    if (PyDict_Update(target.ptr(), v.ptr()) < 0) throw nb::python_error();
    return;
  }
  // A program's dict subclass (**model_output): its keys, then each item as obj[key] reads it
  // (the class's __getitem__ inlined), as CPython merges a mapping.
  EMBER_UNSUPPORTED(PyDict_Check(v.ptr()) && rebuildable_object_type(v) != nullptr &&
                    (is_fresh(v) || source_of(v) >= 0))
      << "unpacking a " << type_name_of(v) << " as keyword arguments at " << location();
  nb::object keys = is_fresh(v) ? checked(PySequence_List(v.ptr())) : dict_view(v, "keys");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
    if (in.op == Op::DICT_MERGE && PyDict_Contains(target.ptr(), key) == 1) {
      PyErr_Format(PyExc_TypeError, "got multiple values for keyword argument '%S'", key);
      throw nb::python_error();
    }
    nb::object value = subscr(v, nb::handle(key));
    if (PyDict_SetItem(target.ptr(), key, value.ptr()) < 0) throw nb::python_error();
  }
}

void Interpreter::op_MAP_ADD(Frame& fr, const Instr& in, StepResult&) {
  // The key, below its value.
  if (fr.stack.size() >= 2) pin_identity(fr.stack[fr.stack.size() - 2]);
  nb::object value = pop(fr);
  nb::object key = pop(fr);
  if (PyDict_SetItem(peek(fr, static_cast<size_t>(in.arg)).ptr(), key.ptr(), value.ptr()) < 0) {
    throw nb::python_error();
  }
}

void Interpreter::op_LIST_TO_TUPLE(Frame& fr, const Instr&, StepResult&) {
  nb::object list = pop(fr);
  fr.stack.push_back(checked(PyList_AsTuple(list.ptr())));
}

void Interpreter::op_UNPACK_SEQUENCE(Frame& fr, const Instr& in, StepResult&) {
  nb::object seq = pop(fr);
  std::vector<nb::object> items = unpack_items(seq);
  if (static_cast<int>(items.size()) != in.arg) {
    PyErr_Format(PyExc_ValueError, "cannot unpack %zd values into %d",
                 static_cast<Py_ssize_t>(items.size()), in.arg);
    throw nb::python_error();
  }
  for (auto it = items.rbegin(); it != items.rend(); ++it) fr.stack.push_back(*it);
}

void Interpreter::op_UNPACK_EX(Frame& fr, const Instr& in, StepResult&) {
  auto& st = fr.stack;
  nb::object seq = pop(fr);
  std::vector<nb::object> items = unpack_items(seq);
  size_t before = static_cast<size_t>(in.arg & 0xff);
  size_t after = static_cast<size_t>(in.arg >> 8);
  if (items.size() < before + after) {
    PyErr_Format(PyExc_ValueError, "not enough values to unpack");
    throw nb::python_error();
  }
  nb::object rest = fresh(checked(PyList_New(0)));
  for (size_t i = before; i < items.size() - after; ++i) {
    if (PyList_Append(rest.ptr(), items[i].ptr()) < 0) throw nb::python_error();
  }
  for (size_t i = items.size(); i > items.size() - after; --i) st.push_back(items[i - 1]);
  st.push_back(rest);
  for (size_t i = before; i > 0; --i) st.push_back(items[i - 1]);
}

void Interpreter::op_FORMAT_VALUE(Frame& fr, const Instr& in, StepResult&) {
  nb::object spec = (in.arg & 0x04) ? pop(fr) : nb::object();
  nb::object v = pop(fr);
  EMBER_UNSUPPORTED(!is_tensor(v) && is_plain_value(v))
      << "formatting a " << type_name_of(v) << " at " << location();
  int conv = in.arg & 0x03;
  if (conv == 1) v = checked(PyObject_Str(v.ptr()));
  if (conv == 2) v = checked(PyObject_Repr(v.ptr()));
  if (conv == 3) v = checked(PyObject_ASCII(v.ptr()));
  fr.stack.push_back(checked(PyObject_Format(v.ptr(), spec.is_valid() ? spec.ptr() : nullptr)));
}

}  // namespace ember::capture
