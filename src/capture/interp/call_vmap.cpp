/// \file
/// Calls of torch.vmap's wrappers (call_policy.cpp): the vmapped function inlined on functorch's
/// batched tensors (Note [vmap in the capture]).
#include <optional>
#include <string_view>
#include <vector>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

// Note [vmap in the capture]
// torch.vmap(func, in_dims, out_dims) returns a Python wrapper (torch/_functorch/apis.py) that
// enters a vmap level, wraps the batched arguments in functorch's BatchedTensors, calls func and
// takes the batch dimension out of its results. Run for real, the wrapper would run func (the
// program's code) unseen by the capture: no guards on what it reads, its side effects done once.
// So the interpreter does the wrapper's work itself: the level, _add_batch_dim and
// _remove_batch_dim run for real (on tracer tensors they record nothing: functorch's batching
// rules turn each op of func into ATen ops on the unbatched tensors, which the tracer records),
// and func is called through the interpreter like any call. transformers builds its masks so
// (a mask function vmapped over batch, head, query and key indices, under
// TransformGetItemToIndex, Note [torch's own torch-function modes]), as does associative_scan's
// generic mode. The forms captured: positional arguments, in_dims an int or one int or None per
// argument, out_dims an int, and results a tensor or a tuple of tensors; other forms are
// unsupported (the frame breaks or runs eagerly), as are chunked wrappers (chunk_size).

namespace {

/// The value of a function's free variable `name`, or an invalid object.
nb::object free_variable(PyObject* fn, std::string_view name) {
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
  PyObject* closure = PyFunction_GET_CLOSURE(fn);
  if (closure == nullptr) return {};
  nb::object names = nb::steal(PyCode_GetFreevars(code));
  if (!names.is_valid()) {
    PyErr_Clear();
    return {};
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.ptr()) && i < PyTuple_GET_SIZE(closure); ++i) {
    if (PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.ptr(), i)) != name) continue;
    PyObject* value = PyCell_GET(PyTuple_GET_ITEM(closure, i));
    return value != nullptr ? nb::borrow(value) : nb::object();
  }
  return {};
}

}  // namespace

bool is_vmapped(nb::handle callable) {
  PyObject* c = callable.ptr();
  if (!PyFunction_Check(c)) return false;
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(c));
  std::string_view file = PyUnicode_AsUTF8(code->co_filename);
  std::string_view qualname = PyUnicode_AsUTF8(code->co_qualname);
  return qualname == "vmap.<locals>.wrapped" && file.ends_with("torch/_functorch/apis.py");
}

