#include "capture/guards/guards.h"

#include "capture/guards/plain_data.h"

#include <nanobind/stl/string.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <sstream>
#include <string_view>

#include "runtime/executor.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.device = t.device();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.requires_grad = t.requires_grad();
  m.keys = t.key_set();
  return m;
}

bool tensor_matches(PyObject* obj, const TensorMeta& m) {
  if (!THPVariable_CheckExact(obj) && !THPVariable_Check(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.scalar_type() != m.dtype || t.device() != m.device) return false;
  if (t.requires_grad() != m.requires_grad || t.key_set() != m.keys) return false;
  c10::IntArrayRef sizes = t.sizes();
  c10::IntArrayRef strides = t.strides();
  if (sizes.size() != m.sizes.size()) return false;
  if (!m.stride_order.empty()) {
    // Dynamic dims: any size of at least 2, dense strides in the traced order.
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (m.sizes[i] < 0 ? sizes[i] < 2 : sizes[i] != m.sizes[i]) return false;
    }
    int64_t acc = 1;
    for (size_t k = m.stride_order.size(); k-- > 0;) {
      auto d = static_cast<size_t>(m.stride_order[k]);
      if (sizes[d] != 1 && strides[d] != acc) return false;
      acc *= std::max<int64_t>(sizes[d], 1);
    }
    return true;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != m.sizes[i]) return false;
    // Strides of size-1 dimensions do not change the layout.
    if (sizes[i] != 1 && strides[i] != m.strides[i]) return false;
  }
  return true;
}

bool size_relations_hold(const Guard& g, const std::vector<nb::object>& values) {
  sym::Bindings b;
  for (size_t id = 0; id < g.symbol_at.size(); ++id) {
    PyObject* v = values[static_cast<size_t>(g.symbol_at[id].first)].ptr();
    if (v == nullptr || !THPVariable_Check(v)) return false;
    const at::Tensor& t = THPVariable_Unpack(v);
    if (g.symbol_at[id].second >= t.dim()) return false;
    b.emplace(static_cast<sym::SymbolId>(id), t.size(g.symbol_at[id].second));
  }
  for (const sym::SizeGuard& sg : g.size_guards) {
    if (!sym::guard_holds(sg, b)) return false;
  }
  return true;
}

std::string short_repr(PyObject* o) {
  nb::object r = nb::steal(PyObject_Repr(o));
  if (!r.is_valid()) {
    PyErr_Clear();
    return "<?>";
  }
  std::string s = nb::cast<std::string>(r);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

/// The object an IdMatch guard names (borrowed), or nullptr once a weakly held one is gone.
PyObject* id_target(const Guard& g) {
  return g.weak ? weak_target(g.expected.ptr()) : g.expected.ptr();
}

std::string meta_text(const TensorMeta& m) {
  std::ostringstream os;
  os << c10::toString(m.dtype) << " " << m.device << " sizes=" << c10::IntArrayRef(m.sizes);
  if (m.stride_order.empty()) {
    os << " strides=" << c10::IntArrayRef(m.strides);
  } else {
    os << " (-1: any size >= 2) dense in dim order " << c10::IntArrayRef(m.stride_order);
  }
  os << " requires_grad=" << m.requires_grad;
  return os.str();
}

}  // namespace

PyObject* weak_target(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* target = nullptr;
  if (PyWeakref_GetRef(ref, &target) != 1) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(target);
  return target;
#else
  PyObject* target = PyWeakref_GetObject(ref);
  return target == Py_None ? nullptr : target;
#endif
}

