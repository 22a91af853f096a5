#include "capture/compile/compiled_frame.h"

#include <torch/csrc/autograd/python_variable.h>

#include "runtime/host_times.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::capture {

thread_local std::vector<nb::object>* CompiledFrame::values_ = nullptr;
thread_local const CompiledFrame* CompiledFrame::checked_ = nullptr;

CompiledFrame::CompiledFrame(SourceTable sources, GuardSet guards, std::vector<int> input_sources,
                             std::unique_ptr<GraphRunner> runner, OutputTemplate output)
    : sources_(std::move(sources)),
      guards_(std::move(guards)),
      input_sources_(std::move(input_sources)),
      runner_(std::move(runner)),
      output_(std::move(output)) {}

int CompiledFrame::check(const FrameView& f) {
  runtime::HostStepClock clock(time_guards_, runtime::HostStep::Guards);
  checked_ = nullptr;
  if (values_ == nullptr) values_ = new std::vector<nb::object>();
  std::vector<nb::object>& values = *values_;
  if (sources_.evaluate(f, values) >= 0 || !guards_.check(values)) {
    for (auto& v : values) v.reset();
    return 0;
  }
  checked_ = this;
  return 1;
}

std::string CompiledFrame::first_failure(const FrameView& f) {
  std::vector<nb::object> values;
  int failed = sources_.evaluate(f, values);
  if (failed >= 0) return sources_.name(failed) + " could not be read";
  return guards_.first_failure(values, sources_);
}

PyObject* CompiledFrame::run(const FrameView& f) {
  try {
    // The values of this call's sources: those check() just read, or (for the call that
    // compiled the entry, which the hook runs without a check) read now. They are moved into a
    // local first: reading a source or rebuilding the result may run Python code that the hook
    // intercepts, which may check another entry on this thread.
    std::vector<nb::object> values;
    if (checked_ == this && values_ != nullptr) {
      values = std::move(*values_);
    } else if (int failed =
                   [&] {
                     HookPause pause;
                     return sources_.evaluate(f, values);
                   }();
               failed >= 0) {
      PyErr_Format(PyExc_RuntimeError, "ember: %s could not be read for a compiled frame",
                   sources_.name(failed).c_str());
      return nullptr;
    }
    checked_ = nullptr;
    std::vector<at::Tensor> inputs;
    inputs.reserve(input_sources_.size());
    for (int s : input_sources_) {
      inputs.push_back(THPVariable_Unpack(values[static_cast<size_t>(s)].ptr()));
    }
    std::vector<at::Tensor> outs = runner_->run(inputs);
    std::vector<nb::object> memo;
    nb::object result = build_output(output_, outs, values, memo);
    apply_stores(stores_, outs, values, memo);
    return result.release().ptr();
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

namespace {

/// check() of an entry that reads its sources afresh on each call: 1 when every source reads
/// and every guard passes, else 0.
int sources_pass(const SourceTable& sources, const GuardSet& guards, const FrameView& f) {
  std::vector<nb::object> values;
  if (sources.evaluate(f, values) >= 0) return 0;
  return guards.check(values) ? 1 : 0;
}

/// first_failure() of such an entry.
std::string sources_failure(const SourceTable& sources, const GuardSet& guards,
                            const FrameView& f) {
  std::vector<nb::object> values;
  int failed = sources.evaluate(f, values);
  if (failed >= 0) return sources.name(failed) + " could not be read";
  return guards.first_failure(values, sources);
}

}  // namespace

int BreakFrame::check(const FrameView& f) {
  return sources_pass(sources_, guards_, f);
}

std::string BreakFrame::first_failure(const FrameView& f) {
  return sources_failure(sources_, guards_, f);
}

PyObject* BreakFrame::run(const FrameView& f) {
  if (!fn_.is_valid() || globals_.ptr() != f.globals) {
    PyObject* fn = PyFunction_New(code_.ptr(), f.globals);
    if (fn == nullptr) return nullptr;
    fn_ = nb::steal(fn);
    globals_ = nb::borrow(f.globals);
  }
  return PyObject_Vectorcall(fn_.ptr(), f.localsplus, static_cast<size_t>(nargs_), nullptr);
}

int EagerFrame::check(const FrameView& f) {
  return sources_pass(sources_, guards_, f);
}

std::string EagerFrame::first_failure(const FrameView& f) {
  return sources_failure(sources_, guards_, f);
}

PyObject* EagerFrame::run(const FrameView&) {
  PyErr_SetString(PyExc_SystemError,
                  "ember: an entry that runs the frame's own bytecode was asked to run it itself");
  return nullptr;
}

}  // namespace ember::capture
