#include "capture/compile/capture_compiler.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>

#include "capture/breaks/graph_break.h"
#include "capture/compile/compiled_frame.h"
#include "capture/compile/graph_runner.h"
#include "capture/guards/guards.h"
#include "capture/guards/source.h"
#include "capture/hook/logs.h"
#include "capture/interp/interpreter.h"
#include "capture/interp/interpreter_internal.h"
#include "graph/printer.h"
#include "rewrite/rewrites.h"
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

std::string frame_name(const FrameView& f) {
  return nb::cast<std::string>(nb::handle(f.code->co_filename)) + ":" +
         std::to_string(f.code->co_firstlineno) + " (" +
         nb::cast<std::string>(nb::handle(f.code->co_qualname)) + ")";
}

void fill_record(CaptureRecord& rec, const GraphRunner& runner, const GuardSet& guards,
                 const SourceTable& sources, size_t inputs) {
  rec.nodes = static_cast<int>(runner.graph().nodes.size());
  rec.kernels = runner.num_kernels();
  rec.extern_steps = runner.num_extern_steps();
  rec.view_steps = runner.num_view_steps();
  rec.fused_nodes = runner.num_fused_nodes();
  rec.folded_nodes = runner.num_folded_nodes();
  rec.symbolic = !runner.graph().symbols.symbols().empty();
  rec.parameter_kernels = runner.num_parameter_kernels();
  rec.fused_attention = runner.num_fused_attention();
  rec.causal_attention = runner.num_causal_attention();
  rec.symbolic_fallback = runner.symbolic_fallback();
  rec.codegen_notes = runner.codegen_notes();
  rec.guards = static_cast<int>(guards.size());
  rec.inputs = static_cast<int>(inputs);
  rec.graph = graph::print_graph(runner.graph());
  rec.training = runner.training();
  rec.guard_text = guards.describe(sources);
  rec.kernel_sources = runner.kernel_sources();
  rec.step_seconds = runner.step_seconds();
}

}  // namespace

void CaptureCompiler::set_error_setter(ErrorSetter s) {
  error_setter = s;
}

