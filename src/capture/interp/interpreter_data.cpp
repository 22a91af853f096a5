/// \file
/// The interpreter's handlers for building and taking apart Python values: slices, tuples,
/// lists, sets, dicts, strings, unpacking and formatting (the rest of the loop is in
/// interpreter.cpp).
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

bool Interpreter::step_data(Frame& fr, const Instr& in) {
  auto& st = fr.stack;
  // Objects that become set members or dict keys are hashed by identity: pinned.
  const size_t depth = st.size();
  if (in.op == Op::BUILD_SET) {
    for (size_t i = 0; i < static_cast<size_t>(in.arg) && i < depth; ++i)
      pin_identity(st[depth - 1 - i]);
  } else if (in.op == Op::BUILD_MAP) {
    for (size_t i = 0; i < static_cast<size_t>(in.arg) && 2 * i + 2 <= depth; ++i) {
      pin_identity(st[depth - 2 - 2 * i]);  // k1, v1, ..., kn, vn: the keys
    }
  } else if ((in.op == Op::SET_ADD || in.op == Op::SET_UPDATE) && depth >= 1) {
    pin_identity(st[depth - 1]);
  } else if (in.op == Op::MAP_ADD && depth >= 2) {
    pin_identity(st[depth - 2]);  // the key, below its value
  }
  switch (in.op) {
    case Op::BUILD_SLICE: {
      nb::object step = in.arg == 3 ? pop(fr) : nb::object();
      nb::object stop = pop(fr);
      nb::object start = pop(fr);
      st.push_back(checked(PySlice_New(start.ptr(), stop.ptr(), step.ptr())));
      return true;
    }
    case Op::BUILD_TUPLE:
    case Op::BUILD_LIST:
    case Op::BUILD_SET: {
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
      return true;
    }
    case Op::BUILD_MAP: {
      std::vector<nb::object> kv = pop_n(fr, static_cast<size_t>(2 * in.arg));
      nb::object d = fresh(checked(PyDict_New()));
      for (size_t i = 0; i < kv.size(); i += 2) {
        if (PyDict_SetItem(d.ptr(), kv[i].ptr(), kv[i + 1].ptr()) < 0) throw nb::python_error();
      }
      st.push_back(d);
      return true;
    }
    case Op::BUILD_CONST_KEY_MAP: {
      nb::object keys = pop(fr);
      std::vector<nb::object> values = pop_n(fr, static_cast<size_t>(in.arg));
      nb::object d = fresh(checked(PyDict_New()));
      for (size_t i = 0; i < values.size(); ++i) {
        if (PyDict_SetItem(d.ptr(), PyTuple_GET_ITEM(keys.ptr(), static_cast<Py_ssize_t>(i)),
                           values[i].ptr()) < 0) {
          throw nb::python_error();
        }
      }
      st.push_back(d);
      return true;
    }
    case Op::BUILD_STRING: {
      std::vector<nb::object> parts = pop_n(fr, static_cast<size_t>(in.arg));
      nb::object tuple = checked(PyTuple_New(static_cast<Py_ssize_t>(parts.size())));
      for (size_t i = 0; i < parts.size(); ++i) {
        PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(i), parts[i].release().ptr());
      }
      nb::object empty = checked(PyUnicode_FromString(""));
      st.push_back(checked(PyUnicode_Join(empty.ptr(), tuple.ptr())));
      return true;
    }
    case Op::LIST_APPEND:
    case Op::SET_ADD:
    case Op::LIST_EXTEND:
    case Op::SET_UPDATE:
    case Op::DICT_UPDATE:
    case Op::DICT_MERGE: {
      nb::object v = pop(fr);
      nb::handle target = peek(fr, static_cast<size_t>(in.arg));
      int r = 0;
      switch (in.op) {
        case Op::LIST_APPEND:
          r = PyList_Append(target.ptr(), v.ptr());
          break;
        case Op::SET_ADD:
          r = PySet_Add(target.ptr(), v.ptr());
          break;
        case Op::LIST_EXTEND: {
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
          break;
        }
        case Op::SET_UPDATE: {
          nb::object res = checked(PyObject_CallMethod(target.ptr(), "update", "O", v.ptr()));
          break;
        }
        default: {
          if (PyDict_CheckExact(v.ptr())) {
            r = PyDict_Update(target.ptr(), v.ptr());
            break;
          }
          // A program's dict subclass (**model_output): its keys, then each item as
          // obj[key] reads it (the class's __getitem__ inlined), as CPython merges a mapping.
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
          break;
        }
      }
      if (r < 0) throw nb::python_error();
      return true;
    }
    case Op::MAP_ADD: {
      nb::object value = pop(fr);
      nb::object key = pop(fr);
      if (PyDict_SetItem(peek(fr, static_cast<size_t>(in.arg)).ptr(), key.ptr(), value.ptr()) < 0) {
        throw nb::python_error();
      }
      return true;
    }
#if PY_MINOR_VERSION == 11
    case Op::LIST_TO_TUPLE: {
      nb::object list = pop(fr);
      st.push_back(checked(PyList_AsTuple(list.ptr())));
      return true;
    }
#endif
    case Op::UNPACK_SEQUENCE: {
      nb::object seq = pop(fr);
      std::vector<nb::object> items = unpack_items(seq);
      if (static_cast<int>(items.size()) != in.arg) {
        PyErr_Format(PyExc_ValueError, "cannot unpack %zd values into %d",
                     static_cast<Py_ssize_t>(items.size()), in.arg);
        throw nb::python_error();
      }
      for (auto it = items.rbegin(); it != items.rend(); ++it) st.push_back(*it);
      return true;
    }
    case Op::FORMAT_VALUE: {
      nb::object spec = (in.arg & 0x04) ? pop(fr) : nb::object();
      nb::object v = pop(fr);
      EMBER_UNSUPPORTED(!is_tensor(v) && is_plain_value(v))
          << "formatting a " << type_name_of(v) << " at " << location();
      int conv = in.arg & 0x03;
      if (conv == 1) v = checked(PyObject_Str(v.ptr()));
      if (conv == 2) v = checked(PyObject_Repr(v.ptr()));
      if (conv == 3) v = checked(PyObject_ASCII(v.ptr()));
      st.push_back(checked(PyObject_Format(v.ptr(), spec.is_valid() ? spec.ptr() : nullptr)));
      return true;
    }
    case Op::UNPACK_EX: {
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
      return true;
    }
    default:
      return false;
  }
}

}  // namespace ember::capture
