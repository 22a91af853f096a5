#include "capture/capture_compiler.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <unordered_set>

#include "capture/compiled_frame.h"
#include "capture/graph_break.h"
#include "capture/guards.h"
#include "capture/interpreter.h"
#include "capture/interpreter_internal.h"
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

void fill_record(CaptureRecord& rec, const runtime::Executor& executor, const GuardSet& guards,
                 const SourceTable& sources, size_t inputs) {
  rec.nodes = static_cast<int>(executor.graph().nodes.size());
  rec.kernels = executor.num_kernels();
  rec.extern_steps = executor.num_extern_steps();
  rec.guards = static_cast<int>(guards.size());
  rec.inputs = static_cast<int>(inputs);
  rec.graph = graph::print_graph(executor.graph());
  rec.guard_text = guards.describe(sources);
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

bool CaptureCompiler::is_library(PyCodeObject* code) const {
  std::string_view file = PyUnicode_AsUTF8(code->co_filename);
  for (const std::string& p : options_.library_prefixes) {
    if (file.substr(0, p.size()) == p) return true;
  }
  return false;
}

namespace {

/// One run of the interpreter over a frame, with what it recorded.
struct Attempt {
  SourceTable sources;
  GuardSet guards;
  std::unique_ptr<tracer::TraceSession> session = std::make_unique<tracer::TraceSession>();
  std::unique_ptr<Interpreter> interp;
  nb::object value;  ///< the frame's return value (None when stopped)
};

std::unique_ptr<Attempt> run_attempt(const FrameView& f, const InterpreterOptions& iopts,
                                     int stop_at) {
  auto a = std::make_unique<Attempt>();
  a->guards.set_global_state(GlobalState::current());
  a->session->set_strict_constants(true);
  a->interp = std::make_unique<Interpreter>(*a->session, a->sources, a->guards, iopts);
  a->session->enter();
  try {
    try {
      a->value = a->interp->run(f, stop_at);
    } catch (nb::python_error&) {
      a->session->rethrow_pending_error();
      throw;
    }
  } catch (...) {
    a->session->exit();
    throw;
  }
  return a;
}

/// Compiles the attempt's graph with `tensors` as its outputs.
std::unique_ptr<runtime::Executor> finish(Attempt& a, const std::vector<at::Tensor>& tensors,
                                          const runtime::ExecutorOptions& options) {
  tracer::TracedGraph traced;
  try {
    traced = a.session->finish(tensors);
  } catch (...) {
    a.session->exit();
    throw;
  }
  a.session->exit();
  return std::make_unique<runtime::Executor>(std::move(traced), options);
}

int num_args(PyCodeObject* co) {
  return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
         ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/// Code objects made by graph breaks; the hook must run them as they are.
std::unordered_set<PyObject*>& generated_codes() {
  static auto* s = new std::unordered_set<PyObject*>();
  return *s;
}

}  // namespace

CompileResult CaptureCompiler::compile(const FrameView& f) {
  auto t0 = std::chrono::steady_clock::now();
  CaptureRecord rec;
  rec.code = frame_name(f);
  CompileResult result;
  if (generated_codes().count(reinterpret_cast<PyObject*>(f.code)) != 0) {
    result.action = CompileResult::Action::SkipCode;
    result.reason = "code generated by a graph break";
    return result;
  }
  auto give_up = [&](CompileResult::Action action, const std::string& reason) {
    rec.reason = reason;
    result.action = action;
    result.reason = reason;
    if (log_enabled("graph_breaks") || log_enabled("breaks")) {
      log_warning("ember: " + rec.code + " runs eagerly: " + reason);
    }
  };
  // A frame that cannot be captured runs eagerly from then on. The hook's SkipCode is per code
  // object for every compiler, so it is used only for the user's own code and reasons that do
  // not depend on the call; otherwise this compiler remembers the decision for the current
  // global state (a later call under no_grad may capture what grad mode prevented).
  PyObject* code_key = reinterpret_cast<PyObject*>(f.code);
  GlobalState state_now = GlobalState::current();
  auto memo = eager_memo_.find(code_key);
  if (memo != eager_memo_.end() && memo->second == state_now) {
    result.action = CompileResult::Action::Eager;
    result.reason = "runs eagerly (decided before)";
    return result;
  }
  const bool library_code = is_library(f.code);
  auto unsupported = [&](const std::string& reason) {
    if (options_.fullgraph) {
      set_python_error(std::current_exception());
      give_up(CompileResult::Action::Eager, reason);
    } else if (library_code || reason.find("requires grad") != std::string::npos) {
      eager_memo_[code_key] = state_now;
      memo_keepalive_.push_back(nb::borrow(code_key));
      give_up(CompileResult::Action::Eager, reason);
    } else {
      give_up(CompileResult::Action::SkipCode, reason);
    }
  };
  InterpreterOptions iopts;
  iopts.library_prefixes = options_.library_prefixes;
  try {
    std::unique_ptr<Attempt> a;
    std::unique_ptr<runtime::Executor> executor;
    std::string break_reason;
    auto capture_start = std::chrono::steady_clock::now();
    auto capture_done = [&] {
      rec.capture_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_start).count();
    };
    try {
      a = run_attempt(f, iopts, -1);
      capture_done();
    } catch (const GraphBreak& b) {
      if (options_.fullgraph && b.data_dependent()) throw DataDependentError(b.what());
      if (options_.fullgraph) throw Unsupported(b.what());
      break_reason = b.what();
      a = run_attempt(f, iopts, b.pc());
      capture_done();
    }
    std::vector<at::Tensor> tensors;
    if (break_reason.empty()) {
      OutputTemplate output = value_template(a->value, *a->interp, tensors);
      executor = finish(*a, tensors, options_.executor);
      if (executor->has_mutations()) {
        std::vector<nb::object> values;
        EMBER_INTERNAL_ASSERT(a->sources.evaluate(f, values) < 0) << "a source failed";
        std::vector<at::Tensor> inputs;
        for (int s : a->interp->input_sources()) {
          inputs.push_back(THPVariable_Unpack(values[static_cast<size_t>(s)].ptr()));
        }
        if (executor->mutated_inputs_alias(inputs)) {
          give_up(CompileResult::Action::Eager,
                  "an input that the graph mutates shares memory with another input");
          records_.push_back(rec);
          return result;
        }
      }
      fill_record(rec, *executor, a->guards, a->sources, a->interp->input_sources().size());
      auto entry =
          std::make_unique<CompiledFrame>(a->sources, a->guards, a->interp->input_sources(),
                                          std::move(executor), std::move(output));
      entry->prime(f);
      result.entry = std::move(entry);
    } else {
      const StopState& state = a->interp->stop_state();
      std::vector<OutputTemplate> templates;
      try {
        templates = state_templates(state, *a->interp, tensors);
      } catch (const Unsupported& e) {
        throw Unsupported(break_reason + " (no graph break there: " + e.what() + ")");
      }
      executor = finish(*a, tensors, options_.executor);
      EMBER_UNSUPPORTED(!executor->has_mutations())
          << break_reason << " (no graph break there: the graph before it mutates an input)";
      fill_record(rec, *executor, a->guards, a->sources, a->interp->input_sources().size());
      auto segment = std::make_shared<Segment>();
      segment->sources = a->sources;
      segment->input_sources = a->interp->input_sources();
      segment->executor = std::move(executor);
      segment->values = std::move(templates);
      segment->code = nb::borrow(reinterpret_cast<PyObject*>(f.code));
      segment->globals = nb::borrow(f.globals);
      segment->builtins = nb::borrow(f.builtins);
      segment->nargs = num_args(f.code);
      nb::object callable = make_segment_callable(segment);
      BreakCode code;
      try {
        code = build_break_code(f.code, f.globals, *decoded(f.code), state, callable);
      } catch (const Unsupported& e) {
        throw Unsupported(break_reason + " (no graph break there: " + e.what() + ")");
      }
      generated_codes().insert(code.code.ptr());
      rec.graph_break = true;
      rec.reason = break_reason;
      if (log_enabled("graph_breaks") || log_enabled("breaks")) {
        log_warning("ember: graph break in " + rec.code + ": " + break_reason);
      }
      result.entry =
          std::make_unique<BreakFrame>(a->sources, a->guards, code.code, num_args(f.code));
    }
    rec.captured = true;
    if (log_enabled("guards")) log_warning("ember: guards of " + rec.code + "\n" + rec.guard_text);
    if (log_enabled("graph")) log_warning("ember: graph of " + rec.code + "\n" + rec.graph);
    result.action = CompileResult::Action::Run;
  } catch (const Unsupported& e) {
    unsupported(e.what());
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
      // The program raised while it was captured: run it eagerly, where it raises again (or
      // catches it). This compiler keeps running the code eagerly under this global state
      // rather than tracing it again on every call.
      eager_memo_[code_key] = state_now;
      memo_keepalive_.push_back(nb::borrow(code_key));
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
