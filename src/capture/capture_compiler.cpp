#include "capture/capture_compiler.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "capture/compiled_frame.h"
#include "capture/guards.h"
#include "capture/interpreter.h"
#include "capture/source.h"
#include "graph/printer.h"
#include "support/error.h"
#include "tracer/trace_session.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

CaptureCompiler::ErrorSetter error_setter = nullptr;

void set_python_error(const std::exception_ptr& e) {
  if (error_setter != nullptr) {
    error_setter(e);
    if (PyErr_Occurred()) return;
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    PyErr_SetString(PyExc_RuntimeError, ex.what());
  }
}

bool log_enabled(const char* what) {
  const char* env = std::getenv("EMBER_LOGS");
  if (env == nullptr) return false;
  std::string logs = std::string(",") + env + ",";
  return logs.find(std::string(",") + what + ",") != std::string::npos ||
         logs.find(",all,") != std::string::npos;
}

/// Logs through Python's logging module, logger "ember".
void log_warning(const std::string& msg) {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* logging = PyImport_ImportModule("logging");
  if (logging != nullptr) {
    PyObject* logger = PyObject_CallMethod(logging, "getLogger", "s", "ember");
    if (logger != nullptr) {
      PyObject* r = PyObject_CallMethod(logger, "warning", "s", msg.c_str());
      Py_XDECREF(r);
      Py_DECREF(logger);
    }
    Py_DECREF(logging);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

std::string frame_name(const FrameView& f) {
  return nb::cast<std::string>(nb::handle(f.code->co_filename)) + ":" +
         std::to_string(f.code->co_firstlineno) + " (" +
         nb::cast<std::string>(nb::handle(f.code->co_qualname)) + ")";
}

/// Collects the tensors of the returned value and describes how to rebuild it.
OutputTemplate flatten(nb::handle v, std::vector<at::Tensor>& tensors) {
  OutputTemplate t;
  PyObject* o = v.ptr();
  if (THPVariable_Check(o)) {
    t.kind = OutputTemplate::Kind::Tensor;
    t.index = static_cast<int>(tensors.size());
    tensors.push_back(THPVariable_Unpack(o));
  } else if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
    t.kind = PyTuple_CheckExact(o) ? OutputTemplate::Kind::Tuple : OutputTemplate::Kind::List;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      t.items.push_back(flatten(PySequence_Fast_GET_ITEM(o, i), tensors));
    }
  } else if (PyDict_CheckExact(o)) {
    t.kind = OutputTemplate::Kind::Dict;
    nb::object keys = nb::steal(PyList_New(0));
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value)) {
      PyList_Append(keys.ptr(), key);
      t.items.push_back(flatten(value, tensors));
    }
    t.value = nb::steal(PyList_AsTuple(keys.ptr()));
  } else {
    EMBER_UNSUPPORTED(is_guardable_constant(o) || PyType_Check(o) || PyModule_Check(o) ||
                      PyFunction_Check(o) ||
                      std::string_view(Py_TYPE(o)->tp_name) == "torch.dtype" ||
                      std::string_view(Py_TYPE(o)->tp_name) == "torch.device" ||
                      std::string_view(Py_TYPE(o)->tp_name) == "torch.Size")
        << "the frame returns a " << Py_TYPE(o)->tp_name;
    t.kind = OutputTemplate::Kind::Constant;
    t.value = nb::borrow(v);
  }
  return t;
}

