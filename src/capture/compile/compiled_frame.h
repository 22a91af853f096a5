/// \file
/// A compiled frame: what runs in place of a Python frame whose whole body was captured as one
/// graph. Its call path is C++ only: evaluate the sources, check the guards, gather the graph
/// inputs, run the graph (graph_runner.h), rebuild the return value.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "capture/compile/graph_runner.h"
#include "capture/compile/output_template.h"
#include "capture/guards/guards.h"
#include "capture/guards/source.h"
#include "capture/hook/frame_hook.h"
#include "capture/interp/side_effects.h"

namespace ember::capture {

class CompiledFrame final : public CacheEntry {
 public:
  CompiledFrame(SourceTable sources, GuardSet guards, std::vector<int> input_sources,
                std::unique_ptr<GraphRunner> runner, OutputTemplate output);

  int check(const FrameView& f) override;
  PyObject* run(const FrameView& f) override;
  std::string first_failure(const FrameView& f) override;
  /// Reads the sources for the call that compiled the entry (which the hook runs without a
  /// check), so that run() need not read them with the hook active.
  void prime(const FrameView& f) { check(f); }
  /// Attribute stores to replay after the graph (side_effects.h).
  void set_stores(std::vector<AttrStore> stores) { stores_ = std::move(stores); }
  /// Each check() adds its host time to the process totals (runtime/host_times.h, "guards"):
  /// under debug.host_step_times.
  void set_time_guards(bool on) { time_guards_ = on; }

  const SourceTable& sources() const { return sources_; }
  const GuardSet& guards() const { return guards_; }
  const GraphRunner& runner() const { return *runner_; }

 private:
  SourceTable sources_;
  GuardSet guards_;
  std::vector<int> input_sources_;
  std::unique_ptr<GraphRunner> runner_;
  OutputTemplate output_;
  std::vector<AttrStore> stores_;
  bool time_guards_ = false;
  /// The source values of the last check() on this thread, reused by the run() that follows.
  /// (Allocated per thread and never freed: no Python object is released at thread exit.)
  static thread_local std::vector<nanobind::object>* values_;
  static thread_local const CompiledFrame* checked_;
};

/// A frame with a graph break: its guards, and transformed code that runs the graph before the
/// break, the unsupported instruction and a resume function (graph_break.h). run() calls the
/// transformed code with the frame's arguments (the frame's own bytecode never runs).
class BreakFrame final : public CacheEntry {
 public:
  BreakFrame(SourceTable sources, GuardSet guards, nanobind::object code, int nargs)
      : sources_(std::move(sources)),
        guards_(std::move(guards)),
        code_(std::move(code)),
        nargs_(nargs) {}

  int check(const FrameView& f) override;
  PyObject* run(const FrameView& f) override;
  std::string first_failure(const FrameView& f) override;

 private:
  SourceTable sources_;
  GuardSet guards_;
  nanobind::object code_;
  nanobind::object fn_;       ///< the transformed code as a function of the frame's globals
  nanobind::object globals_;  ///< those globals
  int nargs_ = 0;
};

/// A decision to run the frame's own bytecode, for the calls its guards admit: a call whose
/// capture could not be compiled for a reason of that call's values (inputs that alias where
/// the graph mutates one), remembered so that such calls neither capture again nor make the
/// compiled entries of other calls run eagerly. The hook runs the frame as it is (run() is
/// never called).
class EagerFrame final : public CacheEntry {
 public:
  EagerFrame(SourceTable sources, GuardSet guards)
      : sources_(std::move(sources)), guards_(std::move(guards)) {}

  int check(const FrameView& f) override;
  PyObject* run(const FrameView& f) override;
  std::string first_failure(const FrameView& f) override;
  bool runs_original() const override { return true; }

 private:
  SourceTable sources_;
  GuardSet guards_;
};

}  // namespace ember::capture