nb::object Interpreter::call_vmapped(nb::handle callable, std::vector<nb::object> args,
                                     nb::handle kwnames) {
  PyObject* c = callable.ptr();
  nb::object func = free_variable(c, "func");
  nb::object in_dims = free_variable(c, "in_dims");
  nb::object out_dims = free_variable(c, "out_dims");
  nb::object randomness = free_variable(c, "randomness");
  EMBER_UNSUPPORTED(func.is_valid() && in_dims.is_valid() && out_dims.is_valid() &&
                    randomness.is_valid())
      << "a torch.vmap wrapper of another form (" << str_of(callable) << ") at " << location();
  EMBER_UNSUPPORTED(!kwnames.is_valid() || PyTuple_GET_SIZE(kwnames.ptr()) == 0)
      << "a vmapped function called with keyword arguments at " << location();
  EMBER_UNSUPPORTED(PyLong_CheckExact(out_dims.ptr()))
      << "vmap with out_dims=" << str_of(out_dims) << " (one int is captured) at " << location();
  const int64_t out_dim = PyLong_AsLongLong(out_dims.ptr());

  // One batch dimension (or none) per argument.
  std::vector<std::optional<int64_t>> dims(args.size());
  if (PyLong_CheckExact(in_dims.ptr())) {
    for (auto& d : dims) d = PyLong_AsLongLong(in_dims.ptr());
  } else {
    const bool seq = PyTuple_Check(in_dims.ptr()) || PyList_Check(in_dims.ptr());
    EMBER_UNSUPPORTED(seq && PySequence_Size(in_dims.ptr()) == static_cast<Py_ssize_t>(args.size()))
        << "vmap with in_dims=" << str_of(in_dims) << " for " << args.size() << " arguments at "
        << location();
    for (size_t i = 0; i < args.size(); ++i) {
      nb::object d = checked(PySequence_GetItem(in_dims.ptr(), static_cast<Py_ssize_t>(i)));
      if (d.is_none()) continue;
      EMBER_UNSUPPORTED(PyLong_CheckExact(d.ptr()))
          << "vmap with in_dims=" << str_of(in_dims) << " (ints and None are captured) at "
          << location();
      dims[i] = PyLong_AsLongLong(d.ptr());
    }
  }
  int64_t batch = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!dims[i].has_value()) continue;
    EMBER_UNSUPPORTED(is_tensor(args[i]))
        << "vmap over a " << type_name_of(args[i]) << " (tensors are captured) at " << location();
    nb::object ndim = checked(PyObject_CallMethod(args[i].ptr(), "dim", nullptr));
    const int64_t rank = PyLong_AsLongLong(ndim.ptr());
    int64_t& d = *dims[i];
    if (d < 0) d += rank;
    EMBER_UNSUPPORTED(d >= 0 && d < rank)
        << "vmap over dimension " << *dims[i] << " of a " << rank << "-d tensor at " << location();
    nb::object size = checked(PyObject_CallMethod(args[i].ptr(), "size", "L", d));
    nb::object n = checked(PyNumber_Long(size.ptr()));  // a size symbol is specialized
    const int64_t b = PyLong_AsLongLong(n.ptr());
    EMBER_UNSUPPORTED(batch < 0 || batch == b)
        << "vmap over batch sizes " << batch << " and " << b << " at " << location();
    batch = b;
  }
  EMBER_UNSUPPORTED(batch >= 0) << "vmap with no batched tensor argument at " << location();

  static PyObject* lazy_load = imported("torch._functorch.vmap", "lazy_load_decompositions");
  static PyObject* increment = imported("torch._C._functorch", "_vmap_increment_nesting");
  static PyObject* decrement = imported("torch._C._functorch", "_vmap_decrement_nesting");
  static PyObject* add_batch_dim = imported("torch._C._functorch", "_add_batch_dim");
  static PyObject* remove_batch_dim = imported("torch._C._functorch", "_remove_batch_dim");
  EMBER_INTERNAL_ASSERT(lazy_load && increment && decrement && add_batch_dim && remove_batch_dim)
      << "torch._functorch's vmap functions are missing";
  checked(PyObject_CallNoArgs(lazy_load));
  nb::object level = checked(
      PyObject_CallFunction(increment, "LO", static_cast<long long>(batch), randomness.ptr()));
  struct Exit {  // the level is left however func returns or raises
    PyObject* decrement;
    ~Exit() {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyObject* r = PyObject_CallNoArgs(decrement);
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
      PyErr_Restore(type, value, tb);
    }
  } exit{decrement};

  std::vector<nb::object> batched;
  batched.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    batched.push_back(!dims[i].has_value() ? args[i]
                                           : checked(PyObject_CallFunction(
                                                 add_batch_dim, "OLO", args[i].ptr(),
                                                 static_cast<long long>(*dims[i]), level.ptr())));
  }
  nb::object out = call(func, std::move(batched), nb::handle());
  auto unbatch = [&](nb::handle o) {
    EMBER_UNSUPPORTED(is_tensor(o)) << "a vmapped function that returns a " << type_name_of(o)
                                    << " (tensors are captured) at " << location();
    return checked(PyObject_CallFunction(remove_batch_dim, "OOLL", o.ptr(), level.ptr(),
                                         static_cast<long long>(batch),
                                         static_cast<long long>(out_dim)));
  };
  if (!PyTuple_Check(out.ptr())) return unbatch(out);
  const Py_ssize_t n = PyTuple_GET_SIZE(out.ptr());
  nb::object results = checked(PyTuple_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyTuple_SET_ITEM(results.ptr(), i, unbatch(PyTuple_GET_ITEM(out.ptr(), i)).release().ptr());
  }
  return results;
}

}  // namespace ember::capture
