/// \file
/// Library code in calls (call_policy.cpp): which code is library code (runs for real,
/// runs_for_real: torch, math, operator, a few pure standard-library functions; never what
/// changes global state or optimizer state) and which library code is inlined all the same
/// (torch.optim's, the abstract collections' mixins); and the library calls the interpreter
/// handles itself: Dynamo's disabled wrappers of optimizer methods, an LR scheduler's patched
/// `step`, dict views of dicts from outside the frame, torch.set_grad_enabled,
/// torch.utils.checkpoint (its call, inlined) and the higher-order ops (torch.cond, ...: the
/// frame runs unhooked) (docs/design/capture.md).
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

/// torch functions that change global state or leave the program: never run at capture time.
bool is_denied_torch_function(std::string_view name) {
  static constexpr std::string_view kDenied[] = {"manual_seed",
                                                 "seed",
                                                 "set_grad_enabled",
                                                 "_set_grad_enabled",
                                                 "set_default_dtype",
                                                 "set_default_device",
                                                 "use_deterministic_algorithms",
                                                 "backward",
                                                 "grad",
                                                 "compile",
                                                 "save",
                                                 "load",
                                                 "set_num_threads",
                                                 "set_printoptions",
                                                 "register_buffer",
                                                 "register_parameter",
                                                 "add_module",
                                                 "register_module",
                                                 "requires_grad_",
                                                 "retain_grad",
                                                 "register_hook",
                                                 "tolist",
                                                 "numpy",
                                                 "item",
                                                 "_assert_async",
                                                 "cuda",
                                                 "synchronize"};
  for (std::string_view d : kDenied) {
    if (name == d || (name.size() > d.size() && name[name.size() - d.size() - 1] == '.' &&
                      name.substr(name.size() - d.size()) == d)) {
      return true;
    }
  }
  return false;
}

PyObject* torch_class(const char* module, const char* name) {
  PyObject* m = PyImport_ImportModule(module);
  PyObject* t = m != nullptr ? PyObject_GetAttrString(m, name) : nullptr;
  Py_XDECREF(m);
  if (t == nullptr) PyErr_Clear();
  return t;  // kept for the process
}

bool is_stateful_torch_object(nb::handle v) {
  static PyObject* optimizer = torch_class("torch.optim", "Optimizer");
  static PyObject* scheduler = torch_class("torch.optim.lr_scheduler", "LRScheduler");
  static PyObject* scaler = torch_class("torch.amp", "GradScaler");
  for (PyObject* t : {optimizer, scheduler, scaler}) {
    if (t == nullptr) continue;
    int r = PyObject_IsInstance(v.ptr(), t);
    if (r < 0) throw nb::python_error();
    if (r == 1) return true;
  }
  return false;
}

namespace {

bool is_function_ctx(nb::handle v) {
  static PyObject* ctx = torch_class("torch.autograd.function", "FunctionCtx");
  if (ctx == nullptr) return false;
  int r = PyObject_IsInstance(v.ptr(), ctx);
  if (r < 0) throw nb::python_error();
  return r == 1;
}

}  // namespace

bool is_function_ctx_recorder(nb::handle self, nb::handle fn) {
  if (!PyFunction_Check(fn.ptr()) || !is_function_ctx(self)) return false;
  const std::string name = name_of(fn);
  return module_of(fn) == "torch.autograd.function" &&
         (name == "FunctionCtx.save_for_backward" || name == "FunctionCtx.save_for_forward" ||
          name == "FunctionCtx.mark_dirty" || name == "FunctionCtx.mark_non_differentiable" ||
          name == "FunctionCtx.set_materialize_grads");
}

bool is_function_ctx_record(nb::handle obj, PyObject* name) {
  if (!PyUnicode_Check(name) || !is_function_ctx(obj)) return false;
  const std::string_view n = PyUnicode_AsUTF8(name);
  return n == "to_save" || n == "saved_for_forward" || n == "dirty_tensors" ||
         n == "non_differentiable" || n == "materialize_grads";
}

namespace {

/// Functions of the standard library that read their arguments and return a new value, with
/// no side effect and no call into program code: they run for real.
bool is_pure_library_function(std::string_view module, std::string_view name) {
  if (module == "contextlib") {
    return name == "nullcontext" || name == "nullcontext.__init__" ||
           name == "nullcontext.__enter__" || name == "nullcontext.__exit__";
  }
  if (module == "dataclasses") return name == "fields" || name == "is_dataclass";
  if (module == "inspect") {
    return name == "signature" || name == "isclass" || name == "isfunction" || name == "ismethod";
  }
  if (module == "typing") return name == "cast" || name == "get_origin" || name == "get_args";
  return false;
}
}  // namespace