/// The data-access messages of PyTorch for a tensor without storage (a tracer tensor).
bool is_data_access_error(const std::string& msg) {
  for (const char* m : {"unallocated storage", "doesn't have storage", "does not have storage",
                        "Cannot access data pointer"}) {
    if (msg.find(m) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

void CaptureCompiler::set_error_setter(ErrorSetter s) {
  error_setter = s;
}

CompileResult CaptureCompiler::compile(const FrameView& f) {
  auto t0 = std::chrono::steady_clock::now();
  CaptureRecord rec;
  rec.code = frame_name(f);
  CompileResult result;
  auto give_up = [&](CompileResult::Action action, const std::string& reason) {
    rec.reason = reason;
    result.action = action;
    result.reason = reason;
    if (log_enabled("graph_breaks") || log_enabled("breaks")) {
      log_warning("ember: " + rec.code + " runs eagerly: " + reason);
    }
  };
  try {
    SourceTable sources;
    GuardSet guards;
    guards.set_global_state(GlobalState::current());
    tracer::TraceSession session;
    session.set_strict_constants(true);
    InterpreterOptions iopts;
    iopts.library_prefixes = options_.library_prefixes;
    Interpreter interp(session, sources, guards, iopts);
    std::vector<at::Tensor> tensors;
    OutputTemplate output;
    tracer::TracedGraph traced;
    session.enter();
    try {
      nb::object value;
      try {
        value = interp.run(f);
      } catch (nb::python_error&) {
        session.rethrow_pending_error();
        throw;
      }
      output = flatten(value, tensors);
      traced = session.finish(tensors);
    } catch (...) {
      session.exit();
      throw;
    }
    session.exit();
    auto executor = std::make_unique<runtime::Executor>(std::move(traced), options_.executor);
    if (executor->has_mutations()) {
      std::vector<nb::object> values;
      EMBER_INTERNAL_ASSERT(sources.evaluate(f, values) < 0) << "a source failed to evaluate";
      std::vector<at::Tensor> inputs;
      for (int s : interp.input_sources()) {
        inputs.push_back(THPVariable_Unpack(values[static_cast<size_t>(s)].ptr()));
      }
      if (executor->mutated_inputs_alias(inputs)) {
        give_up(CompileResult::Action::Eager,
                "an input that the graph mutates shares memory with another input");
        records_.push_back(rec);
        return result;
      }
    }
    rec.captured = true;
    rec.nodes = static_cast<int>(executor->graph().nodes.size());
    rec.kernels = executor->num_kernels();
    rec.extern_steps = executor->num_extern_steps();
    rec.guards = static_cast<int>(guards.size());
    rec.inputs = static_cast<int>(interp.input_sources().size());
    rec.graph = graph::print_graph(executor->graph());
    rec.guard_text = guards.describe(sources);
    if (log_enabled("guards")) log_warning("ember: guards of " + rec.code + "\n" + rec.guard_text);
    if (log_enabled("graph")) log_warning("ember: graph of " + rec.code + "\n" + rec.graph);
    result.action = CompileResult::Action::Run;
    result.entry = std::make_unique<CompiledFrame>(std::move(sources), std::move(guards),
                                                   interp.input_sources(), std::move(executor),
                                                   std::move(output));
  } catch (const DataDependentError& e) {
    if (options_.fullgraph) {
      set_python_error(std::current_exception());
      give_up(CompileResult::Action::Eager, e.what());
    } else {
      give_up(CompileResult::Action::SkipCode, e.what());
    }
  } catch (const Unsupported& e) {
    if (options_.fullgraph) {
      set_python_error(std::current_exception());
      give_up(CompileResult::Action::Eager, e.what());
    } else {
      give_up(CompileResult::Action::SkipCode, e.what());
    }
  } catch (nb::python_error& e) {
    std::string msg = e.what();
    if (is_data_access_error(msg)) {
      std::string reason = "the program reads the data of a traced tensor (" + msg + ")";
      if (options_.fullgraph) {
        set_python_error(std::make_exception_ptr(DataDependentError(reason)));
        give_up(CompileResult::Action::Eager, reason);
      } else {
        give_up(CompileResult::Action::SkipCode, reason);
      }
    } else {
      // The program raised while it was captured: run it eagerly, where it raises again.
      give_up(CompileResult::Action::Eager, "the program raised " + msg);
    }
  } catch (const UserError&) {
    set_python_error(std::current_exception());
    give_up(CompileResult::Action::Eager, "user error");
  } catch (...) {
    set_python_error(std::current_exception());
    give_up(CompileResult::Action::Eager, "internal error");
  }
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  records_.push_back(std::move(rec));
  return result;
}

}  // namespace ember::capture
