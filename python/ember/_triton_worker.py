"""Compiles ember's generated Triton kernels, in process (`ember._triton`) or as a worker process
of `ember._triton`'s compile pool.

Run as a script (`python <path>/_triton_worker.py`, not `-m ember._triton_worker`, which would
import the package: torch and ember._C, seconds of start-up), this module imports nothing of
ember's and nothing but triton. The protocol, over the worker's stdin and stdout: messages are
pickles, each after its length (8 bytes, little-endian). The worker first sends ("ready", pid)
once triton is imported (or ("err", message) if it cannot be); then, for each request
(source, name, signature, block_param, block, arch, num_warps), ("ok", compile_source(...)) or
("err", "Type: message"). It exits at the end of its stdin.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Run as a script, sys.path[0] is ember's package folder: its modules must not shadow others.
    _HERE = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]

import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import pickle  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

_MODULES: dict[str, Any] = {}
_SOURCE_DIR: str | None = None
_LOAD_LOCK = threading.Lock()


def kernel_function(source: str, name: str) -> Any:
    """The generated module's kernel, imported from a file (triton.jit reads its source)."""
    global _SOURCE_DIR
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _LOAD_LOCK:  # compile threads import their modules one at a time
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


def uses_device_asserts(source: str) -> bool:
    """Whether a generated module's kernel checks indices (calls the prelude's
    `_ember_check_index`, a tl.device_assert, which Triton keeps only with `debug` on)."""
    return "_ember_check_index(" in source.replace("def _ember_check_index(", "")


def compile_source(source: str, name: str, signature: list[str], block_param: str, block: int,
                   arch: int, num_warps: int) -> tuple:
    """Triton's compile of a generated kernel for sm_<arch>: (cubin, name, num_warps, shared,
    global_scratch_size, global_scratch_align, profile_scratch_size). No disk cache here.
    `block_param` names the block size's constexpr, or spells several as "NAME=value,..."
    (`num_stages=s` among them is the launch option; `block` is then unused)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = kernel_function(source, name)
    # A pointer type spelled "*bf16:16" is a buffer whose address is a multiple of 16 bytes (the
    # launcher sees to it: Note [Buffers aligned to 16 bytes] in triton_runtime.cpp), so Triton
    # may load and store 16 bytes at a time.
    sig, attrs = {}, {}
    for i, (arg, ty) in enumerate(zip(fn.arg_names, signature)):
        if ty.endswith(":16"):
            ty = ty[:-3]
            attrs[(i,)] = [["tt.divisibility", 16]]
        sig[arg] = ty
    options = {"num_warps": num_warps}
    constexprs = {block_param: block}
    if "=" in block_param:  # several constexprs and num_stages (the matrix-product templates)
        constexprs = {}
        for part in block_param.split(","):
            key, value = part.split("=")
            if key == "num_stages":
                options["num_stages"] = int(value)
            else:
                constexprs[key] = int(value)
    if uses_device_asserts(source):  # debug keeps the asserts; no overflow checks on the rest
        options.update(debug=True, sanitize_overflow=False)
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", arch, 32), options=options)
    md = compiled.metadata
    return (compiled.asm["cubin"], md.name, md.num_warps, md.shared,
            getattr(md, "global_scratch_size", 0), getattr(md, "global_scratch_align", 1),
            getattr(md, "profile_scratch_size", 0))


def error_message(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def send(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def read_exactly(f, n: int) -> bytes | None:
    """n bytes from a binary stream, or None at its end (or before n bytes)."""
    chunks, left = [], n
    while left:
        chunk = f.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(f) -> Any:
    """The next message, or None at the end of the stream."""
    head = read_exactly(f, 8)
    if head is None:
        return None
    data = read_exactly(f, struct.unpack("<Q", head)[0])
    return None if data is None else pickle.loads(data)


def main() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it closes our stdin
    # The protocol keeps the real stdout; whatever else prints to it goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        import triton  # noqa: F401
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except BaseException as e:  # noqa: BLE001
        send(out, ("err", error_message(e)))
        return
    send(out, ("ready", os.getpid()))
    try:
        while True:
            request = recv(inp)
            if request is None:
                return
            try:
                reply = ("ok", compile_source(*request))
            except Exception as e:  # noqa: BLE001  (the parent leaves the kernel to ATen)
                reply = ("err", error_message(e))
            send(out, reply)
    finally:
        if _SOURCE_DIR is not None:
            import shutil

            shutil.rmtree(_SOURCE_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