bool Interpreter::runs_for_real(nb::handle callable) const {
  std::string module = module_of(callable);
  if (is_pure_library_function(module, name_of(callable))) return true;
  // torch.optim's functions change the optimizers' state (an LR scheduler's wrapper of `step`
  // runs the step): never at capture time.
  if (module == "torch.optim" || starts_with(module, "torch.optim.") ||
      module == "torch.amp.grad_scaler") {
    return false;
  }
  if (!(module == "torch" || starts_with(module, "torch.") || module == "math" ||
        module == "_operator" || module == "operator")) {
    return false;
  }
  // Functions that read or write what tracing does not see: parameters' .grad (clip_grad_norm_
  // on a list of parameters saw no gradients on their tracer tensors and clipped nothing) and
  // .data (vector_to_parameters).
  if (starts_with(module, "torch.nn.utils.clip_grad") ||
      starts_with(module, "torch.nn.utils.convert_parameters")) {
    return false;
  }
  return !is_denied_torch_function(name_of(callable));
}

bool Interpreter::is_library_code(PyCodeObject* code) const {
  if (!in_files(code, options_.library_prefixes)) return false;
  // The abstract collections' mixin methods (Mapping.__contains__, get, ...) are inlined: they
  // only call the program's own special methods.
  std::string_view file = PyUnicode_AsUTF8(code->co_filename);
  constexpr std::string_view kAbc = "_collections_abc";
  size_t at = file.find(kAbc);
  if (at != std::string_view::npos &&
      (file.substr(at) == "_collections_abc.py" || file.substr(at) == "_collections_abc>")) {
    return false;
  }
  // collections.UserDict and UserList: plain classes over a dict or list in `self.data`, made
  // and used as the program's own (transformers' shared key-value states).
  constexpr std::string_view kCollections = "collections/__init__.py";
  if (file.size() >= kCollections.size() &&
      file.substr(file.size() - kCollections.size()) == kCollections) {
    std::string_view qualname = PyUnicode_AsUTF8(code->co_qualname);
    return !(starts_with(qualname, "UserDict.") || starts_with(qualname, "UserList."));
  }
  return true;
}

bool Interpreter::is_inlined_library_code(PyCodeObject* code) const {
  static const std::string torch_dir = [] {
    nb::object m = checked(PyImport_ImportModule("torch"));
    std::string file = nb::cast<std::string>(checked(PyObject_GetAttrString(m.ptr(), "__file__")));
    return file.substr(0, file.find_last_of("/\\") + 1);
  }();
  std::string_view file = PyUnicode_AsUTF8(code->co_filename);
  if (!starts_with(file, torch_dir)) return false;
  std::string_view rest = file.substr(torch_dir.size());
  // The wrapper of a function decorated with a grad-mode context manager (@torch.no_grad(),
  // @torch.enable_grad(), @torch.inference_mode()): `with ctx_factory(): return func(...)`,
  // so the decorated function is captured under its context, as Dynamo does.
  if (rest == "utils/_contextlib.py") return true;
  // Functional collectives (torch.distributed._functional_collectives: all_reduce,
  // all_gather_tensor, reduce_scatter_tensor, ...): followed, so that their "are we tracing"
  // test (torch.compiler.is_dynamo_compiling, true in a capture) puts the collective's
  // wait_tensor in the graph, as under Dynamo. Called for real, each returned an
  // AsyncCollectiveTensor (a wrapper subclass without storage) from an op whose meta kernel gives
  // a plain tensor.
  if (rest == "distributed/_functional_collectives.py") return true;
  if (!starts_with(rest, "optim/")) return false;
  rest = rest.substr(6);
  return rest != "lr_scheduler.py" && rest != "swa_utils.py";
}

bool Interpreter::inlines(PyObject* fn) const {
  if (!PyFunction_Check(fn)) return false;
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
  return !is_library_code(code) || is_inlined_library_code(code);
}

nb::object Interpreter::dynamo_disabled_original(nb::handle fn) {
  if (!PyFunction_Check(fn.ptr()) || inlines(fn.ptr())) return {};
  nb::object flag = nb::steal(PyObject_GetAttrString(fn.ptr(), "_torchdynamo_disable"));
  if (!flag.is_valid()) {
    PyErr_Clear();
    return {};
  }
  nb::object name = nb::steal(PyUnicode_FromString("_torchdynamo_orig_callable"));
  nb::object original = nb::steal(PyObject_GetAttr(fn.ptr(), name.ptr()));
  if (!original.is_valid()) {
    PyErr_Clear();
    return {};
  }
  // Dynamo's own refusals of an optimizer's step (SparseAdam, LBFGS) are kept.
  if (flag.ptr() != Py_True || !PyFunction_Check(original.ptr()) ||
      !is_inlined_library_code(
          reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(original.ptr()))) ||
      name_of(original).substr(name_of(original).rfind('.') + 1) == "step") {
    return {};
  }
  int source = source_of(fn);
  if (source >= 0) return wrap(original, sources_.attr(source, name.ptr()));
  keepalive_.push_back(original);
  return original;
}

