"""ember's options, typed, in one place: the Python half of CompileOptions (src/support/options.h).

Each option has a type, a default, and the environment variable that sets it (docs/env_vars.md).
Its value is, in order: an override set here (``ember.config.codegen = False``, or for a block
with ``ember.config.patch(codegen=False)``), else its variable, read when a compile starts, else
the default. ``compile_options()`` gathers every value, as the dict of ``"group.field"`` keys that
the C++ boundary (src/python/options.cpp) turns into a CompileOptions; ember.compile's and
torch.compile's ``options=`` overrides it per compile. No code below that boundary reads the
environment.

    import ember
    with ember.config.patch(combo_kernels=False):
        fn = ember.compile(model)
    ember.compile(model, options={"reduction_fusion": False})
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator


def _flag(text: str) -> bool:
    """An on/off variable: "0" (or false/off/no) is off, anything else on."""
    return text.strip().lower() not in ("0", "false", "off", "no")


def _is(word: str) -> Callable[[str], bool]:
    """A variable that turns a mode on with one word (EMBER_SPLIT_REDUCTIONS=all)."""
    return lambda text: text.strip() == word


def _cudnn_batch_norm(text: str) -> str:
    return {"stats": "stats", "1": "keep", "0": "off"}.get(text.strip(), "stats")


def _dynamic(text: str) -> str:
    word = {"1": "true", "on": "true", "0": "false", "off": "false"}.get(text.strip().lower(),
                                                                       text.strip().lower())
    if word not in ("automatic", "true", "false"):
        raise ValueError(text)
    return word


def _fuse_attention(text: str) -> int:
    return {"0": 0, "1": 1}.get(text.strip(), -1)


def _default_cache_dir() -> str:
    """`$XDG_CACHE_HOME/ember`, else `~/.cache/ember`, else "" (C++ then uses
    `<tmp>/ember-cache-<uid>`)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "ember")
    home = os.environ.get("HOME")
    return os.path.join(home, ".cache", "ember") if home else ""


@dataclass(frozen=True)
class Option:
    name: str              # ember.config.<name>, and the key of options=
    key: str               # "group.field" of CompileOptions (or "capture.<name>")
    type: type
    default: Any           # or a function of nothing that computes it
    env: tuple[str, ...]   # variables, the first that is set wins
    parse: Callable[[str], Any]
    doc: str


def _dynamo_recompile_limit() -> int:
    """torch._dynamo.config.recompile_limit (cache_size_limit before torch 2.6), else 8."""
    try:
        import torch._dynamo.config as dynamo_config
    except ImportError:
        return 8
    for name in ("recompile_limit", "cache_size_limit"):
        value = getattr(dynamo_config, name, None)
        if isinstance(value, int):
            return value
    return 8


