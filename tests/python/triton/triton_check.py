"""Runs the Triton kernels ember generates from loop-IR kernels and compares every buffer with
the loop-IR reference interpreter on the same random inputs: in Triton's interpreter on the CPU
(TRITON_INTERPRET=1, which tests/python/conftest.py sets when there is no GPU), or compiled and
launched by Triton on a GPU."""

from __future__ import annotations

import os
import re

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("no GPU and Triton's interpreter is off", allow_module_level=True)
DEVICE = "cpu" if INTERPRET else "cuda"
triton = pytest.importorskip("triton")

import ember._C as C  # noqa: E402
from ember import _triton  # noqa: E402
from ember._triton import patch_interpreter  # noqa: E402

if INTERPRET:
    patch_interpreter()  # Triton 3.6's interpreter under NumPy 2 (see there)

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
           "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
           "i8": torch.int8, "u8": torch.uint8, "b8": torch.bool}
_BUFFER = re.compile(r"^\s*(input|output|inout|temp)\s+(\w+)\s*:\s*(\w+)\[([^\]]*)\]\s+strides",
                     re.M)
_SIZES = re.compile(r"kernel\s+\w+\(([^)]*)\)")


def buffers_of(text: str) -> list[tuple[str, str, torch.dtype, list[str]]]:
    """(role, name, dtype, size expressions) of each buffer parameter, in order."""
    out = []
    for role, name, dt, sizes in _BUFFER.findall(text):
        out.append((role, name, _DTYPES[dt], [s.strip() for s in sizes.split(",") if s.strip()]))
    return out


def _numel(sizes: list[str], env: dict[str, int]) -> int:
    n = 1
    for s in sizes:
        n *= int(eval(s, {}, dict(env)))  # size expressions over the kernel's size names
    return n


def random_buffers(text: str, sizes: dict[str, int], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for role, name, dt, dims in buffers_of(text):
        n = _numel(dims, sizes)
        if dt.is_floating_point:
            t = torch.randn(n, generator=g).to(dt)
        elif dt == torch.bool:
            t = torch.randint(0, 2, (n,), generator=g).bool()
        else:
            t = torch.randint(-50, 50, (n,), generator=g).to(dt)
        if role in ("output", "temp"):
            t = torch.full_like(t, 7) if not dt.is_floating_point else torch.full_like(t, float("nan"))
        out[name] = t
    return out


def run_triton(text: str, sizes: dict[str, int], bufs: dict[str, torch.Tensor]) -> dict:
    k = C.triton_kernel(text, sizes)
    fn = _triton.kernel_function(k["source"], k["name"])
    size_names = [s.strip() for s in _SIZES.search(text).group(1).split(",") if s.strip()]
    args = [bufs[name] for _, name, _, _ in buffers_of(text)]
    args += [sizes[s] for s in size_names]
    consts = {k["block_param"]: k["block"]}
    if k["rows_param"]:  # a row tile's rows per program, its default
        consts[k["rows_param"]] = k["rows_per_program"]
    fn[(k["programs"],)](*args, **consts)
    return k


def check_kernel(text: str, sizes: dict[str, int], seed: int = 0, rtol=1e-5, atol=1e-6):
    """Runs `text` both ways on the same random inputs; compares every buffer."""
    bufs = random_buffers(text, sizes, seed)
    ref_in = {name: t.double().tolist() for name, t in bufs.items()
              if any(n == name and r in ("input", "inout") for r, n, _, _ in buffers_of(text))}
    ref = C.loop_reference(text, sizes, ref_in)
    got = {n: t.clone().to(DEVICE) for n, t in bufs.items()}
    k = run_triton(text, sizes, got)
    for role, name, dt, _ in buffers_of(text):
        if role not in ("output", "inout"):
            continue
        want = torch.tensor(ref[name], dtype=torch.float64)
        have = got[name].double().cpu()
        assert have.shape == want.shape, (name, have.shape, want.shape)
        torch.testing.assert_close(have, want, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"buffer {name}: {m}")
    return k