namespace {

PyObject* interned(const char* s) {
  return PyUnicode_InternFromString(s);  // kept for the process
}

/// torch's immutable value types: compared by value, never by identity.
bool is_torch_value_type(PyTypeObject* t) {
  std::string_view n(t->tp_name);
  return n == "torch.device" || n == "torch.dtype" || n == "torch.layout" ||
         n == "torch.memory_format" || n == "torch.Size";
}

/// The field names of a frozen dataclass's type (a tuple), or nullptr when `t` is not one.
PyObject* frozen_dataclass_fields(PyTypeObject* t) {
  if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE)) return nullptr;
  static PyObject* params_name = interned("__dataclass_params__");
  static PyObject* fields_name = interned("__dataclass_fields__");
  static PyObject* frozen_name = interned("frozen");
  PyObject* params = _PyType_Lookup(t, params_name);
  PyObject* fields = _PyType_Lookup(t, fields_name);
  if (params == nullptr || fields == nullptr || !PyDict_Check(fields)) return nullptr;
  nb::object frozen = nb::steal(PyObject_GetAttr(params, frozen_name));
  if (!frozen.is_valid()) {
    PyErr_Clear();
    return nullptr;
  }
  if (frozen.ptr() != Py_True) return nullptr;
  // Fields proper (not ClassVar or InitVar pseudo-fields): those with _field_type _FIELD.
  static PyObject* field_type_name = interned("_field_type");
  static PyObject* field_marker = [] {
    nb::object m = nb::steal(PyImport_ImportModule("dataclasses"));
    PyObject* f = m.is_valid() ? PyObject_GetAttrString(m.ptr(), "_FIELD") : nullptr;
    if (f == nullptr) PyErr_Clear();
    return f;  // kept for the process
  }();
  nb::object names = nb::steal(PyList_New(0));
  PyObject* key = nullptr;
  PyObject* field = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(fields, &pos, &key, &field)) {
    nb::object kind = nb::steal(PyObject_GetAttr(field, field_type_name));
    if (!kind.is_valid()) PyErr_Clear();
    if (field_marker != nullptr && kind.ptr() != field_marker) continue;
    if (PyList_Append(names.ptr(), key) < 0) {
      PyErr_Clear();
      return nullptr;
    }
  }
  return PyList_AsTuple(names.ptr());  // new reference
}

/// Whether `a` and `b` (of one frozen dataclass type with fields `names`) have equal fields.
bool fields_equal(PyObject* a, PyObject* b, PyObject* names) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
    PyObject* name = PyTuple_GET_ITEM(names, i);
    nb::object x = nb::steal(PyObject_GetAttr(a, name));
    nb::object y = nb::steal(PyObject_GetAttr(b, name));
    if (!x.is_valid() || !y.is_valid()) {
      PyErr_Clear();
      return false;
    }
    if (!values_equal(x.ptr(), y.ptr())) return false;
  }
  return true;
}

}  // namespace

namespace {

/// numpy.generic once numpy is imported (a numpy scalar exists only then), else nullptr.
PyObject* numpy_generic() {
  static PyObject* generic = nullptr;
  if (generic == nullptr) {
    nb::object numpy = nb::steal(PyImport_GetModule(nb::str("numpy").ptr()));
    if (!numpy.is_valid()) {
      PyErr_Clear();
      return nullptr;
    }
    generic = PyObject_GetAttrString(numpy.ptr(), "generic");  // kept for the process
    if (generic == nullptr) PyErr_Clear();
  }
  return generic;
}

}  // namespace

bool is_numpy_scalar_type(PyObject* t) {
  if (!PyType_Check(t) ||
      std::string_view(reinterpret_cast<PyTypeObject*>(t)->tp_name).substr(0, 6) != "numpy.") {
    return false;
  }
  PyObject* generic = numpy_generic();
  return generic != nullptr && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(t),
                                                reinterpret_cast<PyTypeObject*>(generic));
}

bool is_numpy_scalar(PyObject* v) {
  return is_numpy_scalar_type(reinterpret_cast<PyObject*>(Py_TYPE(v))) &&
         (PyNumber_Check(v) || PyBool_Check(v));
}

bool is_enum_member(nb::handle v) {
  static PyObject* enum_type = [] {
    nb::object m = nb::steal(PyImport_ImportModule("enum"));
    PyObject* t = m.is_valid() ? PyObject_GetAttrString(m.ptr(), "Enum") : nullptr;
    if (t == nullptr) PyErr_Clear();
    return t;  // kept for the process
  }();
  return enum_type != nullptr &&
         PyObject_TypeCheck(v.ptr(), reinterpret_cast<PyTypeObject*>(enum_type));
}