namespace {

/// One run of the interpreter over a frame, with what it recorded.
struct Attempt {
  SourceTable sources;
  GuardSet guards;
  std::unique_ptr<tracer::TraceSession> session;
  std::unique_ptr<Interpreter> interp;
  nb::object value;  ///< the frame's return value (None when stopped)
};

std::unique_ptr<Attempt> run_attempt(const FrameView& f, const InterpreterOptions& iopts,
                                     const CompileOptions& options, int stop_at,
                                     int64_t stop_count = -1) {
  auto a = std::make_unique<Attempt>();
  a->session = std::make_unique<tracer::TraceSession>(options, rewrite::rewrite_table());
  a->guards.set_global_state(GlobalState::current());
  a->session->set_strict_constants(true);
  a->interp = std::make_unique<Interpreter>(*a->session, a->sources, a->guards, iopts);
  a->session->enter();
  try {
    try {
      a->value = a->interp->run(f, stop_at, stop_count);
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

/// The graph inputs of the attempt for this call of frame `f`, in order.
std::vector<at::Tensor> graph_inputs(const Attempt& a, const FrameView& f) {
  std::vector<nb::object> values;
  EMBER_INTERNAL_ASSERT(a.sources.evaluate(f, values) < 0) << "a source failed";
  std::vector<at::Tensor> inputs;
  for (int s : a.interp->input_sources()) {
    inputs.push_back(THPVariable_Unpack(values[static_cast<size_t>(s)].ptr()));
  }
  return inputs;
}

/// Guards that the inputs the graph mutates keep the memory overlaps they have on this call
/// (none, usually: a graph traced on distinct tensors reads the other inputs' values from
/// before the mutation). Returns whether a mutated input overlaps another input now.
bool add_aliasing_guards(Attempt& a, const GraphRunner& runner, const FrameView& f) {
  if (!runner.has_mutations()) return false;
  const std::vector<at::Tensor> inputs = graph_inputs(a, f);
  const std::vector<int>& sources = a.interp->input_sources();
  bool overlaps = false;
  for (size_t m : runner.mutated_input_positions()) {
    EMBER_INTERNAL_ASSERT(m < inputs.size() && m < sources.size())
        << "a mutated input outside the graph's inputs";
    std::vector<int> others;
    std::vector<at::Tensor> tensors{inputs[m]};
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i == m) continue;
      others.push_back(sources[i]);
      tensors.push_back(inputs[i]);
    }
    a.guards.add_aliasing(sources[m], std::move(others), tensors);
    overlaps = overlaps || runtime::any_shares_storage(inputs, {m});
  }
  return overlaps;
}

/// The joint graph of the attempt, when grad mode is on, graph inputs require grad and some of
/// `tensors` (the outputs) are differentiable: one tangent input per differentiable output
/// (after every primal), and autograd run on the tracer tensors records the backward, whose
/// gradients follow the program's outputs (as ember.tracing.trace_joint does for Dynamo's
/// graphs). nullptr when no output is differentiable: the graph is an inference graph.
std::unique_ptr<GraphRunner> finish_training(Attempt& a, const std::vector<at::Tensor>& tensors,
                                             const CaptureOptions& options) {
  std::vector<int> differentiable;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (t.defined() && t.requires_grad() && (t.is_floating_point() || t.is_complex())) {
      differentiable.push_back(static_cast<int>(i));
    }
  }
  // Inputs the program modified in place under grad mode: their values after it are outputs
  // too, with tangents (Note [Traced inputs modified in place], tracer/grad_inputs.h).
  const tracer::GradInputs& grad = a.interp->grad_tracers();
  std::vector<at::Tensor> all = tensors;
  std::vector<int> rebased;
  for (int k : grad.modified_in_place()) {
    differentiable.push_back(static_cast<int>(all.size()));
    all.push_back(grad.tensors()[static_cast<size_t>(k)]);
    rebased.push_back(a.interp->grad_tracer_inputs()[static_cast<size_t>(k)]);
  }
  if (differentiable.empty()) return nullptr;
  const int num_forward_outputs = static_cast<int>(all.size());
  tracer::TraceSession& s = *a.session;
  std::vector<int> grad_inputs;
  tracer::TracedGraph joint;
  try {
    s.exit();
    std::vector<at::Tensor> tangents;
    for (int i : differentiable) {
      // Contiguous, of the output's sizes (over the trace's symbols when they are symbolic).
      tangents.push_back(s.add_input_like(all[static_cast<size_t>(i)], graph::InputKind::User,
                                          "tangent" + std::to_string(i)));
    }
    s.enter();
    std::vector<at::Tensor> outputs;
    for (int i : differentiable) outputs.push_back(all[static_cast<size_t>(i)]);
    std::vector<at::Tensor> grads;
    {
      // The engine refuses to run under the GIL (meta kernels written in Python take it back).
      nb::gil_scoped_release no_gil;
      grads = grad.gradients(outputs, tangents, /*walk=*/false);
    }
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;  // an input the outputs do not reach
      all.push_back(grads[k]);
      grad_inputs.push_back(a.interp->grad_tracer_inputs()[k]);
    }
    joint = s.finish(all);
  } catch (...) {
    s.exit();
    throw;
  }
  s.exit();
  if (!joint.graph.symbols.symbols().empty()) {
    // The size relations the forward and the backward relied on guard the frame (the tangents
    // add no symbols: their sizes are the outputs').
    EMBER_INTERNAL_ASSERT(a.interp->symbol_sources().size() == joint.graph.symbols.symbols().size())
        << "the joint trace has " << joint.graph.symbols.symbols().size()
        << " shape symbols, capture knows the sources of " << a.interp->symbol_sources().size();
    a.guards.add_size_relations(a.interp->symbol_sources(), joint.size_guards);
  }
  // The primals are the interpreter's inputs; the tangents were added after them.
  runtime::JointSignature sig = runtime::joint_signature(
      joint.graph, static_cast<int>(a.interp->input_sources().size()), num_forward_outputs,
      std::move(differentiable), std::move(grad_inputs));
  sig.rebased_inputs = std::move(rebased);
  return make_training_runner(std::move(joint), std::move(sig), options.executor);
}

