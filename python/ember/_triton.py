"""Triton's compiler and interpreter for ember's generated GPU kernels.

The C++ runtime (src/runtime/triton_runtime.h) calls these hooks: `_compile` once per batch of
kernels at graph compile time (Triton's own compiler, through a disk cache under
EMBER_CACHE_DIR, in a pool of worker processes running _triton_worker.py or in this process; the
cubin is loaded and launched from C++), `_interpret` per launch when a CPU graph runs its Triton
kernels in Triton's interpreter (tests; TRITON_INTERPRET=1 must be set before triton is
imported). triton is imported only when a hook first runs.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from . import _C
from . import _triton_worker as _worker
from ._triton_worker import compile_source, kernel_function  # noqa: F401  (tests use both)

STATS = {"compiles": 0, "disk_hits": 0}
_STATS_LOCK = threading.Lock()
# The compile pool's: workers started, kernels they compiled, kernels compiled here instead
# because their worker died (or never became ready), kernels given up after
# compile_timeout_s().
POOL_STATS = {"started": 0, "compiles": 0, "fallbacks": 0, "timeouts": 0}
# The latest compiles (disk hits not included): (kernel name, block_param, block, num_warps,
# seconds) each, for finding the kernel a slow compile spends its time on
# (scripts/compile_time.py).
COMPILE_TIMES: collections.deque = collections.deque(maxlen=4096)


def cache_dir() -> str:
    """Where compiled kernels are kept: `<ember.config.cache_dir>/triton` (the kernel cache's
    root, runtime/kernel_cache.h)."""
    from . import config
    base = config.get("cache_dir") or os.path.join(tempfile.gettempdir(),
                                                   f"ember-cache-{os.geteuid()}")
    return os.path.join(base, "triton")


_TRITON_VERSION: str | None = None


def triton_version() -> str:
    """Triton's version, read from its installed metadata: a warm start whose kernels all come
    from the disk cache never imports triton (half a second of a 2-core machine's start-up, more
    than the rest of the warm compile). A triton without metadata (a source tree on sys.path) is
    imported for its __version__."""
    global _TRITON_VERSION
    if _TRITON_VERSION is None:
        try:
            from importlib.metadata import version

            _TRITON_VERSION = version("triton")
        except Exception:  # noqa: BLE001
            import triton

            _TRITON_VERSION = triton.__version__
    return _TRITON_VERSION


def _cache_key(source: str, name: str, signature: list[str], block_param: str, block: int,
               arch: int, num_warps: int) -> str:
    return hashlib.sha256(json.dumps([source, name, signature, block_param, block, arch,
                                      num_warps, triton_version()]).encode()).hexdigest()[:32]


def _cached(key: str) -> tuple | None:
    """A compile from the disk cache (`cache_dir()/<key>.cubin` and `.json`), else None."""
    d = cache_dir()
    try:
        with open(os.path.join(d, key + ".json")) as f:
            meta = json.load(f)
        with open(os.path.join(d, key + ".cubin"), "rb") as f:
            cubin = f.read()
    except (OSError, ValueError):
        return None
    with _STATS_LOCK:
        STATS["disk_hits"] += 1
    return (cubin, *meta)


def _store(key: str, source: str, result: tuple) -> None:
    """Counts a compile and keeps it in the disk cache, with its source beside it (`<key>.py`)."""
    cubin, *meta = result
    with _STATS_LOCK:
        STATS["compiles"] += 1
    d = cache_dir()
    try:  # written under temporary names, then renamed: readers never see half a file
        os.makedirs(d, exist_ok=True)
        # the source beside them, for people and tools (scripts/profile_model.py --sources)
        for path, data, mode in ((os.path.join(d, key + ".py"), source, "w"),
                                 (os.path.join(d, key + ".cubin"), cubin, "wb"),
                                 (os.path.join(d, key + ".json"), json.dumps(meta), "w")):
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, mode) as f:
                f.write(data)
            os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs compiles


def compile_for(source: str, name: str, signature: list[str], block_param: str, block: int,
                arch: int, num_warps: int = 4) -> tuple:
    """The cubin and launch metadata of a generated kernel for sm_<arch>, from the disk cache
    (`cache_dir()/<key>.cubin` and `.json`, keyed by everything that decides them) or compiled by
    Triton in this process and stored there, with its source beside them (`<key>.py`)."""
    key = _cache_key(source, name, signature, block_param, block, arch, num_warps)
    result = _cached(key)
    if result is None:
        result = compile_source(source, name, signature, block_param, block, arch, num_warps)
        _store(key, source, result)
    return result


def compile_workers() -> int:
    """Threads (and worker processes) that compile one batch of kernels (EMBER_COMPILE_THREADS,
    else the CPUs this process may use, at most 16)."""
    n = os.environ.get("EMBER_COMPILE_THREADS")
    if n:
        return max(1, int(n))
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus))


# ---- the compile pool: worker processes (_triton_worker.py), as PyTorch Inductor's -------------
# Triton's frontend (AST to TTIR) holds the GIL, so threads of one process overlap only part of a
# compile; processes overlap all of it.

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_triton_worker.py")
READY_TIMEOUT_S = 60.0  # a worker not ready (triton imported) by then is not used


def compile_timeout_s() -> float:
    """Seconds a worker process may take over one kernel (EMBER_TRITON_COMPILE_TIMEOUT, default
    300; 0: no limit) before it is killed and the kernel's nodes run as ATen calls."""
    try:
        return max(0.0, float(os.environ.get("EMBER_TRITON_COMPILE_TIMEOUT", "300")))
    except ValueError:
        return 300.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "on", "yes", "y")


