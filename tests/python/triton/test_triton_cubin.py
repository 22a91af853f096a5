"""Generated Triton kernels compile to a cubin for sm_90 (the H200) with no GPU present:
Triton's own compiler and the ptxas it ships. Runs in a subprocess, outside the interpreter mode
the other tests of this directory set."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

HERE = pathlib.Path(__file__).parent
GOLDEN = HERE.parents[1] / "cpp"

SCRIPT = r'''
import importlib.util, json, os, re, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import ember._C as C

TYPES = {"f32": "*fp32", "f64": "*fp64", "f16": "*fp16", "bf16": "*bf16", "i64": "*i64",
         "i32": "*i32", "i16": "*i16", "i8": "*i8", "u8": "*u8", "b8": "*i1"}
out = []
for path, sizes in json.loads(sys.argv[1]):
    text = open(path).read()
    k = C.triton_kernel(text, sizes)
    d = tempfile.mkdtemp()
    f = os.path.join(d, "m.py")
    open(f, "w").write(k["source"])
    spec = importlib.util.spec_from_file_location("m_" + k["name"], f)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    fn = getattr(m, k["name"])
    sig = {}
    for role, name, dt in re.findall(r"^\s*(input|output|inout|temp)\s+(\w+)\s*:\s*(\w+)\[", text, re.M):
        sig["b_" + name] = TYPES[dt]
    for s in re.search(r"kernel\s+\w+\(([^)]*)\)", text).group(1).split(","):
        if s.strip():
            sig["s_" + s.strip()] = "i64"
    sig[k["block_param"]] = "constexpr"
    src = ASTSource(fn=fn, signature=sig, constexprs={k["block_param"]: k["block"]})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    out.append([k["name"], len(c.asm["cubin"]), c.metadata.num_warps])
print(json.dumps(out))
'''


def test_generated_kernels_compile_to_sm90_cubins(tmp_path):
    # Constant sizes make the softmax rows persistent (one block per row, i32 indices).
    static = (GOLDEN / "loop/golden/softmax.loop").read_text().replace("softmax(s0, s1)", "softmax()")
    static_path = tmp_path / "softmax_static.loop"
    static_path.write_text(static.replace("s0", "64").replace("s1", "1000"))
    kernels = [
        (str(GOLDEN / "codegen/golden/gelu_bias.loop"), {"m": 64, "n": 128}),
        (str(GOLDEN / "loop/golden/softmax.loop"), {"s0": 64, "s1": 1000}),
        (str(static_path), {}),
        # A row's sum stored into an output and forwarded to the epilogue (tl.cast of a literal).
        (str(GOLDEN / "codegen/golden/rms_norm_mean_out.loop"), {"s0": 64}),
        # A column sum in 2D tiles (rows along axis 0, 4096 // RBLOCK of them).
        (str(GOLDEN / "codegen/golden/column_sum.loop"), {}),
        # A copy to channels-last in 2D tiles.
        (str(GOLDEN / "codegen/golden/to_channels_last.loop"), {}),
        # libdevice.pow with a literal base (pow.Scalar: Adam's beta ** step), a typed scalar.
        (str(GOLDEN / "codegen/golden/pow_scalar_base.loop"), {"n": 64}),
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(kernels)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert [name for name, _, _ in result] == ["ember_gelu_bias", "ember_softmax", "ember_softmax",
                                               "ember_rms_norm", "ember_column_sum",
                                               "ember_to_channels_last",
                                               "ember_pow_scalar_base"]
    for name, size, warps in result:
        assert size > 1000 and warps >= 1, (name, size, warps)


CACHE_SCRIPT = r'''
import json, sys
import ember._C as C
from ember import _triton
k = C.triton_kernel(open(sys.argv[1]).read(), {"m": 8, "n": 16})
sig = ["*fp32", "*fp32", "*fp32", "i64", "i64", "constexpr"]
cubin, symbol, *_ = _triton.compile_for(k["source"], k["name"], sig, k["block_param"], k["block"], 90)
print(json.dumps([_triton.STATS, len(cubin), symbol]))
'''


def test_cubins_are_cached_on_disk_across_processes(tmp_path):
    """A second process compiles nothing: the cubin and its launch data come from
    EMBER_CACHE_DIR/triton."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["EMBER_CACHE_DIR"] = str(tmp_path)
    loop = str(GOLDEN / "codegen/golden/gelu_bias.loop")
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CACHE_SCRIPT, loop], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0][0] == {"compiles": 1, "disk_hits": 0}
    assert runs[1][0] == {"compiles": 0, "disk_hits": 1}
    assert runs[0][1:] == runs[1][1:] and runs[0][1] > 1000
    assert len(list((tmp_path / "triton").glob("*.cubin"))) == 1


CHECKED = r'''
import sys
import ember._C as C
from ember import _triton_worker as W
k = C.triton_kernel(open(sys.argv[1]).read(), {"n": 64, "d": 32})
assert W.uses_device_asserts(k["source"])
cubin = W.compile_source(k["source"], k["name"], ["*i64", "*fp32", "*fp32", "i64", "i64"],
                         k["block_param"], k["block"], 90, 4)[0]
print("assertfail" if b"__assertfail" in cubin else "no assert")
'''