bool values_equal(PyObject* a, PyObject* b) {
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  if (a == b) return true;
  if (nb::object names = nb::steal(frozen_dataclass_fields(Py_TYPE(a))); names.is_valid()) {
    return fields_equal(a, b, names.ptr());
  }
  if (PyErr_Occurred()) PyErr_Clear();
  if (PyTuple_CheckExact(a)) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (PyTuple_GET_SIZE(b) != n) return false;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!values_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i))) return false;
    }
    return true;
  }
  if (PyFloat_CheckExact(a)) {
    // NaN == NaN for guards; 0.0 and -0.0 differ.
    double x = PyFloat_AS_DOUBLE(a);
    double y = PyFloat_AS_DOUBLE(b);
    if (x != x && y != y) return true;
    return x == y && std::signbit(x) == std::signbit(y);
  }
  int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  return r == 1;
}

namespace {

/// "0", or "1 (BFloat16)": an autocast state as guard text.
std::string autocast_text(bool on, c10::ScalarType dtype) {
  return on ? std::string("1 (") + c10::toString(dtype) + ")" : std::string("0");
}

}  // namespace

GlobalState GlobalState::current() {
  GlobalState s;
  s.grad_enabled = at::GradMode::is_enabled();
  s.autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
  s.autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
  if (s.autocast_cpu) s.autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  if (s.autocast_cuda) s.autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  s.default_dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  at::Context& ctx = at::globalContext();
  s.deterministic = ctx.deterministicAlgorithms();
  s.deterministic_warn_only = ctx.deterministicAlgorithmsWarnOnly();
  s.matmul_precision = static_cast<int8_t>(ctx.float32MatmulPrecision());
  s.tf32_cublas = ctx.allowTF32CuBLAS();
  s.tf32_cudnn = ctx.allowTF32CuDNN();
  s.fp16_reduction = static_cast<int8_t>(ctx.allowFP16ReductionCuBLAS());
  s.bf16_reduction = static_cast<int8_t>(ctx.allowBF16ReductionCuBLAS());
  s.num_threads = at::get_num_threads();
  s.torch_function_modes = at::impl::PythonTorchFunctionTLS::stack_len();
  s.torch_function_disabled =
      static_cast<int8_t>(at::impl::PythonTorchFunctionTLS::get_disabled_state());
  s.dispatch_modes = c10::impl::TorchDispatchModeTLS::stack_len();
  return s;
}

std::vector<std::pair<std::string, std::string>> GlobalState::fields() const {
  auto b = [](bool v) { return std::string(v ? "True" : "False"); };
  auto n = [](int64_t v) { return std::to_string(v); };
  return {
      {"grad_enabled", b(grad_enabled)},
      {"autocast_cpu", autocast_text(autocast_cpu, autocast_cpu_dtype)},
      {"autocast_cuda", autocast_text(autocast_cuda, autocast_cuda_dtype)},
      {"default_dtype", c10::toString(default_dtype)},
      {"deterministic_algorithms", b(deterministic)},
      {"deterministic_warn_only", b(deterministic_warn_only)},
      {"float32_matmul_precision", n(matmul_precision)},
      {"cuda.matmul.allow_tf32", b(tf32_cublas)},
      {"cudnn.allow_tf32", b(tf32_cudnn)},
      {"fp16_reduction", n(fp16_reduction)},
      {"bf16_reduction", n(bf16_reduction)},
      {"num_threads", n(num_threads)},
      {"torch_function_modes", n(torch_function_modes)},
      {"torch_function_disabled", n(torch_function_disabled)},
      {"dispatch_modes", n(dispatch_modes)},
  };
}

std::string GlobalState::diff(const GlobalState& now) const {
  auto before = fields();
  auto after = now.fields();
  std::string out;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i].second == after[i].second) continue;
    if (!out.empty()) out += ", ";
    out += before[i].first + " " + before[i].second + " -> " + after[i].second;
  }
  return out;
}