def compile_processes() -> bool:
    """Whether batches compile in worker processes: not with EMBER_COMPILE_PROCESSES=0, nor in
    Triton's interpreter mode (TRITON_INTERPRET)."""
    off = os.environ.get("EMBER_COMPILE_PROCESSES", "1").strip().lower() in ("0", "false", "off",
                                                                              "no", "n")
    return not off and not _truthy(os.environ.get("TRITON_INTERPRET"))


class _Worker:
    """One worker process; one thread at a time uses it."""

    def __init__(self) -> None:
        # The parent's environment (TRITON_*, PATH, ...) and interpreter; stderr is ours. Run as a
        # script, not `-m ember._triton_worker`: that would import ember (torch and _C) first.
        self.proc = subprocess.Popen([sys.executable, _WORKER_SCRIPT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0, close_fds=True)
        self.deadline = time.monotonic() + READY_TIMEOUT_S
        self.ready = False
        self.timed_out = False  # the last call's reply did not come in compile_timeout_s()

    def _read(self, n: int, deadline: float | None) -> bytes | None:
        fd, chunks = self.proc.stdout.fileno(), []
        while n:
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([fd], [], [], left)[0]:
                    self.timed_out = True
                    return None  # not ready in time
            chunk = os.read(fd, n)
            if not chunk:
                return None  # the worker is gone
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _recv(self, deadline: float | None = None) -> Any:
        head = self._read(8, deadline)
        data = None if head is None else self._read(struct.unpack("<Q", head)[0], deadline)
        return None if data is None else pickle.loads(data)

    def call(self, request: tuple) -> tuple | None:
        """The worker's reply, ("ok", result) or ("err", message); None when the worker is gone,
        broken, or was not ready in time."""
        try:
            if not self.ready:
                hello = self._recv(self.deadline)
                if not (isinstance(hello, tuple) and hello and hello[0] == "ready"):
                    self.timed_out = False  # not started: the kernel compiles here instead
                    return None
                self.ready = True
            data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(struct.pack("<Q", len(data)) + data)
            fd = self.proc.stdin.fileno()
            while view:
                view = view[os.write(fd, view):]
            limit = compile_timeout_s()
            reply = self._recv(time.monotonic() + limit if limit else None)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError, struct.error):
            return None
        if not (isinstance(reply, tuple) and len(reply) == 2 and reply[0] in ("ok", "err")):
            return None
        return reply

    def stop(self, wait_s: float = 0.0) -> None:
        """Ends the worker (at the end of its stdin, else killed after wait_s) and reaps it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class _Pool:
    """Worker processes, started as batches need them (up to compile_workers()) and kept for the
    life of this process. A worker that dies is dropped (the next batch starts another); one
    that does not start turns the pool off."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.free: list[_Worker] = []
        self.workers: set[_Worker] = set()
        self.broken = False
        self.waiting = 0  # first-call compiles waiting for a worker

    def grow(self, n: int) -> None:
        with self.cond:
            while len(self.workers) < n and not self.broken:
                try:
                    w = _Worker()
                except (OSError, ValueError):
                    self.broken = True
                    break
                POOL_STATS["started"] += 1
                self.workers.add(w)
                self.free.append(w)

    def acquire(self, background: bool = False) -> _Worker | None:
        """A free worker (waiting for one while any is busy), or None when none is left. A
        background compile also waits while a first call's compile waits for one."""
        with self.cond:
            if not background:
                self.waiting += 1
            try:
                while self.workers and (not self.free or (background and self.waiting)):
                    self.cond.wait()
                return self.free.pop() if self.free else None
            finally:
                if not background:
                    self.waiting -= 1
                    self.cond.notify_all()

    def release(self, w: _Worker, alive: bool) -> None:
        with self.cond:
            if alive:
                self.free.append(w)
            else:
                self.workers.discard(w)
                self.broken = self.broken or not w.ready  # it never started: start no others
            self.cond.notify_all()
        if not alive:
            w.stop()

    def shutdown(self) -> None:
        with self.cond:
            workers, self.free, self.workers = list(self.workers), [], set()
            self.broken = True
        for w in workers:  # their stdin closed first: all end together
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        for w in workers:
            w.stop(max(0.0, deadline - time.monotonic()))

    def forget(self) -> None:
        """In a forked child: the parent's workers are not ours; only our copies of their pipes
        are closed."""
        for w in list(self.workers):
            for f in (w.proc.stdin, w.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.free, self.workers = [], set()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _shutdown_pool() -> None:
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None and pool.pid == os.getpid():
        pool.shutdown()


atexit.register(_shutdown_pool)


def _pool_for(misses: int) -> _Pool | None:
    """The compile pool for a batch of `misses` kernels to compile, grown to
    min(misses, compile_workers()) workers; for one kernel, the pool only if one is running;
    None when it is off, or when no worker could start."""
    global _POOL
    if not compile_processes():
        return None
    if misses < 2:  # not worth starting a pool for, but one started is faster, and has a limit
        with _POOL_LOCK:
            pool = _POOL
        return pool if pool is not None and pool.pid == os.getpid() and pool.workers else None
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid != os.getpid():
            _POOL.forget()
            _POOL = None
        if _POOL is None:
            _POOL = _Pool()
        _POOL.grow(min(misses, compile_workers()))
        return _POOL if _POOL.workers else None


def _compile(jobs: list[tuple], background: bool = False) -> list[tuple]:
    """The compile hook: one (source, name, signature, block_param, block, device, num_warps)
    per kernel, compiled in parallel and returned in order (see compile_batch). `background`:
    from the background thread of tuning candidates (src/runtime/triton_background.h)."""
    import torch

    arch = {}
    for job in jobs:
        device = job[5]
        if device not in arch:
            major, minor = torch.cuda.get_device_capability(device)
            arch[device] = major * 10 + minor
    return compile_batch([(*job[:5], arch[job[5]], job[6]) for job in jobs], background)


# Set at exit: background compiles not started yet are given up (_stop_background).
_BACKGROUND_CANCELLED = threading.Event()


def compile_batch(requests: list[tuple], background: bool = False) -> list[tuple | str]:
    """One (source, name, signature, block_param, block, arch, num_warps) per kernel: each
    kernel's compile (compile_source's tuple) or, when it raised, its message. The disk cache is
    read first; the rest are compiled by compile_workers() threads, each through a worker process
    of the compile pool when there are 2 kernels or more to compile (compile_processes), else
    (and when its worker dies) in this process."""
    results: list[Any] = [None] * len(requests)
    keys: list[str | None] = [None] * len(requests)
    misses = []
    for i, request in enumerate(requests):
        try:
            keys[i] = _cache_key(*request)
            results[i] = _cached(keys[i])
        except Exception as e:  # noqa: BLE001
            results[i] = _worker.error_message(e)[-2000:]
        if results[i] is None:
            misses.append(i)
    if not misses:
        return results
    pool = _pool_for(len(misses))

    def one(i: int) -> None:
        request = requests[i]
        if background and _BACKGROUND_CANCELLED.is_set():
            results[i] = "not compiled: the process is exiting"
            return
        t0 = time.perf_counter()
        try:
            reply = None
            w = pool.acquire(background) if pool is not None else None
            if w is not None:
                try:
                    reply = w.call(request)
                finally:
                    pool.release(w, reply is not None)
                if w.timed_out:  # killed (release): compiling it here would take as long
                    results[i] = (f"Triton took over {compile_timeout_s():g} s to compile "
                                  f"{request[1]} (EMBER_TRITON_COMPILE_TIMEOUT)")
                    with _STATS_LOCK:
                        POOL_STATS["timeouts"] += 1
                    return
                with _STATS_LOCK:
                    POOL_STATS["compiles" if reply is not None else "fallbacks"] += 1
            if reply is None:
                result = compile_source(*request)
            elif reply[0] == "ok":
                result = reply[1]
            else:
                results[i] = reply[1][-2000:]
                return
            _store(keys[i], request[0], result)
            results[i] = result
            COMPILE_TIMES.append((request[1], request[3], request[4], request[6],
                                  time.perf_counter() - t0))
        except Exception as e:  # noqa: BLE001  (the kernel's nodes then run as ATen calls)
            results[i] = _worker.error_message(e)[-2000:]

    threads = min(len(misses), compile_workers())
    if threads <= 1:
        for i in misses:
            one(i)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="ember-triton-compile") as ex:
            list(ex.map(one, misses))
    return results


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
    _patch_bf16_dot(interpreter)
    # tl.device_assert (index range checks) runs only with debug on; overflow checks stay off.
    interpreter.interpreter_builder.options = interpreter.InterpreterOptions(
        debug=True, sanitize_overflow=False)
    _patch_libdevice()
    _PATCHED = True