/// Compiles the attempt's graph with `tensors` as its outputs: with ember's Executor (a joint
/// graph when the outputs need a backward), or with the options' backend, which gets the graph
/// inputs of this call of `f` as example inputs.
std::unique_ptr<GraphRunner> finish(Attempt& a, const std::vector<at::Tensor>& tensors,
                                    const CaptureOptions& options, const FrameView& f) {
  if (!a.interp->grad_tracers().empty()) {
    EMBER_UNSUPPORTED(at::GradMode::is_enabled())
        << "a graph that ends under no_grad reads inputs that require grad (a graph break inside "
        << "a no_grad block of a training frame)";
    if (options.backend.is_valid()) {
      for (const at::Tensor& t : tensors) {
        EMBER_UNSUPPORTED(!(t.defined() && t.requires_grad()))
            << "an output requires grad: training graphs are not handed to a foreign backend "
            << "(use ember's own, or torch.compile)";
      }
    } else if (std::unique_ptr<GraphRunner> runner = finish_training(a, tensors, options)) {
      return runner;
    }
  } else {
    // No input requires grad, so an output that does was made a leaf by requires_grad_ under
    // no_grad (Interpreter::call_tensor_method): the executor's outputs would not carry it.
    for (const at::Tensor& t : tensors) {
      EMBER_UNSUPPORTED(!(t.defined() && t.requires_grad()))
          << "an output was made to require grad by requires_grad_ (under no_grad)";
    }
  }
  tracer::TracedGraph traced;
  try {
    traced = a.session->finish(tensors);
  } catch (...) {
    a.session->exit();
    throw;
  }
  a.session->exit();
  if (!traced.graph.symbols.symbols().empty()) {
    EMBER_UNSUPPORTED(!options.backend.is_valid())
        << "a graph with shape symbols is not handed to a foreign backend";
    EMBER_INTERNAL_ASSERT(a.interp->symbol_sources().size() ==
                          traced.graph.symbols.symbols().size())
        << "the trace has " << traced.graph.symbols.symbols().size() << " shape symbols, capture "
        << "knows the sources of " << a.interp->symbol_sources().size();
    a.guards.add_size_relations(a.interp->symbol_sources(), traced.size_guards);
  }
  if (!options.backend.is_valid()) return make_executor_runner(std::move(traced), options.executor);
  return make_backend_runner(std::move(traced), options.backend, graph_inputs(a, f));
}

/// Code objects made by graph breaks, which the hook must run as they are: address -> a weak
/// reference. Weak, since a break's code lives as long as its compiler's entries; and checked,
/// since a later code object may get a freed one's address (and must not be skipped as generated).
std::unordered_map<PyObject*, nb::object>& generated_codes() {
  static auto* s = new std::unordered_map<PyObject*, nb::object>();
  return *s;
}

void mark_generated(PyObject* code) {
  PyObject* ref = PyWeakref_NewRef(code, nullptr);
  EMBER_INTERNAL_ASSERT(ref != nullptr) << "a code object without weak references";
  generated_codes()[code] = nb::steal(ref);
}

bool is_generated(PyObject* code) {
  auto& codes = generated_codes();
  auto it = codes.find(code);
  if (it == codes.end()) return false;
  if (weak_target(it->second.ptr()) == code) return true;
  codes.erase(it);  // a freed generated code's address, now another code object's
  return false;
}