def test_index_checks_compile_to_device_asserts():
    """A kernel that checks its indices compiles with Triton's debug option, so its
    tl.device_assert reaches the cubin (a call of __assertfail) instead of being dropped."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", CHECKED,
                          str(GOLDEN / "codegen/golden/embedding_checked.loop")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "assertfail"


MATMUL = r'''
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import ember._C as C
from ember import _triton_worker as W
out = []
for dtype, ptr, bias in [("bf16", "*bf16", True), ("f32", "*fp32", False)]:
    t = C.triton_matmul([1, 4096, 3072, 768], dtype, dtype, [0, 768, 1], [0, 1, 768], [0, 3072, 1],
                        bias_dtype=dtype if bias else None, bias_strides=[0, 0, 1], allow_tf32=True)
    fn = W.kernel_function(t["source"], t["name"])
    cfg = t["configs"][0]
    consts = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
    sig = {name: ptr for name in fn.arg_names if name.startswith("b_")}
    sig.update({k: "constexpr" for k in consts})
    c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                       target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    out.append([dtype, len(c.asm["cubin"]), "wgmma" in c.asm["ptx"] or "mma" in c.asm["ptx"]])
    if dtype == "bf16":  # the same product with a fused epilogue (the C++ golden's kernel)
        golden = open(sys.argv[1]).read()
        source = t["source"][:t["source"].rfind("@triton.jit")] + golden
        fn = W.kernel_function(source, t["name"])
        sig = {name: ptr for name in fn.arg_names if name.startswith("b_")}
        sig.update({k: "constexpr" for k in consts})
        c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
        out.append(["bf16-epilogue", len(c.asm["cubin"]), "mma" in c.asm["ptx"]])
print(json.dumps(out))
'''


def test_matmul_template_compiles_to_sm90_tensor_core_code():
    """The max-autotune template (codegen/triton/triton_matmul.h) compiles for the H200 with its
    default configuration, its tl.dot on tensor cores (bf16, and TF32 for f32), and so does the
    bf16 product with a fused epilogue (tests/cpp/codegen/golden/linear_bf16_epilogue...)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    golden = os.path.join(os.path.dirname(__file__), "..", "..", "cpp", "codegen", "golden",
                          "linear_bf16_epilogue.matmul.golden")
    r = subprocess.run([sys.executable, "-c", MATMUL, golden], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert [d for d, _, _ in result] == ["bf16", "bf16-epilogue", "f32"]
    for dtype, size, mma in result:
        assert size > 1000 and mma, (dtype, size, mma)


ROW_TILE = r'''
import json, sys
import ember._C as C
from ember import _triton_worker as W
text = open(sys.argv[1]).read()
k = C.triton_kernel(text, {})
assert k["rows_param"] == "XBLOCK", k["rows_param"]
out = []
for rows, warps in [(k["rows_per_program"], 4), (32, 8)]:
    cubin = W.compile_source(k["source"], k["name"], ["*bf16", "*fp32", "*fp32", "*bf16",
                                                      "constexpr", "constexpr"],
                             f"RBLOCK={k['block']},XBLOCK={rows}", 0, 90, warps)[0]
    out.append(len(cubin))
print(json.dumps(out))
'''


def test_row_tiles_compile_to_sm90_with_their_rows_per_program():
    """A row tile's two constexprs (RBLOCK and the tuned XBLOCK) reach Triton's compiler through
    the compile worker's "NAME=value,..." form, for the default rows per program and another."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", ROW_TILE,
                        str(GOLDEN / "codegen/golden/layer_norm_rows.loop")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    sizes = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(sizes) == 2 and all(s > 1000 for s in sizes), sizes


ALIGNED = r'''
import json, re, sys
import triton
import ember._C as C
from ember import _triton_worker as W
ptx = []
compile = triton.compile
def keep_ptx(*args, **kwargs):
    c = compile(*args, **kwargs)
    ptx.append(c.asm["ptx"])
    return c
triton.compile = keep_ptx
k = C.triton_kernel(open(sys.argv[1]).read(), {})
out = []
for pointer in ["*fp32", "*fp32:16"]:
    W.compile_source(k["source"], k["name"], [pointer, pointer, "constexpr"], k["block_param"],
                     k["block"], 90, 4)
    out.append(sorted(set(re.findall(r"(?:ld|st)\.global[.\w]*", ptx[-1]))))
print(json.dumps(out))
'''


def test_aligned_pointers_load_and_store_16_bytes_at_a_time(tmp_path):
    """Note [Buffers aligned to 16 bytes]: the pointer types the runtime passes ("*fp32:16")
    declare each buffer's address a multiple of 16 bytes, so a row of a softmax over constant
    sizes loads and stores four f32 per instruction; without it, one."""
    static = (GOLDEN / "loop/golden/softmax.loop").read_text().replace("softmax(s0, s1)", "softmax()")
    path = tmp_path / "softmax_static.loop"
    path.write_text(static.replace("s0", "64").replace("s1", "1024"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", ALIGNED, str(path)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    plain, aligned = json.loads(r.stdout.strip().splitlines()[-1])
    assert plain == ["ld.global.b32", "st.global.b32"], plain
    assert aligned == ["ld.global.v4.b32", "st.global.v4.b32"], aligned