nb::object Interpreter::torch_compiled_original(nb::handle fn) {
  if (!PyFunction_Check(fn.ptr()) || inlines(fn.ptr())) return {};
  nb::object name = nb::steal(PyUnicode_FromString("_torchdynamo_orig_callable"));
  nb::object original = nb::steal(PyObject_GetAttr(fn.ptr(), name.ptr()));
  if (!original.is_valid()) {
    PyErr_Clear();
    return {};
  }
  nb::object disabled = nb::steal(PyObject_GetAttrString(fn.ptr(), "_torchdynamo_disable"));
  if (!disabled.is_valid()) PyErr_Clear();
  if (disabled.is_valid() && PyObject_IsTrue(disabled.ptr()) != 0) return {};
  int source = source_of(fn);
  if (source >= 0) return wrap(original, sources_.attr(source, name.ptr()));
  keepalive_.push_back(original);
  return original;
}

nb::object Interpreter::dict_view(nb::handle obj, std::string_view what) {
  int source = source_of(obj);
  EMBER_INTERNAL_ASSERT(source >= 0) << "a dict view of a dict without a source";
  guards_.add_len(source, obj.ptr());
  nb::object keys = checked(PySequence_List(obj.ptr()));  // in the dict's own order
  nb::object out = fresh(checked(PyList_New(0)));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
    EMBER_UNSUPPORTED(is_guardable_constant(key))
        << "calling " << what << "() of a " << type_name_of(obj) << " with a key of type "
        << type_name_of(key) << " at " << location();
    nb::object entry;
    if (what == "keys") {
      entry = nb::borrow(key);
    } else {
      nb::object value =
          wrap(checked(PyObject_GetItem(obj.ptr(), key)), sources_.item(source, key));
      entry = what == "values" ? value : checked(PyTuple_Pack(2, key, value.ptr()));
    }
    if (PyList_Append(out.ptr(), entry.ptr()) < 0) throw nb::python_error();
  }
  return out;
}

nb::object Interpreter::set_grad_enabled(nb::handle cls, std::vector<nb::object> args,
                                         nb::handle kwnames) {
  EMBER_UNSUPPORTED(args.size() == 1 && !kwnames.is_valid() && PyBool_Check(args[0].ptr()))
      << "torch.set_grad_enabled with a " << (args.empty() ? "NULL" : type_name_of(args[0]))
      << " at " << location();
  // Set for real: later ops are recorded under it, and run() restores it when the capture stops.
  // A graph break is never taken while it differs from the frame's entry (run_frame), and a
  // frame that returns with it changed runs eagerly (run).
  EMBER_UNSUPPORTED(!(args[0].ptr() == Py_True && grad_inputs_ && !entry_grad_))
      << "torch.set_grad_enabled(True) with inputs that require grad in a frame called under "
      << "no_grad at " << location();
  return call_real(cls, std::move(args), kwnames);
}

nb::object Interpreter::call_scheduler_patched_step(nb::handle fn, std::vector<nb::object>& args,
                                                    nb::handle kwnames) {
  // An LR scheduler replaces its optimizer's `step` by a wrapper (lr_scheduler.py) that sets
  // `opt._opt_called` and calls the class's step on `opt_ref()`: inlined as that, when the
  // wrapper was read as the `step` attribute of the optimizer its weak reference points to.
  if (PyObject_HasAttrString(fn.ptr(), "_wrapped_by_lr_sched") != 1) return {};
  int fn_source = source_of(fn);
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn.ptr()));
  PyObject* closure = PyFunction_GET_CLOSURE(fn.ptr());
  if (fn_source < 0 || closure == nullptr || sources_.at(fn_source).kind != SourceKind::Attr) {
    return {};
  }
  int opt_ref = -1;
  int func = -1;
  const int nfree = co->co_nfreevars;
  for (int i = 0; i < nfree; ++i) {
    PyObject* name = local_name(co, co->co_nlocalsplus - nfree + i);
    if (name == nullptr) return {};
    if (PyUnicode_CompareWithASCIIString(name, "opt_ref") == 0) opt_ref = i;
    if (PyUnicode_CompareWithASCIIString(name, "func") == 0) func = i;
  }
  if (opt_ref < 0 || func < 0 || PyTuple_GET_SIZE(closure) != nfree) return {};
  PyObject* ref = PyCell_GET(PyTuple_GET_ITEM(closure, opt_ref));
  if (ref == nullptr || !PyWeakref_CheckRef(ref)) return {};
  nb::object opt = checked(PyObject_CallNoArgs(ref));
  int opt_source = sources_.at(fn_source).parent;
  auto known = wrapped_.find(opt_source);
  if (known == wrapped_.end() || known->second.ptr() != opt.ptr()) return {};
  nb::object called = nb::steal(PyUnicode_FromString("_opt_called"));
  store_attr(opt, called.ptr(), nb::handle(Py_True));
  nb::object closure_name = nb::steal(PyUnicode_FromString("__closure__"));
  nb::object contents_name = nb::steal(PyUnicode_FromString("cell_contents"));
  nb::object index = nb::steal(PyLong_FromLong(func));
  int step_source =
      sources_.attr(sources_.item(sources_.attr(fn_source, closure_name.ptr()), index.ptr()),
                    contents_name.ptr());
  nb::object step = wrap(nb::borrow(PyCell_GET(PyTuple_GET_ITEM(closure, func))), step_source);
  EMBER_UNSUPPORTED(inlines(step.ptr()))
      << "an LR scheduler's wrapper of " << type_name_of(opt) << ".step at " << location();
  args.insert(args.begin(), opt);
  return inline_function(step, std::move(args), kwnames);
}