/// Whether `v` holds a tensor or an nn.Module: itself, or in the lists, tuples and dicts (and
/// namedtuples) it holds, `depth` levels down.
bool holds_tensors(PyObject* v, int depth) {
  if (v == nullptr) return false;
  if (THPVariable_Check(v) || is_nn_module(v)) return true;
  if (depth == 0) return false;
  if (PyList_Check(v) || PyTuple_Check(v)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); ++i) {
      if (holds_tensors(PySequence_Fast_GET_ITEM(v, i), depth - 1)) return true;
    }
    return false;
  }
  if (PyDict_Check(v)) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &key, &value)) {
      if (holds_tensors(value, depth - 1)) return true;
    }
  }
  return false;
}

}  // namespace

bool CaptureCompiler::touches_torch(const FrameView& f) {
  // A global of the code that is torch or one of its modules (`torch.cat(...)` in a helper).
  PyObject* code = reinterpret_cast<PyObject*>(f.code);
  auto known = torch_globals_.find(code);
  if (known == torch_globals_.end() || known->second.first != f.globals) {
    bool uses = false;
    PyObject* names = f.code->co_names;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names) && !uses; ++i) {
      PyObject* v = PyDict_GetItemWithError(f.globals, PyTuple_GET_ITEM(names, i));
      if (v == nullptr) {
        PyErr_Clear();
        continue;
      }
      if (!PyModule_Check(v)) continue;
      const char* name = PyModule_GetName(v);
      if (name == nullptr) {
        PyErr_Clear();
        continue;
      }
      std::string_view n(name);
      uses = n == "torch" || n.substr(0, 6) == "torch.";
    }
    if (known == torch_globals_.end()) memo_keepalive_.push_back(nb::borrow(code));
    known = torch_globals_.insert_or_assign(code, std::make_pair(f.globals, uses)).first;
  }
  if (known->second.second) return true;
  // A tensor or module among its arguments and closure variables.
  for (int i = 0; i < f.nlocalsplus; ++i) {
    if (holds_tensors(f.value(i), /*depth=*/3)) return true;
  }
  return false;
}

namespace {

/// The dims in `attr` of tensor `obj` (torch._dynamo.mark_dynamic / mark_static keep them as a
/// set attribute of the tensor).
std::vector<int64_t> marked_dims(PyObject* obj, const char* attr) {
  std::vector<int64_t> out;
  if (obj == nullptr || !PyObject_HasAttrString(obj, attr)) return out;
  nb::object dims = nb::steal(PyObject_GetAttrString(obj, attr));
  if (!dims.is_valid()) {
    PyErr_Clear();
    return out;
  }
  try {
    for (nb::handle d : dims) out.push_back(nb::cast<int64_t>(d));
  } catch (...) {
    PyErr_Clear();
  }
  return out;
}

}  // namespace

std::vector<int64_t> CaptureCompiler::dynamic_dims(PyObject* code, const std::string& name,
                                                   const at::Tensor& t, graph::InputKind kind) {
  if (kind != graph::InputKind::User || t.dim() == 0 || static_codes_.contains(code)) return {};
  nb::object py = nb::steal(THPVariable_Wrap(t));
  std::vector<int64_t> fixed = marked_dims(py.ptr(), "_dynamo_static_indices");
  std::vector<bool> dynamic(static_cast<size_t>(t.dim()), options_.dynamic.value_or(false));
  // mark_dynamic, and maybe_mark_dynamic (the same here: a dim ember cannot keep symbolic makes
  // the frame fall back to static shapes, never an error).
  for (const char* attr : {"_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices"}) {
    for (int64_t d : marked_dims(py.ptr(), attr)) {
      if (d >= 0 && d < t.dim()) dynamic[static_cast<size_t>(d)] = true;
    }
  }
  if (!options_.dynamic.has_value()) {
    // Automatic dynamic: a dim seen with another size when this frame compiled before.
    SeenSizes& seen = seen_sizes_[code][name];
    std::vector<int64_t> now = t.sizes().vec();
    if (seen.sizes.size() != now.size()) {
      seen.sizes = now;
      seen.changed.assign(now.size(), false);
    }
    for (size_t d = 0; d < now.size(); ++d) {
      if (seen.sizes[d] != now[d]) seen.changed[d] = true;
      if (seen.changed[d]) dynamic[d] = true;
    }
    seen.sizes = now;
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < dynamic.size(); ++d) {
    bool is_fixed = std::find(fixed.begin(), fixed.end(), static_cast<int64_t>(d)) != fixed.end();
    if (dynamic[d] && !is_fixed) out.push_back(static_cast<int64_t>(d));
  }
  used_dynamic_ = used_dynamic_ || !out.empty();
  return out;
}