OPTIONS: tuple[Option, ...] = (
    # capture (the frame hook; used by python/ember/capture.py, not CompileOptions)
    Option("cache_size_limit", "capture.cache_size_limit", int, _dynamo_recompile_limit,
           ("EMBER_CACHE_SIZE_LIMIT",), int,
           "most compiled entries of one ember.compile per code object; past it the frame runs "
           "its original bytecode, with one warning naming the guard that failed last (default: "
           "torch._dynamo.config.recompile_limit, read at ember.compile, as torch.compile's)"),
    Option("dynamic", "capture.dynamic", str, "automatic", ("EMBER_DYNAMIC",), _dynamic,
           "ember.compile's dynamic= where a call gives none: automatic (a dim seen changing "
           "becomes a shape symbol), true (every dim of a tensor input is one), false (static)"),
    Option("report", "capture.report", str, "", ("EMBER_REPORT",), str,
           "a folder: when the process exits, ember.report() writes there one HTML page per "
           "frame compile (graph, breaks with source lines, guards, kernels, timings)"),
    Option("logs", "capture.logs", str, "", ("EMBER_LOGS",), str,
           "comma list of what ember.compile logs (logger 'ember'): recompiles, graph_breaks, "
           "guards, graph, dynamic (shape symbols and size guards), output_code (kernel "
           "sources), or all; TORCH_LOGS turns them on by Dynamo's names too"),
    # trace
    Option("splits_everywhere", "trace.splits_everywhere", bool, False,
           ("EMBER_SPLIT_REDUCTIONS",), _is("all"),
           "the CUDA-only split reductions, log-softmax rewrite and pool offsets on every device"),
    Option("decompose_backward_everywhere", "trace.decompose_backward_everywhere", bool, False,
           ("EMBER_DECOMPOSE_BACKWARD",), _is("all"),
           "every backward decomposition on every device (and the batch-norm backward as sums)"),
    Option("cudnn_batch_norm", "trace.cudnn_batch_norm", str, "stats",
           ("EMBER_CUDNN_BATCH_NORM",), _cudnn_batch_norm,
           "training batch norm on CUDA: stats (cuDNN's statistics, ember's normalization), "
           "keep (cuDNN's output), off (native_batch_norm, split into sums)"),
    Option("disabled_rewrites", "trace.disabled_rewrites", str, "", ("EMBER_DISABLED_REWRITES",),
           str, "trace-time rewrites turned off, by name (a comma list; src/rewrite/rewrites.cpp)"),
    Option("conv1x1_as_mm", "trace.pointwise_convolutions_as_products", bool, False,
           ("EMBER_CONV1X1_AS_MM",), _flag,
           "every 1x1 convolution on CUDA (bf16/f16 inference) as a matrix product (off: only "
           "the launch-bound ones, launch_bound_products; src/rewrite/conv_as_product.h)"),
    # sched
    Option("codegen", "sched.codegen", bool, True, ("EMBER_CODEGEN",), _flag,
           "generated kernels; off, every node runs as an ATen call"),
    Option("reduction_kernels", "sched.reductions", bool, True, ("EMBER_REDUCTION_KERNELS",),
           _flag, "kernels for reductions (softmax, norms, sums, argmax, ...)"),
    Option("reduction_fusion", "sched.reduction_fusion", bool, True, ("EMBER_REDUCTION_FUSION",),
           _flag, "reduction kernels with prologues and epilogues"),
    Option("combo_kernels", "sched.combo_kernels", bool, True, ("EMBER_COMBO_KERNELS",),
           _flag, "independent pointwise kernels as one combo kernel"),
    Option("stored_prologues", "sched.stored_prologues", bool, True, ("EMBER_STORED_PROLOGUES",),
           _flag, "a reduction kernel stores the open pointwise values its prologue reads"),
    Option("depthwise_kernels", "sched.depthwise_convolutions", bool, False,
           ("EMBER_DEPTHWISE_KERNELS",), _flag,
           "depthwise convolutions computed in the kernels that read them (GPU graphs; off: "
           "slower than cuDNN's on the device, src/sched/depthwise_conv.h)"),
    Option("plan_cache", "sched.plan_cache", bool, True, ("EMBER_PLAN_CACHE",), _flag,
           "plans that took long to schedule are cached on disk for later processes"),
    Option("plan_cache_min_seconds", "sched.plan_cache_min_seconds", float, 0.05,
           ("EMBER_PLAN_CACHE_MIN_SECONDS",), float,
           "the scheduling time from which a plan is cached on disk"),
    # codegen
    Option("cxx", "codegen.cxx", str, "c++", ("EMBER_CXX", "CXX"), str,
           "the host compiler for generated C++ kernels"),
    Option("libmvec", "codegen.libmvec", bool, True, ("EMBER_LIBMVEC",), _flag,
           "vector loops call glibc's libmvec where it is usable"),
    # triton
    Option("triton", "triton.enabled", bool, True, ("EMBER_TRITON",), _flag,
           "graphs on one CUDA device get generated Triton kernels"),
    Option("triton_interpret", "triton.interpret", bool, False, ("EMBER_TRITON_INTERPRET",),
           _is("1"), "CPU graphs run Triton kernels in Triton's interpreter (tests)"),
    Option("triton_autotune", "triton.autotune", bool, True, ("EMBER_TRITON_AUTOTUNE",),
           _flag, "large Triton kernels time their launch configurations at first launch"),
    Option("triton_background_tuning", "triton.background_tuning", bool, True,
           ("EMBER_TRITON_BACKGROUND_TUNING",), _flag,
           "large Triton kernels compile their candidate configurations other than the default "
           "in the background and time them at a later launch (not with cuda_graphs)"),
    Option("triton_persistent", "triton.persistent", bool, True, ("EMBER_TRITON_PERSISTENT",),
           _flag, "row programs hold a whole row in one block where it fits"),
    Option("triton_aligned", "triton.aligned_pointers", bool, True, ("EMBER_TRITON_ALIGNED",),
           _flag, "Triton kernels assume 16-byte aligned buffers and load and store 16 bytes at "
           "a time; a launch copies a misaligned buffer to an aligned one first"),
    # runtime
    Option("cuda_graphs", "runtime.cuda_graphs", bool, False, ("EMBER_CUDA_GRAPHS",), _flag,
           "a graph on one CUDA device is captured into a CUDA graph at its second call and "
           "replayed from then on (mode='reduce-overhead'; Inductor's 'triton.cudagraphs')"),
    Option("max_autotune", "runtime.matmul_templates", bool, False, ("EMBER_MAX_AUTOTUNE",),
           _flag, "matrix products on a CUDA device also get Triton templates, timed against "
           "cuBLAS at their first call (mode='max-autotune-no-cudagraphs')"),
    Option("launch_bound_products", "runtime.launch_bound_products", int, 1 << 29,
           ("EMBER_LAUNCH_BOUND_PRODUCTS",), int,
           "products of at most this many multiply-adds on a CUDA device get Triton templates "
           "timed against cuBLAS in every mode but reduce-overhead, and 1x1 convolutions of that "
           "size in inference become such products (0: off)"),
    Option("fuse_attention", "runtime.fuse_attention", int, -1, ("EMBER_FUSE_ATTENTION",),
           _fuse_attention,
           "eager attention as one SDPA call: -1 on CUDA graphs with Triton kernels, 0 never, "
           "1 on any kernel graph"),
    Option("bias_apart", "runtime.bias_apart", bool, False, ("EMBER_BIAS_APART",), _flag,
           "a product's bias added by the pointwise kernel that reads it (GPU graphs), not by "
           "cuBLASLt's epilogue (off: no gain measured yet, src/runtime/bias_apart.h)"),
    Option("parameter_cache", "runtime.parameter_cache", bool, True, ("EMBER_PARAMETER_CACHE",),
           _flag, "kernels of parameters only keep their outputs across calls"),
    # training
    Option("min_cut", "training.min_cut", bool, True, ("EMBER_MIN_CUT",), _flag,
           "training graphs use the min-cut partition"),
    Option("save_materialized", "training.save_materialized", bool, True,
           ("EMBER_SAVE_MATERIALIZED",), _flag,
           "values the backward writes anyway are saved, not recomputed"),
    # cache (where: the process's, applied by the C++ boundary to runtime::configure_cache)
    Option("cache_dir", "cache.dir", str, _default_cache_dir, ("EMBER_CACHE_DIR",), str,
           "the root of ember's caches (kernels/, prelude/, triton/); created 0700"),
    Option("cache_max_mb", "cache.max_mb", int, 2048, ("EMBER_CACHE_MAX_MB",), int,
           "the kernel cache's size cap; past it the least recently used kernels go (0: none)"),
    Option("prelude_dir", "cache.prelude_dir", str, "", ("EMBER_PRELUDE_DIR",), str,
           "where precompiled preludes live (default: <cache_dir>/prelude)"),
    # debug
    Option("verify_kernels", "debug.verify_kernels", bool, False, ("EMBER_VERIFY_KERNELS",),
           _is("1"), "each call also runs the unfused program and compares every kernel with it"),
    Option("debug_live", "debug.live_bytes", int, 0, ("EMBER_DEBUG_LIVE",), int,
           "each run prints the bytes its values hold: 1 around the peak, 2 every step"),
    Option("dump_pipeline", "debug.dump_pipeline", bool, False, ("EMBER_DUMP_PIPELINE",),
           _is("1"), "each compile prints the graph after every pipeline step that changes it"),
    Option("host_step_times", "debug.host_step_times", bool, False, ("EMBER_HOST_STEP_TIMES",),
           _is("1"), "each run sums its host time per kind of step (kernel launches, ATen calls, "
           "views) and as a whole: ember._C.host_step_times()"),
)

_BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
_overrides: dict[str, Any] = {}


def _option(name: str) -> Option:
    o = _BY_NAME.get(name)
    if o is None:
        raise AttributeError(f"ember.config has no option {name!r} (options: "
                             f"{', '.join(sorted(_BY_NAME))})")
    return o


def _check(o: Option, value: Any) -> Any:
    ok = isinstance(value, o.type) and not (o.type is int and isinstance(value, bool))
    if o.type is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True  # a number option takes an int too
    if not ok:
        from .errors import CompileError
        raise CompileError(f"ember option {o.name!r} must be {o.type.__name__}, got {value!r}")
    return value


def get(name: str) -> Any:
    """The current value of option `name`: its override, else its variable, else its default."""
    o = _option(name)
    if name in _overrides:
        return _overrides[name]
    for var in o.env:
        text = os.environ.get(var)
        if text:
            try:
                return o.parse(text)
            except ValueError:
                from .errors import CompileError
                raise CompileError(f"{var}={text!r}: not a valid {o.type.__name__} for ember "
                                   f"option {name!r}") from None
    return o.default() if callable(o.default) else o.default


@contextlib.contextmanager
def patch(**values: Any) -> Iterator[None]:
    """Overrides options for a block (or, as a decorator, a function); the old values come back
    at its end."""
    for name in values:
        _option(name)
    old = {n: _overrides[n] for n in values if n in _overrides}
    _overrides.update(values)
    try:
        yield
    finally:
        for n in values:
            _overrides.pop(n, None)
        _overrides.update(old)


