"""ember.compile: capture by Python bytecode analysis, in C++ (the TorchDynamo part of ember).

    model = ember.compile(model)            # an nn.Module, or any function
    @ember.compile
    def f(x): ...

A PEP 523 frame hook (ember._C, src/capture/hook) sees the frames of the compiled function and of
the user functions it calls. Each frame is interpreted symbolically (src/capture/interp/interpreter.cpp):
tensor operations run on tracer tensors and become an ATen-level graph, user functions and module
forwards are inlined, and what the frame read is guarded. The graph is compiled by ember's
compiler (or by another backend, given a torch.fx.GraphModule of it), and later calls whose guards
pass run it from C++ without evaluating the frame. A frame that cannot be captured whole runs
eagerly with the reason logged (EMBER_LOGS=graph_breaks) and counted in ember.metrics; its callees
are still captured. See docs/design/capture.md.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import sys
import sysconfig
import warnings
from typing import Any, Callable

import torch

from . import _C, artifacts, config, metrics
from .errors import CompileError

_prefixes_set = False


def library_prefixes() -> list[str]:
    """File prefixes of code that is not captured but runs as it is: torch, ember itself (its
    benchmark models excluded) and the standard library (its site-packages excluded)."""
    prefixes = [os.path.dirname(torch.__file__) + os.sep, "<frozen "]
    # ember itself, but not the models of its benchmark suite (ember/bench), which are user code.
    here = os.path.dirname(__file__)
    for name in sorted(os.listdir(here)):
        if name != "bench":
            path = os.path.join(here, name)
            prefixes.append(path + os.sep if os.path.isdir(path) else path)
    stdlib = sysconfig.get_paths()["stdlib"]
    try:
        names = os.listdir(stdlib)
    except OSError:
        names = []
    for name in sorted(names):
        if name in ("site-packages", "dist-packages"):
            continue
        path = os.path.join(stdlib, name)
        prefixes.append(path + os.sep if os.path.isdir(path) else path)
    return prefixes


def _install_reset() -> None:
    """torch.compiler.reset() (torch._dynamo.reset) clears ember.compile's compiled frames too, as
    it clears torch.compile's: every ember.compile'd function compiles again on its next call.
    torch has no registry for this, so its reset is wrapped once (torch.compiler.reset looks it
    up on torch._dynamo at each call)."""
    import torch._dynamo
    original = torch._dynamo.reset
    if getattr(original, "_ember_clears_capture", False):
        return

    @functools.wraps(original)
    def reset() -> None:
        original()
        _C.clear_capture_cache(None)

    reset._ember_clears_capture = True
    torch._dynamo.reset = reset


def _honour_disable() -> None:
    """torch.compiler.disable, as under torch.compile: the wrapper of a disabled function runs
    with the frame hook off for it and everything it calls (recursive=True, the default); the
    recursive=False wrapper marks the function's own code uncompiled (what it calls still is).
    The wrappers are torch's, one code object each for every disabled function."""
    try:
        from torch._dynamo import decorators
        from torch._dynamo import disable
    except ImportError:
        return
    _C.capture_run_unhooked(disable(lambda: None).__code__)
    code = getattr(decorators, "_nonrecursive_disable_wrapper_code", None)
    if code is not None and "fn" in code.co_freevars:
        _C.capture_disable_closure_function(code, code.co_freevars.index("fn"))


def _setup(options: dict) -> None:
    """The frame hook's process-wide settings, from `options` (ember.config.compile_options())."""
    global _prefixes_set
    if not _prefixes_set:
        _C.set_capture_skip_prefixes(library_prefixes())
        _install_reset()
        _honour_disable()
        _prefixes_set = True
    limit = options["capture.cache_size_limit"]
    if limit < 0:
        raise CompileError(f"ember.config.cache_size_limit must be an int >= 0, got {limit!r}")
    _C.set_capture_cache_size_limit(limit)
    if options["capture.report"]:
        from .compile_report import report_at_exit

        report_at_exit(options["capture.report"])
    topics = [t for t in options["capture.logs"].split(",") if t]
    _C.set_capture_log_topics(",".join(topics + _torch_logs_topics()))


# TORCH_LOGS names (Dynamo's artifacts and logs) with an ember topic of the same meaning.
_TORCH_LOGS = {"graph_breaks": "graph_breaks", "recompiles": "recompiles", "guards": "guards",
               "graph_code": "graph", "graph": "graph", "output_code": "output_code",
               "dynamic": "dynamic"}


def _torch_logs_topics() -> list[str]:
    """ember's log topics that torch._logging has on (TORCH_LOGS, torch._logging.set_logs):
    Dynamo's artifacts and logs of the same meaning, and the "ember" log itself (TORCH_LOGS=ember:
    graph breaks and recompiles; +ember: every topic)."""
    try:
        from torch._logging._internal import log_registry, log_state
    except ImportError:
        return []
    out = []
    level = log_state.log_qname_to_level.get("ember")
    if level is not None:
        out += ["all"] if level <= logging.DEBUG else ["graph_breaks", "recompiles"]
    for name, topic in _TORCH_LOGS.items():
        if log_registry.is_artifact(name):
            on = log_state.is_artifact_enabled(name)
        else:
            qnames = log_registry.log_alias_to_log_qnames.get(name, [])
            on = any(log_state.log_qname_to_level.get(q, logging.CRITICAL + 1) <= logging.INFO
                     for q in qnames)
        if on and topic not in out:
            out.append(topic)
    return out