std::optional<CompileResult::Action> CaptureCompiler::decided(const FrameView& f) {
  PyObject* code = reinterpret_cast<PyObject*>(f.code);
  auto memo = eager_memo_.find(code);
  if (memo == eager_memo_.end() || !(memo->second == GlobalState::current())) return std::nullopt;
  return unhooked_.contains(code) ? CompileResult::Action::EagerUnhooked
                                  : CompileResult::Action::Eager;
}

CompileResult CaptureCompiler::compile(const FrameView& f) {
  used_dynamic_ = false;
  const size_t first_record = log_->records.size();
  // The unclean reasons (graph breaks, eager frames) of the records since `first_record`.
  auto unclean_reasons = [&](const CompileResult& r) {
    std::vector<std::string> out;
    if (r.action != CompileResult::Action::Run) out.push_back(r.reason);
    for (size_t i = first_record; i < log_->records.size(); ++i) {
      const CaptureRecord& rec = log_->records[i];
      if (!rec.captured || rec.graph_break) out.push_back(rec.reason);
    }
    return out;
  };
  HeldLogs symbolic_logs;
  CompileResult r = compile_once(f);
  const std::vector<std::string> symbolic_reasons =
      used_dynamic_ && !PyErr_Occurred() ? unclean_reasons(r) : std::vector<std::string>{};
  if (symbolic_reasons.empty()) {  // static, an error to raise, or captured cleanly
    symbolic_logs.release();
    return r;
  }
  // The frame broke or ran eagerly with shape symbols. Compiled again with static shapes: where
  // that breaks for the same reasons, the symbols were not the cause (a print, a data-dependent
  // branch) and the symbolic result is kept; otherwise the symbols were (a size used as a float,
  // an op with no symbolic shape rule) and the frame keeps static shapes from now on.
  PyObject* code = reinterpret_cast<PyObject*>(f.code);
  std::vector<std::string> symbolic_messages = symbolic_logs.take();
  std::vector<CaptureRecord> symbolic_records(log_->records.begin() + first_record,
                                              log_->records.end());
  log_->records.resize(first_record);
  auto memo = eager_memo_.extract(code);
  const bool was_unhooked = unhooked_.erase(code) > 0;
  static_codes_.insert(code);
  HeldLogs static_logs;
  CompileResult s = compile_once(f);
  if (!PyErr_Occurred() && unclean_reasons(s) == symbolic_reasons) {
    static_codes_.erase(code);
    log_->records.resize(first_record);
    log_->records.insert(log_->records.end(), symbolic_records.begin(), symbolic_records.end());
    if (!memo.empty()) eager_memo_.insert(std::move(memo));
    if (was_unhooked) unhooked_.insert(code);
    static_logs.take();
    for (const std::string& m : symbolic_messages) log_warning(m);
    return r;
  }
  static_logs.release();
  if (log_enabled("dynamic") || log_enabled("recompiles")) {
    log_warning("ember: " + frame_name(f) + " compiles with static shapes: with symbolic sizes " +
                symbolic_reasons.back());
  }
  return s;
}

