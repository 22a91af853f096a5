"""The compile pool of ember._triton: a batch of generated kernels compiles in worker processes
(python/ember/_triton_worker.py) to the same cubins as in this process, a worker that dies is
dropped and its kernel compiled here instead, and EMBER_COMPILE_PROCESSES=0 starts no process.
For sm_90 with no GPU present; runs in a subprocess, outside the interpreter mode the other tests
of this directory set."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

GOLDEN = pathlib.Path(__file__).parents[2] / "cpp"

SCRIPT = r'''
import json, os, signal, sys, tempfile
import torch
import ember._C as C
from ember import _triton

torch.cuda.get_device_capability = lambda device=None: (9, 0)  # no GPU here: sm_90
base = tempfile.mkdtemp()


def fresh(tag):  # empty caches (ember's cubins and Triton's own)
    os.environ["EMBER_CACHE_DIR"] = os.path.join(base, tag, "ember")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(base, tag, "triton")


def children():
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:  # a thread may end between the listing and the read
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass
    return sorted(pids)


def zombies():
    out = []
    for pid in children():
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    out.append(pid)
        except FileNotFoundError:  # reaped meanwhile
            pass
    return out


def job(path, sizes, num_warps, prefix="", name=None):
    k = C.triton_kernel(open(path).read(), sizes)
    fn = _triton.kernel_function(k["source"], k["name"])  # for its arguments' order
    types = {"s": "i64", "b": "*fp32"}
    sig = ["constexpr" if a == k["block_param"] else types[a[0]] for a in fn.arg_names]
    return (prefix + k["source"], name or k["name"], sig, k["block_param"], k["block"], 0,
            num_warps)


gelu, softmax, column_sum = json.loads(sys.argv[1])
jobs = [job(gelu[0], gelu[1], 2), job(gelu[0], gelu[1], 4), job(softmax[0], softmax[1], 4),
        job(column_sum[0], column_sum[1], 4),
        job(gelu[0], gelu[1], 4, name="no_such_kernel")]  # an error, the same both ways
out = {}

# In this process: no worker started.
os.environ["EMBER_COMPILE_PROCESSES"] = "0"
fresh("local")
local = _triton._compile(jobs)
out["local_no_children"] = _triton._POOL is None and children() == []
out["local_stats"] = [dict(_triton.STATS), dict(_triton.POOL_STATS)]

# In worker processes: the same cubins and messages.
del os.environ["EMBER_COMPILE_PROCESSES"]
fresh("pool")
pooled = _triton._compile(jobs)
out["same"] = pooled == local
out["error"] = pooled[-1]
out["names"] = [r[1] for r in pooled[:-1]]
out["cubin_sizes"] = [len(r[0]) for r in pooled[:-1]]
out["pool_stats"] = dict(_triton.POOL_STATS)
workers = children()
out["workers"] = len(workers)

# All from the disk cache: nothing compiled, no worker used.
out["cached_same"] = _triton._compile(jobs) == local
out["cached_stats"] = [dict(_triton.STATS), dict(_triton.POOL_STATS)]

# Both workers killed while idle: their kernels compile here, the rest too; no hang.
for w in list(_triton._POOL.workers):
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.wait()
fresh("killed")
out["killed_same"] = _triton._compile(jobs) == local
out["killed_stats"] = dict(_triton.POOL_STATS)

# A worker that dies in the middle of a compile (this kernel's module exits the process when
# ember is not imported: in a worker, not here). The next batch starts new workers first.
crash = job(gelu[0], gelu[1], 8, prefix='import os, sys\nif "ember" not in sys.modules:\n'
            '    os._exit(3)\n')
fresh("crash")
res = _triton._compile([crash, job(softmax[0], softmax[1], 8)])
out["crash"] = [r[1] if isinstance(r, tuple) else r for r in res]
out["crash_stats"] = dict(_triton.POOL_STATS)

# A kernel whose compile never ends (its module sleeps in a worker): its worker is killed after
# EMBER_TRITON_COMPILE_TIMEOUT seconds and the kernel gets the message (its nodes then run as
# ATen calls), not a compile here; the other kernel compiles.
hang = job(gelu[0], gelu[1], 16, prefix='import sys, time\nif "ember" not in sys.modules:\n'
           '    time.sleep(600)\n')
fresh("hang")
os.environ["EMBER_TRITON_COMPILE_TIMEOUT"] = "5"
res = _triton._compile([hang, job(softmax[0], softmax[1], 16)])
del os.environ["EMBER_TRITON_COMPILE_TIMEOUT"]
out["hang"] = [r[1] if isinstance(r, tuple) else r for r in res]
out["hang_stats"] = dict(_triton.POOL_STATS)
out["zombies"] = zombies()
out["alive"] = len(children()), len(_triton._POOL.workers)
out["pids"] = children()

# The background's compiles (src/runtime/triton_background.h): the same cubins; once exit has
# begun, none starts (each gets a message), and a first call's compile still does.
fresh("background")
out["background_same"] = _triton._compile(jobs[:4], True) == local[:4]
_triton._BACKGROUND_CANCELLED.set()
fresh("cancelled")
out["cancelled"] = _triton._compile(jobs[:2], True)
out["foreground_after_cancel"] = [r[1] for r in _triton._compile(jobs[2:4])]
print(json.dumps(out))
'''


def test_compile_pool(tmp_path):
    kernels = [
        (str(GOLDEN / "codegen/golden/gelu_bias.loop"), {"m": 64, "n": 128}),
        (str(GOLDEN / "loop/golden/softmax.loop"), {"s0": 64, "s1": 1000}),
        (str(GOLDEN / "codegen/golden/column_sum.loop"), {}),
    ]
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "EMBER_COMPILE_PROCESSES")}
    env["EMBER_COMPILE_THREADS"] = "2"
    # Without line information a cubin has no path or time of its (temporary) source file: the
    # same kernel compiles to the same bytes in any process.
    env["TRITON_DISABLE_LINE_INFO"] = "1"
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(kernels)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])

    assert out["local_no_children"]
    assert out["local_stats"] == [{"compiles": 4, "disk_hits": 0},
                                  {"started": 0, "compiles": 0, "fallbacks": 0, "timeouts": 0}]
    assert out["same"], "the pool's cubins differ from this process's"
    assert out["error"].startswith("AttributeError: ") and "no_such_kernel" in out["error"]
    assert out["names"] == ["ember_gelu_bias", "ember_gelu_bias", "ember_softmax",
                            "ember_column_sum"]
    assert min(out["cubin_sizes"]) > 1000
    assert out["pool_stats"] == {"started": 2, "compiles": 5, "fallbacks": 0, "timeouts": 0}
    assert out["workers"] == 2
    assert out["cached_same"]
    assert out["cached_stats"] == [{"compiles": 8, "disk_hits": 4},
                                   {"started": 2, "compiles": 6, "fallbacks": 0, "timeouts": 0}]
    assert out["killed_same"]
    assert out["killed_stats"] == {"started": 2, "compiles": 6, "fallbacks": 2, "timeouts": 0}
    assert out["crash"] == ["ember_gelu_bias", "ember_softmax"]
    assert out["crash_stats"] == {"started": 4, "compiles": 7, "fallbacks": 3, "timeouts": 0}
    assert out["hang"][0].startswith("Triton took over 5 s to compile ember_gelu_bias")
    assert out["hang"][1] == "ember_softmax"
    assert out["hang_stats"] == {"started": 5, "compiles": 8, "fallbacks": 3, "timeouts": 1}
    assert out["zombies"] == []
    assert out["alive"] == [1, 1]
    assert out["background_same"]
    assert out["cancelled"] == ["not compiled: the process is exiting"] * 2
    assert out["foreground_after_cancel"] == ["ember_softmax", "ember_column_sum"]
    # The last worker ended with its parent (atexit), reaped.
    for pid in out["pids"]:
        assert not os.path.exists(f"/proc/{pid}"), pid


WARM = r'''
import json, os, sys
import torch
os.environ["EMBER_CACHE_DIR"] = sys.argv[1]
from ember import _triton
torch.cuda.get_device_capability = lambda device=None: (9, 0)  # no GPU here: sm_90
jobs = [("def k(x):\n    pass\n", "k", ["*fp32"], "BLOCK", 128, 0, 4),
        ("def k(x):\n    pass\n", "k", ["*fp32"], "BLOCK", 256, 0, 8)]
if sys.argv[2] == "store":  # the cold process: what its compiles would have kept
    for i, job in enumerate(jobs):
        _triton._store(_triton._cache_key(*job[:5], 90, job[6]), job[0],
                       (bytes([i]) * 64, "k", 1024, 4, 0))
res = _triton._compile(jobs)
print(json.dumps({"triton": "triton" in sys.modules, "stats": _triton.STATS,
                  "res": [[len(r[0]), *r[1:]] for r in res]}))
'''


def test_a_warm_start_from_the_disk_cache_never_imports_triton(tmp_path):
    """Every kernel from the disk cache: the cache key takes Triton's version from its package
    metadata, so the process never imports triton (0.3-0.5 s of a warm start that otherwise takes
    milliseconds)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cache = str(tmp_path / "cache")
    runs = []
    for step in ("store", "warm"):
        r = subprocess.run([sys.executable, "-c", WARM, cache, step], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    warm = runs[1]
    assert warm["stats"] == {"compiles": 0, "disk_hits": 2}
    assert warm["res"] == [[64, "k", 1024, 4, 0], [64, "k", 1024, 4, 0]]
    assert not warm["triton"], "a warm start imported triton"