bool is_guardable_constant(PyObject* obj) {
  if (obj == Py_None || PyBool_Check(obj) || PyLong_CheckExact(obj) || PyFloat_CheckExact(obj) ||
      PyUnicode_CheckExact(obj) || PyBytes_CheckExact(obj) || obj == Py_Ellipsis) {
    return true;
  }
  if (PyTuple_CheckExact(obj)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      if (!is_guardable_constant(PyTuple_GET_ITEM(obj, i))) return false;
    }
    return true;
  }
  if (std::string_view(Py_TYPE(obj)->tp_name) == "torch.Size") {
    // A shape of ints; one holding symbolic sizes (torch.SymInt) is no constant.
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      if (!PyLong_CheckExact(PyTuple_GET_ITEM(obj, i))) return false;
    }
    return true;
  }
  if (is_torch_value_type(Py_TYPE(obj)) || is_enum_member(obj) || is_numpy_scalar(obj)) {
    return true;
  }
  nb::object names = nb::steal(frozen_dataclass_fields(Py_TYPE(obj)));
  if (!names.is_valid()) {
    PyErr_Clear();
    return false;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.ptr()); ++i) {
    nb::object field = nb::steal(PyObject_GetAttr(obj, PyTuple_GET_ITEM(names.ptr(), i)));
    if (!field.is_valid()) {
      PyErr_Clear();
      return false;
    }
    if (!is_guardable_constant(field.ptr())) return false;
  }
  return true;
}

void GuardSet::add_tensor(int source, PyObject* tensor, const std::vector<int64_t>& dynamic_dims) {
  EMBER_INTERNAL_ASSERT(THPVariable_Check(tensor)) << "a tensor guard on a non-tensor";
  Guard g;
  g.kind = GuardKind::TensorMatch;
  g.source = source;
  const at::Tensor& t = THPVariable_Unpack(tensor);
  g.tensor = meta_of(t);
  bool any = false;
  for (int64_t d : dynamic_dims) {
    if (d < 0) d += t.dim();
    if (d < 0 || d >= t.dim() || t.size(d) < 2) continue;  // 0 and 1 stay specialized
    g.tensor.sizes[static_cast<size_t>(d)] = -1;
    any = true;
  }
  if (any) {
    // The traced order: by decreasing stride, ties in dim order (graph::dense_strides_like).
    std::vector<int64_t> order(static_cast<size_t>(t.dim()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
    g.tensor.stride_order = std::move(order);
  }
  guards_.push_back(std::move(g));
}

void GuardSet::add_size_relations(std::vector<std::pair<int, int64_t>> symbol_at,
                                  std::vector<sym::SizeGuard> size_guards) {
  if (size_guards.empty()) return;
  Guard g;
  g.kind = GuardKind::SizeRelations;
  g.source = symbol_at.empty() ? 0 : symbol_at[0].first;
  g.symbol_at = std::move(symbol_at);
  g.size_guards = std::move(size_guards);
  guards_.push_back(std::move(g));
}

void GuardSet::add_object(GuardKind kind, int source, PyObject* obj) {
  Guard g;
  g.kind = kind;
  g.source = source;
  g.expected = nb::borrow(obj);
  guards_.push_back(std::move(g));
}

void GuardSet::add_id(int source, PyObject* obj) {
  Guard g;
  g.kind = GuardKind::IdMatch;
  g.source = source;
  g.id = obj;
  if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj))) {
    g.expected = nb::steal(PyWeakref_NewRef(obj, nullptr));
    g.weak = g.expected.is_valid();
    if (!g.weak) PyErr_Clear();
  }
  if (!g.weak) g.expected = nb::borrow(obj);
  guards_.push_back(std::move(g));
}

void GuardSet::add_len(int source, PyObject* container) {
  Py_ssize_t n = PyObject_Length(container);
  if (n < 0) {
    PyErr_Clear();
    EMBER_UNSUPPORTED(false) << "the length of a " << Py_TYPE(container)->tp_name
                             << " can not be read";
  }
  Guard g;
  g.kind = GuardKind::Len;
  g.source = source;
  g.expected = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(container)));
  g.length = n;
  guards_.push_back(std::move(g));
}