/// A function of torch's higher-order ops (torch.cond, while_loop, scan, map, ...), or one of
/// those operators: their eager implementation compiles its branches with Dynamo, which would
/// meet tracer tensors.
bool is_higher_order_op(nb::handle callable) {
  PyObject* c = callable.ptr();
  if (PyFunction_Check(c)) {
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(c));
    std::string_view file = PyUnicode_AsUTF8(code->co_filename);
    // (associative_scan's generic mode is Python over vmap and slices, inlined; its pointwise
    // mode compiles through _maybe_compile_and_run_fn, which stays a higher-order op.)
    if (file.ends_with("torch/_higher_order_ops/associative_scan.py")) return false;
    return file.find("torch/_higher_order_ops/") != std::string_view::npos;
  }
  static PyObject* hop = torch_class("torch._ops", "HigherOrderOperator");
  return hop != nullptr && PyObject_TypeCheck(c, reinterpret_cast<PyTypeObject*>(hop));
}

/// torch.utils.checkpoint.checkpoint.
bool is_checkpoint(nb::handle callable) {
  static PyObject* checkpoint = torch_class("torch.utils.checkpoint", "checkpoint");
  return checkpoint != nullptr && callable.ptr() == checkpoint;
}

nb::object Interpreter::call_higher_order_op(nb::handle callable, std::vector<nb::object>,
                                             nb::handle) {
  throw RunsUnhooked("calling " + name_of(callable) +
                     " (a higher-order op: ember does not capture them yet; the frame runs "
                     "eagerly) at " +
                     location());
}

nb::object Interpreter::call_checkpointed(nb::handle, std::vector<nb::object> args,
                                          nb::handle kwnames) {
  // checkpoint(fn, *args, use_reentrant=..., preserve_rng_state=..., context_fn=...,
  // determinism_check=..., debug=..., **kwargs) computes fn(*args, **kwargs): the capture calls
  // fn so, as Dynamo captures the checkpointed region. What the backward recomputes is then the
  // partitioner's choice (it recomputes what is cheap to recompute), not the region's.
  const Py_ssize_t nkw = kwnames.is_valid() ? PyTuple_GET_SIZE(kwnames.ptr()) : 0;
  const size_t npos = args.size() - static_cast<size_t>(nkw);
  EMBER_UNSUPPORTED(npos >= 1) << "torch.utils.checkpoint.checkpoint without a function at "
                               << location();
  nb::object fn = args[0];
  std::vector<nb::object> call_args(args.begin() + 1, args.begin() + static_cast<long>(npos));
  std::vector<nb::object> names;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames.ptr(), i);
    std::string_view n = PyUnicode_AsUTF8(name);
    if (n == "use_reentrant" || n == "preserve_rng_state" || n == "context_fn" ||
        n == "determinism_check" || n == "debug") {
      continue;
    }
    names.push_back(nb::borrow(name));
    call_args.push_back(args[npos + static_cast<size_t>(i)]);
  }
  nb::object kw;
  if (!names.empty()) {
    kw = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(names.size())));
    for (size_t i = 0; i < names.size(); ++i) {
      PyTuple_SET_ITEM(kw.ptr(), static_cast<Py_ssize_t>(i), names[i].release().ptr());
    }
  }
  return call(fn, std::move(call_args), kw);
}

}  // namespace ember::capture