class CompiledModule(torch.nn.Module):
    """What ember.compile returns for an nn.Module: calls go through ember's capture; attributes,
    parameters and state_dict are the original module's (`_orig_mod`)."""

    def __init__(self, mod: torch.nn.Module, compiled: Callable):
        super().__init__()
        self._orig_mod = mod
        self.__dict__["_ember_compiled"] = compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["_ember_compiled"](*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["_ember_compiled"](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._modules["_orig_mod"], name)


def _record_metrics(log: Any, seen: list) -> None:
    records = log.records()
    for r in records[seen[0]:]:
        if r["graph_break"]:
            metrics.counters["graph_breaks"] += 1
            metrics.fallback_reasons.append(f"{r['code']}: graph break: {r['reason']}")
        if r["captured"]:
            metrics.counters["captured_frames"] += 1
            metrics.counters["graphs"] += 1
            metrics.counters["nodes"] += r["nodes"]
            metrics.counters["kernels"] += r["kernels"]
            metrics.counters["extern_steps"] += r["extern_steps"]
            metrics.counters["view_steps"] += r["view_steps"]
            metrics.counters["fused_nodes"] += r["fused_nodes"]
            metrics.counters["folded_nodes"] += r["folded_nodes"]
            metrics.counters["dynamic_graphs"] += int(r["symbolic"])
            metrics.counters["parameter_kernels"] += r["parameter_kernels"]
            metrics.counters["fused_attention"] += r["fused_attention"]
            metrics.counters["causal_attention"] += r["causal_attention"]
            if r["symbolic_fallback"]:
                metrics.fallback_reasons.append(f"{r['code']}: symbolic graph {r['symbolic_fallback']}")
            metrics.counters["training_graphs"] += int(r.get("training", False))
            for note in r["codegen_notes"]:
                metrics.counters["codegen_notes"] += 1
                metrics.fallback_reasons.append(f"{r['code']}: not generated: {note}")
        else:
            metrics.counters["eager_frames"] += 1
            metrics.fallback_reasons.append(f"{r['code']}: {r['reason']}")
    seen[0] = len(records)


def compile(model: Any = None, *, backend: Any = "ember", fullgraph: bool = False,
            dynamic: bool | None = None, mode: str | None = None, options: dict | None = None,
            disable: bool = False) -> Any:
    """Compiles a function or nn.Module by capturing its Python bytecode (like torch.compile).

    backend: "ember" (ember's compiler, the default), "inductor" (PyTorch's Inductor), "eager"
    (the captured graph's torch.fx.GraphModule runs as it is), or any callable
    `backend(gm, example_inputs) -> callable` (torch.compile's convention): each captured graph
    becomes a GraphModule of ATen ops (`torch.ops.aten.*` calls), the backend gets it with the
    graph's inputs of the first call, and the callable it returns runs the graph on later calls
    (inputs as positional tensors, returning a tuple or list of output tensors).
    fullgraph=True: a frame that cannot be captured whole raises ember.Unsupported naming the
    reason and the source line, instead of running eagerly.
    dynamic: True makes every dim of a tensor input a shape symbol (one graph for all sizes);
        False keeps every size static; None (the default) takes ember.config.dynamic
        (EMBER_DYNAMIC), whose default is automatic dynamic: the first call compiles static,
        and a dim seen changing on a recompile becomes symbolic.
        torch._dynamo.mark_dynamic / mark_static on an input are honoured.
    mode: as torch.compile's. "reduce-overhead": each graph on one CUDA device is captured into
    a CUDA graph on its second call and replayed from then on (inputs copied into static
    buffers, parameters read in place, outputs returned as copies); a graph that cannot be
    captured runs as usual, with a warning naming why. "max-autotune-no-cudagraphs": matrix
    products (mm, addmm, bmm) on a CUDA device also get Triton templates, each timed against
    cuBLAS at its first call, the faster kept and remembered on disk; "max-autotune": both. On
    the CPU every mode is the default.
    options: ember.config options for this compile, by name (docs/env_vars.md); one of mode= and
    options=, as torch.compile asks.
    disable: True returns `model` itself, uncompiled (torch.compile's disable=).
    """
    if model is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic,
                                 mode=mode, options=options, disable=disable)
    if disable:
        return model
    return _compile(model, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                    options=options)[0]


def _dynamic_default(mode: str) -> bool | None:
    """ember.config.dynamic (EMBER_DYNAMIC) as a dynamic= value."""
    if mode not in ("automatic", "true", "false"):
        raise CompileError(f"ember.config.dynamic must be 'automatic', 'true' or 'false', got "
                           f"{mode!r}")
    return {"true": True, "false": False}.get(mode)


