"""Times ember's generated Triton kernels on a GPU against the device-to-device copy bandwidth
(issue 7 asks large pointwise and reduction kernels for 85% of it). Launches through Triton's
own Python launcher (ember's C++ launcher is a later slice), medians of triton.testing.do_bench.

    python3 scripts/bench_triton_kernels.py [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import tempfile

import torch
import triton
import triton.testing

import ember._C as C

ROOT = pathlib.Path(__file__).resolve().parents[1]
TYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

CASES = [
    # (name, loop IR file, sizes, block sizes to try)
    ("gelu_bias 16384x4096 f32", ROOT / "tests/cpp/codegen/golden/gelu_bias.loop",
     {"m": 16384, "n": 4096}),
    ("softmax 16384x4096 f32", ROOT / "tests/cpp/loop/golden/softmax.loop",
     {"s0": 16384, "s1": 4096}),
    ("softmax 65536x512 f32", ROOT / "tests/cpp/loop/golden/softmax.loop",
     {"s0": 65536, "s1": 512}),
    # Constant sizes, as the executor's kernels have: rows of at most 4096 are persistent (one
    # read and one write per element) and indices are i32.
    ("softmax 16384x4096 f32, static", ROOT / "tests/cpp/loop/golden/softmax.loop",
     {"s0": 16384, "s1": 4096, "static": 1}),
    ("softmax 65536x512 f32, static", ROOT / "tests/cpp/loop/golden/softmax.loop",
     {"s0": 65536, "s1": 512, "static": 1}),
    ("gelu_bias 16384x4096 f32, static", ROOT / "tests/cpp/codegen/golden/gelu_bias.loop",
     {"m": 16384, "n": 4096, "static": 1}),
]


def make_static(text: str, sizes: dict) -> str:
    """The kernel with its size variables replaced by their values (no size arguments)."""
    sig = re.search(r"(kernel\s+\w+)\(([^)]*)\)", text)
    names = [x.strip() for x in sig.group(2).split(",") if x.strip()]
    text = text[:sig.start()] + sig.group(1) + "()" + text[sig.end():]
    for n in names:
        text = re.sub(rf"\b{n}\b", str(sizes[n]), text)
    return text


def load(source: str, name: str):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "k.py")
    pathlib.Path(path).write_text(source)
    spec = importlib.util.spec_from_file_location("k_" + name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return getattr(m, name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    n = 256 * 1024 * 1024  # 1 GiB of f32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    copy_bw = 2 * n * 4 / copy_ms / 1e6  # bytes read + written, GB/s (ms -> s)
    rows = []
    for name, path, sizes in CASES:
        text = path.read_text()
        static = sizes.pop("static", 0)
        bufs = re.findall(r"^\s*(input|output)\s+(\w+)\s*:\s*(\w+)\[([^\]]*)\]", text, re.M)
        tensors, nbytes = [], 0
        for role, bname, dt, dims in bufs:
            numel = 1
            for d in dims.split(","):
                numel *= int(eval(d.strip(), {}, dict(sizes)))
            t = torch.randn(numel, device="cuda").to(TYPES[dt])
            tensors.append(t)
            nbytes += t.numel() * t.element_size()
        size_names = [s.strip() for s in re.search(r"kernel\s+\w+\(([^)]*)\)", text).group(1)
                      .split(",") if s.strip()]
        row = triton.next_power_of_2(sizes[size_names[-1]])  # rows reduce over the last size
        if static:
            text, sizes, size_names = make_static(text, sizes), {}, []
        best = None
        for max_block in (256, 1024, 4096):
            k = C.triton_kernel(text, sizes)
            block = min(row, max_block) if k["form"] == "rows" else max_block
            if static and k["form"] == "rows":
                block = k["block"]  # a persistent row is one block of its whole extent
            programs = k["programs"] if k["form"] == "rows" else -(-k["programs"] * k["block"] // block)
            fn = load(k["source"], k["name"])
            call = lambda: fn[(programs,)](*tensors, *[sizes[s] for s in size_names],
                                           **{k["block_param"]: block})
            ms = triton.testing.do_bench(call, return_mode="median")
            if best is None or ms < best[0]:
                best = (ms, block)
        ms, block = best
        bw = nbytes / ms / 1e6
        rows.append({"kernel": name, "ms": ms, "block": block, "bytes": nbytes, "GB/s": bw,
                     "of_copy": bw / copy_bw})
    print(f"device-to-device copy: {copy_bw:.0f} GB/s ({torch.cuda.get_device_name()})")
    print("| kernel | ms | block | GB/s | of copy |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['ms']:.3f} | {r['block']} | {r['GB/s']:.0f} | "
              f"{100 * r['of_copy']:.0f}% |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"copy_GBps": copy_bw, "gpu": torch.cuda.get_device_name(),
             "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
