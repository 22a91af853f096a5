/// \file
/// Calls of nn.Modules (call_policy.cpp): the module's forward inlined, after its hooks (and
/// the global ones) are checked to be empty; a __call__ of the program's is inlined instead; and
/// a ModuleDict's items() / keys() / values() read through their sources.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

nb::object Interpreter::call_module(nb::handle callable, std::vector<nb::object> args,
                                    nb::handle kwnames) {
  return call_module(callable, std::move(args), kwnames, /*plain_call=*/false);
}

// Note [DDP bucket boundaries]
// DistributedDataParallel all-reduces gradients in buckets of about bucket_bytes_cap bytes of
// parameters (its reducer's hooks on each parameter's AccumulateGrad), so that a bucket's
// all-reduce can start while the backward of earlier layers still runs. A frame captured whole
// is one training graph, one autograd node: every gradient comes at the end of its backward,
// and no all-reduce overlaps it. Dynamo's DDPOptimizer splits its graph at bucket boundaries;
// ember splits the capture. While a DDP forward is active (DistributedDataParallel.
// _get_active_ddp_module(), read once per attempt) and grad mode was on at the frame's entry,
// the frame's top-level module calls (module_depth_ 0: not inside the forward of one of the
// program's modules; torch.nn's own modules, a Sequential of blocks, do not count as a level)
// count their parameters' bytes; a call of one of the program's modules that would take the
// count past the cap, after some parameters were counted, is a graph break before it. The module
// then runs as a frame of its own (captured by the hook: a graph of its own, split again inside
// when it alone is past the cap) and the rest of the frame resumes with its count at 0. The
// segments are training graphs of their own: autograd runs the last one's backward first, its
// gradients accumulate, and DDP's hooks launch their buckets' all-reduce while the earlier
// segments' backward runs. A module whose forward is library code (torch.nn's own, which the hook
// does not capture) is never split before: it would run eagerly. Outside DDP, or in inference,
// nothing changes; a frame split under DDP and reused outside it is correct, only split.
bool Interpreter::ddp_bucket_boundary(nb::handle module, nb::handle forward) {
  // Outside a DDP forward in grad mode (nearly every capture) nothing is counted, and the depth
  // this returns is not read: no work per module call.
  if (!entry_grad_ || !options_.ddp_bucket_boundaries) return false;
  if (ddp_cap_ == -2) {
    ddp_cap_ = -1;
    nb::object ddp =
        checked(PyObject_CallMethod(imported("torch.nn.parallel", "DistributedDataParallel"),
                                    "_get_active_ddp_module", nullptr));
    if (!ddp.is_none()) {
      nb::object cap = checked(PyObject_GetAttrString(ddp.ptr(), "bucket_bytes_cap"));
      ddp_cap_ = PyLong_AsLongLong(cap.ptr());
      if (ddp_cap_ < 0) ddp_cap_ = -1;
      PyErr_Clear();
    }
  }
  if (ddp_cap_ < 0) return false;
  const bool own_frame =
      PyFunction_Check(forward.ptr()) &&
      !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(forward.ptr())));
  if (module_depth_ != 0) return own_frame;
  // A program's module: all its parameters; torch.nn's own (a Sequential, a Linear): its
  // direct ones, the modules it calls counted at their own calls.
  int64_t bytes = 0;
  nb::object params =
      checked(PyObject_CallMethod(module.ptr(), "parameters", "O", own_frame ? Py_True : Py_False));
  nb::object it = checked(PyObject_GetIter(params.ptr()));
  while (PyObject* p = PyIter_Next(it.ptr())) {
    nb::object param = nb::steal(p);
    if (THPVariable_Check(p)) {
      const at::Tensor& t = THPVariable_Unpack(p);
      if (t.requires_grad()) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  if (PyErr_Occurred()) throw nb::python_error();
  EMBER_UNSUPPORTED(!(own_frame && ddp_bytes_ > 0 && bytes > 0 && ddp_bytes_ + bytes > ddp_cap_))
      << kDdpBucketBoundary << " before " << type_name_of(module) << " (" << ddp_bytes_
      << " bytes of parameters so far, " << bytes << " in it, bucket_bytes_cap " << ddp_cap_
      << ") at " << location();
  ddp_bytes_ += bytes;
  return own_frame;
}

nb::object Interpreter::call_module(nb::handle module, std::vector<nb::object> args,
                                    nb::handle kwnames, bool plain_call) {
  // nn.RNN, LSTM and GRU: their forward checks the flat weights through weak references
  // (_flat_weight_refs, which every instance has its own of), which capture does not follow; a
  // break inside it guarded those references by identity, so each layer of a model recompiled
  // the block that calls it until the cache limit (timm's sequencer2d). Called as a whole
  // instead, outside the graph, as Dynamo does ("Attempted to wrap RNN, GRU, or LSTM").
  static PyObject* rnn_base = imported("torch.nn.modules.rnn", "RNNBase");
  const int is_rnn = PyObject_IsInstance(module.ptr(), rnn_base);
  if (is_rnn < 0) throw nb::python_error();
  EMBER_UNSUPPORTED(is_rnn == 0) << "a call of an nn." << type_name_of(module)
                                 << " (its forward reads its weights through weak references; "
                                    "it runs outside the graph, as under Dynamo) at "
                                 << location();
  static const char* const kHooks[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                       "_backward_pre_hooks"};
  for (const char* h : kHooks) {
    PyObject* d = PyObject_GetAttrString(module.ptr(), h);
    if (d == nullptr) {
      PyErr_Clear();
      continue;
    }
    nb::object hooks = nb::steal(d);
    EMBER_UNSUPPORTED(PyObject_Length(d) == 0)
        << "a module with " << h << " (" << type_name_of(module) << ") at " << location();
  }
  static PyObject* global_hooks = [] {
    nb::object m = checked(PyImport_ImportModule("torch.nn.modules.module"));
    nb::object list = checked(PyList_New(0));
    for (const char* n : {"_global_forward_hooks", "_global_forward_pre_hooks",
                          "_global_backward_hooks", "_global_backward_pre_hooks"}) {
      PyObject* d = PyObject_GetAttrString(m.ptr(), n);
      if (d == nullptr) {
        PyErr_Clear();
        continue;
      }
      PyList_Append(list.ptr(), d);
      Py_DECREF(d);
    }
    return list.release().ptr();
  }();
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(global_hooks); ++i) {
    EMBER_UNSUPPORTED(PyObject_Length(PyList_GET_ITEM(global_hooks, i)) == 0)
        << "global nn.Module hooks are registered";
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(module.ptr()));
  static PyObject* module_call = [] {
    nb::object m = checked(PyImport_ImportModule("torch.nn"));
    nb::object cls = checked(PyObject_GetAttrString(m.ptr(), "Module"));
    return checked(PyObject_GetAttrString(cls.ptr(), "__call__")).release().ptr();
  }();
  nb::object call_attr = checked(PyObject_GetAttrString(type, "__call__"));
  if (call_attr.ptr() != module_call && !plain_call) {
    // A __call__ of the program's (one that ends in super().__call__): inlined.
    EMBER_UNSUPPORTED(
        PyFunction_Check(call_attr.ptr()) &&
        !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(call_attr.ptr()))))
        << type_name_of(module) << " overrides __call__ at " << location();
    give_closure_source(call_attr.ptr());
    args.insert(args.begin(), nb::borrow(module));
    return inline_function(call_attr, std::move(args), kwnames);
  }
  PyObject* dict = PyObject_GenericGetDict(module.ptr(), nullptr);
  if (dict != nullptr) {
    nb::object d = nb::steal(dict);
    if (PyDict_GetItemString(dict, "forward") != nullptr) {
      // `self.forward = self.forward_slicing` (timm's FasterNet): the instance's own forward,
      // read (and guarded) as an attribute, is what nn.Module.__call__ calls.
      int source = source_of(module);
      EMBER_UNSUPPORTED(source >= 0)
          << type_name_of(module) << " has an instance attribute 'forward' at " << location();
      nb::object forward = load_attr(module, nb::str("forward").ptr());
      return call(forward, std::move(args), kwnames);
    }
  } else {
    PyErr_Clear();
  }
  nb::object forward = checked(PyObject_GetAttrString(type, "forward"));
  EMBER_UNSUPPORTED(PyFunction_Check(forward.ptr()))
      << type_name_of(module) << ".forward is a " << type_name_of(forward) << " at " << location();
  int source = source_of(module);
  if (source >= 0 && PyFunction_GET_CLOSURE(forward.ptr()) != nullptr) {
    nb::object cls_name = nb::steal(PyUnicode_FromString("__class__"));
    nb::object fwd_name = nb::steal(PyUnicode_FromString("forward"));
    forward = wrap(forward, sources_.attr(sources_.attr(source, cls_name.ptr()), fwd_name.ptr()));
  }
  // Modules of torch.nn (containers, layers) leave the depth as it is: a Sequential's blocks
  // are top-level calls of the frame for the bucket boundaries.
  const int depth = ddp_bucket_boundary(module, forward) ? 1 : 0;
  args.insert(args.begin(), nb::borrow(module));
  module_depth_ += depth;
  struct Leave {
    int& at;
    int by;
    ~Leave() { at -= by; }
  } leave{module_depth_, depth};
  return inline_function(forward, std::move(args), kwnames);
}