def _compile(model: Any, *, backend: Any, fullgraph: bool, dynamic: bool | None,
             mode: str | None, options: dict | None = None) -> tuple[Any, Any]:
    """compile(), returning the capture compiler too (for explain)."""
    graph_backend = _graph_backend(backend)
    overrides = config.mode_and_options(mode, options, "ember.compile")
    if not callable(model):
        raise CompileError(f"ember.compile: expected a function or nn.Module, got "
                           f"{type(model).__name__}")
    compiled_options = config.compile_options(overrides)
    _setup(compiled_options)
    if dynamic is None:
        dynamic = _dynamic_default(compiled_options["capture.dynamic"])
    compiler = _C.CaptureCompiler(fullgraph=fullgraph, options=compiled_options,
                                  library_prefixes=library_prefixes(), backend=graph_backend,
                                  dynamic=dynamic)
    if isinstance(model, torch.nn.Module):
        forward = type(model).forward
        top = getattr(forward, "__code__", None)
        compiled = _C.capture_function(model, top, compiler)
        out = CompiledModule(model, compiled)
    else:
        fn = getattr(model, "__func__", model)
        top = getattr(fn, "__code__", None)
        out = _C.capture_function(model, top, compiler)
    _LOGS.append((compiler.log, [0]))
    artifacts.register(out, compiler.log)
    return out, compiler


def _eager_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """backend="eager": the captured graph's GraphModule runs as it is."""
    return gm


def _graph_backend(backend: Any) -> Callable | None:
    """The callable that compiles each captured graph for `backend`; None for ember's compiler."""
    if isinstance(backend, str):
        if backend == "ember":
            return None
        if backend == "eager":
            return _eager_backend
        if backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx
    elif callable(backend):
        return backend
    raise CompileError(f"ember.compile: unknown backend {backend!r}; expected 'ember', "
                       "'inductor', 'eager' or a callable(gm, example_inputs) -> callable")


# The logs of the compilers made in this process, for ember.metrics (records are read when
# metrics are read). The logs, not the compilers: a compiler lives as long as its compiled
# function, and with it its cache entries and what their guards hold (the model).
_LOGS: list = []


def sync_metrics() -> None:
    """Adds what the capture compilers did since the last call to ember.metrics.counters."""
    for log, seen in _LOGS:
        _record_metrics(log, seen)


def records() -> list[dict]:
    """Every frame compile of every ember.compile in this process."""
    out = []
    for log, _ in _LOGS:
        out.extend(log.records())
    return out


@dataclasses.dataclass
class ExplainOutput:
    """What ember.explain reports: one entry per frame compile."""

    graph_count: int
    graph_break_count: int
    break_reasons: list[str]
    graphs: list[str]
    ops_per_graph: list[list[str]]
    guards: list[str]
    compile_seconds: float

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}",
                 f"Graph break count: {self.graph_break_count}",
                 f"Op count: {sum(len(ops) for ops in self.ops_per_graph)}"]
        if self.break_reasons:
            lines.append("Break reasons:")
            lines += [f"  {i + 1}. {r}" for i, r in enumerate(self.break_reasons)]
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"Ops per graph {i + 1}: " + ", ".join(ops))
        for i, g in enumerate(self.graphs):
            symbols = [line.strip() for line in g.splitlines() if line.strip().startswith("symbol s")]
            if symbols:
                lines.append(f"Shape symbols of graph {i + 1}:")
                lines += ["  " + s for s in symbols]
        for i, g in enumerate(self.guards):
            lines.append(f"Guards of graph {i + 1}:")
            lines += ["  " + line for line in g.splitlines()]
        return "\n".join(lines)


def _ops_of(graph_text: str) -> list[str]:
    ops = []
    for line in graph_text.splitlines():
        m = re.search(r"= ([A-Za-z_][\w.:]*)\(", line)
        if m:
            ops.append(m.group(1))
    return ops


def explain(fn: Any, **compile_kwargs: Any) -> Callable[..., ExplainOutput]:
    """`ember.explain(fn)(*args)`: runs `fn` once through a fresh ember.compile and reports the
    graphs, their ops, the frames that ran eagerly (graph breaks) with their reasons and source
    lines, and the guards."""

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        compiled, compiler = _compile(fn, backend=compile_kwargs.get("backend", "ember"),
                                      fullgraph=compile_kwargs.get("fullgraph", False),
                                      dynamic=compile_kwargs.get("dynamic"),
                                      mode=compile_kwargs.get("mode"))
        compiled(*args, **kwargs)
        recs = compiler.records()
        captured = [r for r in recs if r["captured"]]
        breaks = [f"{r['code']}: {'graph break: ' if r['captured'] else 'runs eagerly: '}"
                  f"{r['reason']}" for r in recs if r["graph_break"] or not r["captured"]]
        return ExplainOutput(graph_count=len(captured), graph_break_count=len(breaks),
                             break_reasons=breaks, graphs=[r["graph"] for r in captured],
                             ops_per_graph=[_ops_of(r["graph"]) for r in captured],
                             guards=[r["guard_text"] for r in captured],
                             compile_seconds=sum(r["seconds"] for r in recs))

    return run