# torch.compile's modes, as the options each one sets (under the options= of the same call).
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"cuda_graphs": True},
    "max-autotune": {"cuda_graphs": True, "max_autotune": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}

# Inductor's names of options ember has under its own name (torch.compile(options=...) habits).
ALIASES: dict[str, str] = {"triton.cudagraphs": "cuda_graphs"}


def mode_and_options(mode: str | None, options: dict[str, Any] | None,
                     where: str) -> dict[str, Any]:
    """The option overrides of `mode=` and `options=` (torch.compile's arguments, by ember's or
    Inductor's option names), checked. As torch.compile, one of the two, not both."""
    from .errors import CompileError
    if mode is not None and mode not in MODES:
        raise CompileError(f"{where}: unknown mode {mode!r} (modes: {', '.join(MODES)})")
    if mode not in (None, "default") and options:
        raise CompileError(f"{where}: either mode or options can be specified, but both can't "
                           f"be specified at the same time (as torch.compile)")
    if options is not None and not isinstance(options, dict):
        raise CompileError(f"{where}: options must be a dict, got {type(options).__name__}")
    out = dict(MODES[mode or "default"])
    for name, value in (options or {}).items():
        name = ALIASES.get(name, name)
        if name not in _BY_NAME:
            raise CompileError(f"{where}: unknown option {name!r} (options: "
                               f"{', '.join(sorted(_BY_NAME))})")
        out[name] = value
    return out


def compile_options(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every option's value as ``{"group.field": value}``, for the C++ boundary: the current
    config with `overrides` (``options=``, by option name) on top. Checks each value's type."""
    for name in overrides or {}:
        _option(name)
    out = {}
    for o in OPTIONS:
        value = overrides[o.name] if overrides and o.name in overrides else get(o.name)
        out[o.key] = _check(o, value)
    return out


class _ConfigModule(types.ModuleType):
    """`ember.config.<option>` reads the current value; assigning to it sets an override
    (`del` takes it back)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _BY_NAME:
            _overrides[name] = value
        else:
            super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in _BY_NAME:
            _overrides.pop(name, None)
        else:
            super().__delattr__(name)


sys.modules[__name__].__class__ = _ConfigModule