nb::object Interpreter::module_dict_view(nb::object module, std::string_view what,
                                         const std::string& where) {
  int source = source_of(module);
  static PyObject* module_dict = imported("torch.nn", "ModuleDict");
  int is_dict = PyObject_IsInstance(module.ptr(), module_dict);
  if (is_dict < 0) throw nb::python_error();
  EMBER_UNSUPPORTED(source >= 0 && is_dict == 1)
      << "calling " << what << "() of a " << type_name_of(module) << " at " << where;
  guards_.add_len(source, module.ptr());
  nb::object keys = checked(PySequence_List(module.ptr()));  // ModuleDict iterates its keys
  nb::object out = fresh(checked(PyList_New(0)));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
    EMBER_UNSUPPORTED(PyUnicode_CheckExact(key)) << "a ModuleDict key that is not a str";
    nb::object item = checked(PyObject_GetItem(module.ptr(), key));
    nb::object value = wrap(item, sources_.item(source, key));
    nb::object entry;
    if (what == "keys") {
      entry = nb::borrow(key);
    } else if (what == "values") {
      entry = value;
    } else {
      entry = checked(PyTuple_Pack(2, key, value.ptr()));
    }
    if (PyList_Append(out.ptr(), entry.ptr()) < 0) throw nb::python_error();
  }
  return out;
}

}  // namespace ember::capture
