"""Triton's compiler and interpreter for ember's generated GPU kernels.

The C++ runtime (src/runtime/triton_runtime.h) calls these hooks: `_compile` once per kernel at
graph compile time (Triton's own compiler, in process, through a disk cache under
EMBER_CACHE_DIR; the cubin is loaded and launched from C++), `_interpret` per launch when a CPU graph runs its Triton kernels in Triton's interpreter
(tests; TRITON_INTERPRET=1 must be set before triton is imported). triton is imported only when
a hook first runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
from typing import Any

from . import _C

_MODULES: dict[str, Any] = {}
_SOURCE_DIR: str | None = None


def kernel_function(source: str, name: str) -> Any:
    """The generated module's kernel, imported from a file (triton.jit reads its source)."""
    global _SOURCE_DIR
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    mod = _MODULES.get(key)
    if mod is None:
        if _SOURCE_DIR is None:
            _SOURCE_DIR = tempfile.mkdtemp(prefix="ember_triton_")
        path = os.path.join(_SOURCE_DIR, f"k_{key}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(f"ember_triton_{key}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _MODULES[key] = mod
    return getattr(mod, name)


STATS = {"compiles": 0, "disk_hits": 0}
_STATS_LOCK = threading.Lock()


def cache_dir() -> str:
    """Where compiled kernels are kept: `<EMBER_CACHE_DIR>/triton` (the host compiler's rule for
    EMBER_CACHE_DIR)."""
    base = os.environ.get("EMBER_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "ember") if xdg else os.path.join(os.path.expanduser("~"),
                                                                     ".cache", "ember")
    return os.path.join(base, "triton")


def compile_for(source: str, name: str, signature: list[str], block_param: str, block: int,
                arch: int, num_warps: int = 4) -> tuple:
    """The cubin and launch metadata of a generated kernel for sm_<arch>, from the disk cache
    (`cache_dir()/<key>.cubin` and `.json`, keyed by everything that decides them) or compiled by
    Triton and stored there, with its source beside them (`<key>.py`)."""
    import triton

    key = hashlib.sha256(json.dumps([source, name, signature, block_param, block, arch,
                                     num_warps, triton.__version__]).encode()).hexdigest()[:32]
    d = cache_dir()
    cubin_path, meta_path = os.path.join(d, key + ".cubin"), os.path.join(d, key + ".json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(cubin_path, "rb") as f:
            cubin = f.read()
        with _STATS_LOCK:
            STATS["disk_hits"] += 1
        return (cubin, *meta)
    except (OSError, ValueError):
        pass
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = kernel_function(source, name)
    sig = dict(zip(fn.arg_names, signature))
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={block_param: block}),
                              target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    md = compiled.metadata
    meta = [md.name, md.num_warps, md.shared, getattr(md, "global_scratch_size", 0),
            getattr(md, "global_scratch_align", 1), getattr(md, "profile_scratch_size", 0)]
    cubin = compiled.asm["cubin"]
    with _STATS_LOCK:
        STATS["compiles"] += 1
    try:  # written under temporary names, then renamed: readers never see half a file
        os.makedirs(d, exist_ok=True)
        # the source beside them, for people and tools (scripts/profile_model.py --sources)
        src_path = os.path.join(d, key + ".py")
        for path, data, mode in ((src_path, source, "w"), (cubin_path, cubin, "wb"),
                                 (meta_path, json.dumps(meta), "w")):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, mode) as f:
                f.write(data)
            os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs compiles
    return (cubin, *meta)


def compile_workers() -> int:
    """Threads that compile one batch of kernels (EMBER_COMPILE_THREADS, else the CPUs this
    process may use, at most 16). Triton's compiler releases the GIL in its MLIR passes and
    ptxas runs as a subprocess, so threads overlap most of a compile."""
    n = os.environ.get("EMBER_COMPILE_THREADS")
    if n:
        return max(1, int(n))
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus))


def _compile(jobs: list[tuple]) -> list[tuple]:
    """The compile hook: one (source, name, signature, block_param, block, device, num_warps)
    per kernel, compiled in parallel (compile_workers) and returned in order."""
    import torch

    arch = {}
    for job in jobs:
        device = job[5]
        if device not in arch:
            major, minor = torch.cuda.get_device_capability(device)
            arch[device] = major * 10 + minor
    for job in jobs:  # imported here, once each: module imports do not run in parallel
        try:
            kernel_function(job[0], job[1])
        except Exception:  # noqa: BLE001  (reported by one() below)
            pass

    def one(job: tuple) -> tuple | str:
        source, name, signature, block_param, block, device, num_warps = job
        try:
            return compile_for(source, name, signature, block_param, block, arch[device],
                               num_warps)
        except Exception as e:  # noqa: BLE001  (the kernel's nodes then run as ATen calls)
            return f"{type(e).__name__}: {e}"[-2000:]

    workers = min(len(jobs), compile_workers())
    if workers <= 1:
        return [one(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="ember-triton-compile") as pool:
        return list(pool.map(one, jobs))


_PATCHED = False


def patch_interpreter() -> None:
    """Makes Triton 3.6's interpreter run ember's kernels. It turns a scalar (a one-element
    array) into a Python int with int(), which NumPy 2 refuses for arrays of one dimension, so
    `range(0, n, RBLOCK)` over a size argument fails: it reads the element instead. And it has no
    libdevice (_patch_libdevice). Idempotent; for interpreter mode only."""
    global _PATCHED
    if _PATCHED:
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_lang_tensor
    _patch_libdevice()
    _PATCHED = True


def _patch_libdevice() -> None:
    """The interpreter has no libdevice (its extern calls return None): the functions ember's
    kernels call are computed with NumPy instead, in the argument's dtype."""
    import math

    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import TensorHandle

    def wrap(np_fn):
        def f(*xs, **_kw):
            data = np_fn(*(x.handle.data for x in xs)).astype(xs[0].handle.data.dtype)
            return tl.core.tensor(TensorHandle(data, xs[0].handle.dtype.scalar), xs[0].type)
        return f

    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    erf = np.vectorize(math.erf, otypes=[np.float64])
    table = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin,
             "cos": np.cos, "erf": erf, "tanh": np.tanh, "expm1": np.expm1, "log1p": np.log1p, "log10": np.log10,
             "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
             "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
             "atanh": np.arctanh, "erfc": erfc, "nearbyint": np.rint, "trunc": np.trunc,
             "pow": np.power, "atan2": np.arctan2, "fmod": np.fmod}
    for name, np_fn in table.items():
        setattr(libdevice, name, wrap(np_fn))


def _interpret(source: str, name: str, programs: int, block_param: str, block: int,
               tensors: list) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("ember: Triton's interpreter needs TRITON_INTERPRET=1 before triton "
                           "is imported")
    patch_interpreter()
    fn = kernel_function(source, name)
    fn[(programs,)](*tensors, **{block_param: block})


_C.set_triton_hooks(_compile, _interpret)
