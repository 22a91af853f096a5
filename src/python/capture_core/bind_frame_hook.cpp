/// \file
/// Bindings of the frame hook (frame_hook.h) into ember._capture_core, and two test compilers:
///  - PyCompiler(callback): callback(code, locals) on a miss, where locals holds FrameView::value
///    of every localsplus slot (None when unbound); it returns None (run this call eagerly),
///    "skip" (SkipCode) or a pair (guard, run) of callables over the same list: guard(locals) ->
///    bool, run(locals) -> the frame's return value;
///  - ConstCompiler(value): every frame it sees gets an entry implemented in C++ whose check()
///    passes and whose run() returns `value`, to measure the hook without Python callbacks.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "capture/hook/compat.h"
#include "capture/hook/frame_hook.h"
#include "python/capture_core/capture_core.h"

namespace nb = nanobind;

namespace ember::python {
namespace {

using capture::CacheEntry;
using capture::CompileResult;
using capture::FrameCompiler;
using capture::FrameView;

nb::list locals_list(const FrameView& f) {
  nb::list out;
  for (int i = 0; i < f.nlocalsplus; ++i) {
    PyObject* v = f.value(i);
    out.append(v != nullptr ? nb::borrow(v) : nb::none());
  }
  return out;
}

class PyEntry : public CacheEntry {
 public:
  PyEntry(nb::object guard, nb::object run) : guard_(std::move(guard)), run_(std::move(run)) {}
  int check(const FrameView& f) override {
    try {
      nb::object r = guard_(locals_list(f));
      int truth = PyObject_IsTrue(r.ptr());
      return truth;  // -1 with the exception set
    } catch (nb::python_error& e) {
      e.restore();
      return -1;
    }
  }

  PyObject* run(const FrameView& f) override {
    try {
      return run_(locals_list(f)).release().ptr();
    } catch (nb::python_error& e) {
      e.restore();
      return nullptr;
    }
  }

 private:
  nb::object guard_;
  nb::object run_;
};

class PyCompiler : public FrameCompiler {
 public:
  explicit PyCompiler(nb::object callback) : callback_(std::move(callback)) {}

  CompileResult compile(const FrameView& f) override {
    CompileResult out;
    try {
      nb::object r = callback_(nb::borrow(reinterpret_cast<PyObject*>(f.code)), locals_list(f));
      if (r.is_none()) {
        out.reason = "callback returned None";
        return out;
      }
      if (nb::isinstance<nb::str>(r) && nb::cast<std::string>(r) == "skip") {
        out.action = CompileResult::Action::SkipCode;
        out.reason = "callback returned 'skip'";
        return out;
      }
      nb::tuple pair = nb::cast<nb::tuple>(r);
      if (pair.size() != 2) throw nb::type_error("expected None, 'skip' or (guard, run)");
      out.action = CompileResult::Action::Run;
      out.entry = std::make_unique<PyEntry>(pair[0], pair[1]);
    } catch (nb::python_error& e) {
      e.restore();
    } catch (nb::builtin_exception& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (nb::cast_error&) {
      PyErr_SetString(PyExc_TypeError,
                      "PyCompiler callback must return None, 'skip' or (guard, run)");
    }
    if (PyErr_Occurred()) out = CompileResult{};  // Eager with the exception set: propagates
    return out;
  }

 private:
  nb::object callback_;
};

class ConstEntry : public CacheEntry {
 public:
  explicit ConstEntry(PyObject* value) : value_(Py_NewRef(value)) {}
  ~ConstEntry() override { Py_DECREF(value_); }
  int check(const FrameView&) override { return 1; }
  PyObject* run(const FrameView&) override { return Py_NewRef(value_); }

 private:
  PyObject* value_;
};

class ConstCompiler : public FrameCompiler {
 public:
  explicit ConstCompiler(nb::object value) : value_(std::move(value)) {}
  CompileResult compile(const FrameView&) override {
    CompileResult out;
    out.action = CompileResult::Action::Run;
    out.entry = std::make_unique<ConstEntry>(value_.ptr());
    return out;
  }

 private:
  nb::object value_;
};

// Throws a C++ exception from compile(): the hook must turn it into a Python RuntimeError.
class ThrowCompiler : public FrameCompiler {
 public:
  explicit ThrowCompiler(std::string message) : message_(std::move(message)) {}
  CompileResult compile(const FrameView&) override { throw std::runtime_error(message_); }

 private:
  std::string message_;
};

// A function's code, a bound method's function's code, or None.
nb::object default_top_code(nb::handle fn) {
  nb::handle target = fn;
  if (PyMethod_Check(fn.ptr())) target = PyMethod_GET_FUNCTION(fn.ptr());
  if (PyFunction_Check(target.ptr())) return nb::borrow(PyFunction_GET_CODE(target.ptr()));
  return nb::none();
}

}  // namespace

void bind_frame_hook(nb::module_& m) {
  // A CompiledFunction alive at exit (a module-level decorator) keeps its compiler instance until
  // the module dicts are cleared, after nanobind's leak check: that is not a leak.
  nb::set_leak_warnings(false);
  nb::class_<FrameCompiler>(m, "FrameCompiler", "Base of the frame compilers (implemented in C++)");
  nb::class_<PyCompiler, FrameCompiler>(m, "PyCompiler",
                                        "Test compiler driven by a Python callback")
      .def(nb::init<nb::object>(), nb::arg("callback"));
  nb::class_<ConstCompiler, FrameCompiler>(m, "ConstCompiler",
                                           "Test compiler: every frame returns `value`")
      .def(nb::init<nb::object>(), nb::arg("value"));

  nb::class_<ThrowCompiler, FrameCompiler>(m, "ThrowCompiler",
                                           "Test compiler: compile() throws a C++ exception")
      .def(nb::init<std::string>(), nb::arg("message"));

  m.def(
      "compile",
      [](nb::object fn, std::shared_ptr<FrameCompiler> compiler, nb::object top_code) {
        if (top_code.is_none()) top_code = default_top_code(fn);
        PyObject* cf =
            capture::make_compiled_function(fn.ptr(), top_code.ptr(), std::move(compiler));
        if (cf == nullptr) throw nb::python_error();
        return nb::steal(cf);
      },
      nb::arg("fn"), nb::arg("compiler"), nb::arg("top_code") = nb::none(),
      "A CompiledFunction calling `fn` with `compiler` active on the calling thread");
  m.def("set_skip_prefixes", &capture::set_skip_prefixes, nb::arg("prefixes"));
  m.def("set_cache_size_limit", &capture::set_cache_size_limit, nb::arg("limit"));
  m.def("hook_stats", &hook_stats_dict);
  m.def(
      "_datastack_top", []() { return ember_compat_datastack_top(PyThreadState_Get()); },
      "The thread's data-stack top as an address (leak tests)");
  m.def(
      "_hook_installed", []() { return capture::hook_installed(); },
      "Whether ember's eval function is installed now (tests)");
  m.def("reset_hook_stats", &capture::reset_hook_stats);
  m.def(
      "clear_cache",
      [](nb::object code) {
        if (!code.is_none() && !PyCode_Check(code.ptr())) {
          throw nb::type_error("clear_cache expects a code object or None");
        }
        capture::clear_cache(code.is_none() ? nullptr
                                            : reinterpret_cast<PyCodeObject*>(code.ptr()));
      },
      nb::arg("code") = nb::none());
}

}  // namespace ember::python
