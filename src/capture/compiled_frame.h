/// \file
/// A compiled frame: what runs in place of a Python frame whose whole body was captured as one
/// graph. Its call path is C++ only: evaluate the sources, check the guards, gather the graph
/// inputs, run the Executor, rebuild the return value.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "capture/guards.h"
#include "capture/hook/frame_hook.h"
#include "capture/source.h"
#include "runtime/executor.h"

namespace ember::capture {

/// How the return value is rebuilt from the graph's outputs.
struct OutputTemplate {
  enum class Kind : uint8_t { Tensor, Constant, Tuple, List, Dict, Source };
  Kind kind = Kind::Constant;
  int index = -1;          ///< Tensor: graph output; Source: the source read
  nanobind::object value;  ///< Constant: the value; Dict: the keys tuple
  std::vector<OutputTemplate> items;
};

class CompiledFrame final : public CacheEntry {
 public:
  CompiledFrame(SourceTable sources, GuardSet guards, std::vector<int> input_sources,
                std::unique_ptr<runtime::Executor> executor, OutputTemplate output);

  int check(const FrameView& f) override;
  PyObject* run(const FrameView& f) override;
  std::string first_failure(const FrameView& f) override;

  const SourceTable& sources() const { return sources_; }
  const GuardSet& guards() const { return guards_; }
  const runtime::Executor& executor() const { return *executor_; }

 private:
  nanobind::object build(const OutputTemplate& t, const std::vector<at::Tensor>& outs,
                         const std::vector<nanobind::object>& values) const;

  SourceTable sources_;
  GuardSet guards_;
  std::vector<int> input_sources_;
  std::unique_ptr<runtime::Executor> executor_;
  OutputTemplate output_;
  /// The source values of the last check() on this thread, reused by the run() that follows.
  /// (Allocated per thread and never freed: no Python object is released at thread exit.)
  static thread_local std::vector<nanobind::object>* values_;
  static thread_local const CompiledFrame* checked_;
};

}  // namespace ember::capture