void GuardSet::add_aliasing(int source, std::vector<int> others,
                            const std::vector<at::Tensor>& tensors) {
  EMBER_INTERNAL_ASSERT(tensors.size() == others.size() + 1)
      << "an aliasing guard needs the tensor and one per other input";
  Guard g;
  g.kind = GuardKind::Aliasing;
  g.source = source;
  for (size_t i = 0; i < others.size(); ++i) {
    g.shares.push_back(runtime::memory_overlaps(tensors[0], tensors[i + 1]) ? 1 : 0);
  }
  g.others = std::move(others);
  guards_.push_back(std::move(g));
}

void GuardSet::add_same(int source, int other) {
  Guard g;
  g.kind = GuardKind::Same;
  g.source = source;
  g.other = other;
  guards_.push_back(std::move(g));
}

namespace {

/// Whether `values[o]` overlaps `t` for each other source `o` of Aliasing guard `g` exactly
/// where it did when compiling; `first_change`, when given, gets the first other that differs.
bool aliasing_matches(const Guard& g, const std::vector<nb::object>& values,
                      size_t* first_change = nullptr) {
  PyObject* v = values[static_cast<size_t>(g.source)].ptr();
  if (!THPVariable_Check(v)) return false;
  const at::Tensor& t = THPVariable_Unpack(v);
  for (size_t i = 0; i < g.others.size(); ++i) {
    PyObject* o = values[static_cast<size_t>(g.others[i])].ptr();
    const bool shares =
        o != nullptr && THPVariable_Check(o) && runtime::memory_overlaps(t, THPVariable_Unpack(o));
    if (shares != (g.shares[i] != 0)) {
      if (first_change != nullptr) *first_change = i;
      return false;
    }
  }
  return true;
}

}  // namespace

bool GuardSet::passes(const Guard& g, const std::vector<nb::object>& values) const {
  PyObject* v = values[static_cast<size_t>(g.source)].ptr();
  if (v == nullptr) return false;
  switch (g.kind) {
    case GuardKind::TensorMatch:
      return tensor_matches(v, g.tensor);
    case GuardKind::IdMatch:
      return v == g.id && (!g.weak || id_target(g) == v);
    case GuardKind::TypeMatch:
      return reinterpret_cast<PyObject*>(Py_TYPE(v)) == g.expected.ptr();
    case GuardKind::Equals:
      return values_equal(v, g.expected.ptr());
    case GuardKind::Len: {
      if (reinterpret_cast<PyObject*>(Py_TYPE(v)) != g.expected.ptr()) return false;
      Py_ssize_t n = PyObject_Length(v);
      if (n < 0) {
        PyErr_Clear();
        return false;
      }
      return n == g.length;
    }
    case GuardKind::Same:
      return v == values[static_cast<size_t>(g.other)].ptr();
    case GuardKind::StateEquals:
      return plain_data_equal(v, g.expected.ptr());
    case GuardKind::Aliasing:
      return aliasing_matches(g, values);
    case GuardKind::SizeRelations:
      return size_relations_hold(g, values);
  }
  return false;
}

bool GuardSet::check(const std::vector<nb::object>& values) const {
  if (!(GlobalState::current() == state_)) return false;
  for (const Guard& g : guards_) {
    if (!passes(g, values)) return false;
  }
  return true;
}