CompileResult CaptureCompiler::compile_once(const FrameView& f) {
  auto t0 = std::chrono::steady_clock::now();
  CaptureRecord rec;
  rec.code = frame_name(f);
  CompileResult result;
  if (is_generated(reinterpret_cast<PyObject*>(f.code))) {
    result.action = CompileResult::Action::SkipCode;
    result.reason = "code generated by a graph break";
    return result;
  }
  if (!f.top && !touches_torch(f)) {
    // Nothing of torch reaches the frame (a config's __getattribute__, a helper on plain
    // values, called from code that runs eagerly): it runs as it is this call, as Dynamo leaves
    // such frames (has_tensor_in_frame); no graph, no guards, no record.
    result.action = CompileResult::Action::Eager;
    result.reason = "no tensor or torch module reaches the frame";
    return result;
  }
  // The cyclic garbage collector is paused while a frame is compiled: capture makes many
  // short-lived containers, and collections triggered by them took a fifth of capture time.
  struct PauseGc {
    int was_enabled = PyGC_Disable();
    ~PauseGc() {
      if (was_enabled == 1) PyGC_Enable();
    }
  } pause_gc;
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
  if (state_now.torch_function_modes > 0 || state_now.dispatch_modes > 0) {
    // A compiled graph would run under the mode without calling it (a TorchFunctionMode, the
    // DeviceContext of torch.set_default_device, a TorchDispatchMode): the call runs eagerly,
    // the frames it makes too (the mode's handlers among them, which run with the mode popped),
    // and entries compiled without modes never run under one (GlobalState).
    result.action = CompileResult::Action::EagerUnhooked;
    // Decided for this state: later calls under it run eagerly without a compile (decided()).
    if (eager_memo_.find(code_key) == eager_memo_.end()) {
      memo_keepalive_.push_back(nb::borrow(code_key));
    }
    eager_memo_[code_key] = state_now;
    unhooked_.insert(code_key);
    result.reason = state_now.torch_function_modes > 0
                        ? "a torch function mode is active (a TorchFunctionMode, or the default "
                          "device that torch.set_default_device set)"
                        : "a torch dispatch mode is active";
    if (f.top) {
      rec.reason = result.reason;
      log_->records.push_back(rec);
      if (log_enabled("graph_breaks") || log_enabled("breaks")) {
        log_warning("ember: " + rec.code + " runs eagerly: " + result.reason);
      }
    }
    return result;
  }
  auto memo = eager_memo_.find(code_key);
  if (memo != eager_memo_.end() && memo->second == state_now) {
    result.action = unhooked_.contains(code_key) ? CompileResult::Action::EagerUnhooked
                                                 : CompileResult::Action::Eager;
    result.reason = "runs eagerly (decided before)";
    return result;
  }
  const bool library_code = in_files(f.code, options_.library_prefixes);
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
  // Inputs that overlap where the graph mutates one: the functional graph would read values
  // from before the mutation. Calls whose inputs overlap so run the frame's own bytecode (an
  // entry whose guards admit just them); calls of distinct inputs keep their compiled entry.
  auto eager_for_aliasing = [&](Attempt& a) {
    give_up(CompileResult::Action::Run,
            "an input that the graph mutates overlaps another input in memory (calls with "
            "inputs aliased so run eagerly)");
    result.entry = std::make_unique<EagerFrame>(a.sources, a.guards);
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log_->records.push_back(rec);
  };
  InterpreterOptions iopts;
  iopts.library_prefixes = options_.library_prefixes;
  iopts.ddp_bucket_boundaries = !ddp_boundaries_off_ && !options_.fullgraph;
  {
    PyObject* code = reinterpret_cast<PyObject*>(f.code);
    iopts.dynamic_dims = [this, code](const std::string& name, const at::Tensor& t,
                                      graph::InputKind kind) {
      return dynamic_dims(code, name, t, kind);
    };
  }
  try {
    std::unique_ptr<Attempt> a;
    std::unique_ptr<GraphRunner> runner;
    std::string break_reason;
    auto capture_start = std::chrono::steady_clock::now();
    auto capture_done = [&] {
      rec.capture_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_start).count();
    };
    try {
      a = run_attempt(f, iopts, options_.executor.compile, -1);
      capture_done();
    } catch (const GraphBreak& b) {
      if (options_.fullgraph && b.data_dependent()) throw DataDependentError(b.what());
      if (options_.fullgraph) throw Unsupported(b.what());
      break_reason = b.what();
      a = b.nested() ? run_attempt(f, iopts, options_.executor.compile, -1, b.count())
                     : run_attempt(f, iopts, options_.executor.compile, b.pc());
      EMBER_INTERNAL_ASSERT(a->interp->stop_state().pc >= 0)
          << "the capture did not stop at its graph break";
      capture_done();
    }
    std::vector<at::Tensor> tensors;
    if (break_reason.empty()) {
      std::vector<AttrStore> stores;
      OutputTemplate output = value_template(a->value, *a->interp, tensors, stores);
      runner = finish(*a, tensors, options_, f);
      if (add_aliasing_guards(*a, *runner, f)) {
        eager_for_aliasing(*a);
        return result;
      }
      fill_record(rec, *runner, a->guards, a->sources, a->interp->input_sources().size());
      auto entry = std::make_unique<CompiledFrame>(
          a->sources, a->guards, a->interp->input_sources(), std::move(runner), std::move(output));
      entry->set_stores(std::move(stores));
      entry->prime(f);
      entry->set_time_guards(options_.executor.compile.debug.host_step_times);
      result.entry = std::move(entry);
    } else {
      const StopState& state = a->interp->stop_state();
      std::vector<OutputTemplate> templates;
      std::vector<AttrStore> stores;
      IteratorRests rests;
      try {
        templates = state_templates(state, *a->interp, tensors, stores, rests);
      } catch (const Unsupported& e) {
        throw Unsupported(break_reason + " (no graph break there: " + e.what() + ")");
      }
      runner = finish(*a, tensors, options_, f);
      if (add_aliasing_guards(*a, *runner, f)) {
        eager_for_aliasing(*a);
        return result;
      }
      if (runner->has_mutations()) {
        // The caller's tensors hold the mutations once the segment has run: the state reads the
        // inputs it holds from their sources (an optimizer's step before a scheduler's).
        // Tensors it computed stay graph outputs at the indices of the first pass.
        std::vector<at::Tensor> again;
        try {
          templates =
              state_templates(state, *a->interp, again, stores, rests, /*inputs_as_sources=*/true);
        } catch (const Unsupported& e) {
          throw Unsupported(break_reason + " (no graph break there: " + e.what() + ")");
        }
        EMBER_INTERNAL_ASSERT(again.size() <= tensors.size())
            << "the state's second pass met " << again.size() << " computed tensors, the first "
            << tensors.size();
        for (size_t i = 0; i < again.size(); ++i) {
          EMBER_INTERNAL_ASSERT(again[i].unsafeGetTensorImpl() == tensors[i].unsafeGetTensorImpl())
              << "the state's second pass met its computed tensors in another order";
        }
      }
      fill_record(rec, *runner, a->guards, a->sources, a->interp->input_sources().size());
      auto segment = std::make_shared<Segment>();
      segment->sources = a->sources;
      segment->input_sources = a->interp->input_sources();
      segment->runner = std::move(runner);
      segment->values = std::move(templates);
      segment->stores = std::move(stores);
      segment->code = nb::borrow(reinterpret_cast<PyObject*>(f.code));
      segment->globals = nb::borrow(f.globals);
      segment->builtins = nb::borrow(f.builtins);
      segment->nargs = num_arg_slots(f.code);
      nb::object callable = make_segment_callable(segment);
      BreakCode code;
      try {
        code = build_break_code(f.code, f.globals, *decoded(f.code), state, callable);
      } catch (const Unsupported& e) {
        throw Unsupported(break_reason + " (no graph break there: " + e.what() + ")");
      }
      mark_generated(code.code.ptr());
      for (const nb::object& c : code.generated) {
        mark_generated(c.ptr());
        memo_keepalive_.push_back(c);
      }
      rec.graph_break = true;
      rec.reason = break_reason;
      if (log_enabled("graph_breaks") || log_enabled("breaks")) {
        log_warning("ember: graph break in " + rec.code + ": " + break_reason);
      }
      result.entry =
          std::make_unique<BreakFrame>(a->sources, a->guards, code.code, num_arg_slots(f.code));
    }
    rec.captured = true;
    if (log_enabled("dynamic") && rec.graph.find("  symbol s") != std::string::npos) {
      // The symbols (from the graph's text) and the size guards (from the guards' text).
      std::string text = "ember: " + rec.code + " compiled with shape symbols:";
      auto lines_with = [&](const std::string& from, const std::string& prefix) {
        size_t pos = 0;
        while ((pos = from.find(prefix, pos)) != std::string::npos) {
          size_t end = from.find('\n', pos);
          text += "\n  " + from.substr(pos, end - pos);
          pos = end == std::string::npos ? from.size() : end;
        }
      };
      lines_with(rec.graph, "symbol s");
      lines_with(rec.guard_text, "SIZE_RELATIONS");
      if (!rec.symbolic_fallback.empty()) text += "\n  but " + rec.symbolic_fallback;
      log_warning(text);
    }
    if (log_enabled("guards")) log_warning("ember: guards of " + rec.code + "\n" + rec.guard_text);
    if (log_enabled("graph")) log_warning("ember: graph of " + rec.code + "\n" + rec.graph);
    if (log_enabled("output_code")) {
      for (const std::string& source : rec.kernel_sources) {
        log_warning("ember: kernel of " + rec.code + "\n" + source);
      }
    }
    result.action = CompileResult::Action::Run;
  } catch (const RunsUnhooked& e) {
    if (options_.fullgraph) {
      unsupported(e.what());
    } else {
      eager_memo_[code_key] = state_now;
      memo_keepalive_.push_back(nb::borrow(code_key));
      unhooked_.insert(code_key);
      give_up(CompileResult::Action::EagerUnhooked, e.what());
    }
  } catch (const EagerThisCall& e) {
    // Not a failure to capture the program (not raised under fullgraph, not remembered): this
    // call makes what the next capture reads.
    give_up(CompileResult::Action::Eager, e.what());
  } catch (const Unsupported& e) {
    const std::string_view what = e.what();
    if (!ddp_boundaries_off_ && what.starts_with(kDdpBucketBoundary)) {
      // A DDP bucket boundary that cannot be a graph break (inside a with block, or no state to
      // resume from): captured whole instead (Note [DDP bucket boundaries]).
      ddp_boundaries_off_ = true;
      struct Restore {
        bool& off;
        ~Restore() { off = false; }
      } restore{ddp_boundaries_off_};
      return compile_once(f);
    }
    unsupported(e.what());
  } catch (nb::python_error& e) {
    std::string msg = e.what();
    if (reads_tensor_data(msg)) {
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
      // The exception's type and message, without the traceback that what() leads with.
      std::string raised = msg;
      try {
        raised = nb::cast<std::string>(e.type().attr("__name__")) + ": " +
                 nb::cast<std::string>(nb::str(e.value()));
      } catch (...) {
      }
      give_up(CompileResult::Action::Eager, "the program raised " + raised);
    }
  } catch (const UserError&) {
    set_python_error(std::current_exception());
    give_up(CompileResult::Action::Eager, "user error");
  } catch (...) {
    set_python_error(std::current_exception());
    give_up(CompileResult::Action::Eager, "internal error");
  }
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_->records.push_back(std::move(rec));
  return result;
}

}  // namespace ember::capture