def _patch_bf16_dot(interpreter) -> None:
    """The interpreter keeps bf16 as its bit patterns (uint16) and multiplies those in tl.dot
    (the matmul template's bf16 tiles): bf16 operands are widened to f32 first, exactly."""
    import numpy as np
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot

    def widen(h):
        if h.dtype != tl.bfloat16:
            return h
        bits = h.data.astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    builder.create_dot = create_dot


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
               args: list) -> None:
    """Runs a generated kernel in Triton's interpreter: `args` are its tensors, then its integer
    arguments (a kernel's shape symbols)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("ember: Triton's interpreter needs TRITON_INTERPRET=1 before triton "
                           "is imported")
    patch_interpreter()
    fn = kernel_function(source, name)
    if "=" in block_param:  # several constexprs, and the grid's second axis (matrix templates)
        consts = dict((k, int(v)) for k, v in (p.split("=") for p in block_param.split(",")))
        grid_y = consts.pop("grid_y", 1)
        consts.pop("num_stages", None)
        fn[(programs, grid_y)](*args, **consts)
        return
    fn[(programs,)](*args, **{block_param: block})


def _stop_background() -> None:
    """At exit, before the compile pool stops (atexit runs it first, registered after): gives up
    the background compiles not started and joins their thread while Python still runs."""
    _BACKGROUND_CANCELLED.set()
    _C.stop_background_compiles()


_C.set_triton_hooks(_compile, _interpret)
atexit.register(_stop_background)