std::string GuardSet::first_failure(const std::vector<nb::object>& values,
                                    const SourceTable& sources) const {
  GlobalState now = GlobalState::current();
  if (!(now == state_)) return "global state: " + state_.diff(now);
  for (const Guard& g : guards_) {
    if (passes(g, values)) continue;
    std::string name = sources.name(g.source);
    PyObject* v = values[static_cast<size_t>(g.source)].ptr();
    if (v == nullptr) return name + " could not be read";
    switch (g.kind) {
      case GuardKind::TensorMatch: {
        std::string now_text = "not a tensor";
        if (THPVariable_Check(v)) now_text = meta_text(meta_of(THPVariable_Unpack(v)));
        return name + ": expected a tensor " + meta_text(g.tensor) + ", got " + now_text;
      }
      case GuardKind::IdMatch: {
        PyObject* target = id_target(g);
        return name + " is not the object seen when compiling (" +
               (target != nullptr ? short_repr(target) : std::string("since freed")) + ")";
      }
      case GuardKind::TypeMatch:
        return "type(" + name + ") is " +
               reinterpret_cast<PyTypeObject*>(g.expected.ptr())->tp_name + " failed (now " +
               Py_TYPE(v)->tp_name + ")";
      case GuardKind::Equals:
        return name + " == " + short_repr(g.expected.ptr()) + " failed (now " + short_repr(v) + ")";
      case GuardKind::Len:
        return "len(" + name + ") == " + std::to_string(g.length) + " failed";
      case GuardKind::Same:
        return name + " is not " + sources.name(g.other);
      case GuardKind::StateEquals:
        return "the state of " + name + " changed since compiling";
      case GuardKind::SizeRelations: {
        std::string text;
        for (const sym::SizeGuard& sg : g.size_guards)
          text += (text.empty() ? "" : ", ") + sym::print(sg);
        return "a size relation the graph relied on no longer holds (" + text + ")";
      }
      case GuardKind::Aliasing: {
        size_t i = 0;
        if (!THPVariable_Check(v)) return name + " is not a tensor";
        aliasing_matches(g, values, &i);
        return name + (g.shares[i] != 0 ? " no longer shares" : " now shares") + " memory with " +
               sources.name(g.others[i]) + " (the graph mutates " + name + ")";
      }
    }
  }
  return {};
}

std::string GuardSet::describe(const SourceTable& sources) const {
  std::ostringstream os;
  os << "global state:";
  for (const auto& [field, value] : state_.fields()) os << " " << field << "=" << value;
  os << "\n";
  for (const Guard& g : guards_) {
    std::string name = sources.name(g.source);
    switch (g.kind) {
      case GuardKind::TensorMatch:
        os << "TENSOR_MATCH " << name << ": " << meta_text(g.tensor) << "\n";
        break;
      case GuardKind::IdMatch: {
        PyObject* target = id_target(g);
        os << "ID_MATCH " << name << " is "
           << (target != nullptr ? short_repr(target) : std::string("<freed>")) << "\n";
        break;
      }
      case GuardKind::TypeMatch:
        os << "TYPE_MATCH " << name << ": "
           << reinterpret_cast<PyTypeObject*>(g.expected.ptr())->tp_name << "\n";
        break;
      case GuardKind::Equals:
        os << "EQUALS " << name << " == " << short_repr(g.expected.ptr()) << "\n";
        break;
      case GuardKind::Len:
        os << "LEN " << name << ": " << reinterpret_cast<PyTypeObject*>(g.expected.ptr())->tp_name
           << " of length " << g.length << "\n";
        break;
      case GuardKind::Same:
        os << "SAME " << name << " is " << sources.name(g.other) << "\n";
        break;
      case GuardKind::StateEquals:
        os << "STATE_EQUALS " << name << " (a " << Py_TYPE(g.expected.ptr())->tp_name
           << " and everything it holds)\n";
        break;
      case GuardKind::SizeRelations: {
        os << "SIZE_RELATIONS";
        for (size_t id = 0; id < g.symbol_at.size(); ++id) {
          os << (id ? ", " : " ") << "s" << id << " = " << sources.name(g.symbol_at[id].first)
             << ".size(" << g.symbol_at[id].second << ")";
        }
        os << ":";
        for (const sym::SizeGuard& sg : g.size_guards) os << " " << sym::print(sg) << ";";
        os << "\n";
        break;
      }
      case GuardKind::Aliasing: {
        os << "ALIASING " << name << " (mutated) overlaps";
        bool any = false;
        for (size_t i = 0; i < g.others.size(); ++i) {
          if (g.shares[i] == 0) continue;
          os << (any ? ", " : " ") << sources.name(g.others[i]);
          any = true;
        }
        os << (any ? "" : " no other input") << "\n";
        break;
      }
    }
  }
  return os.str();
}

}  // namespace ember::capture
