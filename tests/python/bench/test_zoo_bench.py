"""ember.bench's family sweeps (python/ember/bench/zoo.py) and harness processes sharing a GPU
(GpuTurn, scripts/bench_shards.py --per-gpu).

timm and torchvision are not installed in the default test setup (they need another torch), so the
families themselves are exercised on the GPU machine; here: the sweep order, batch sizes, selectors
and the GPU lock, and the driver with two processes per "GPU" on the CPU (about 10 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from ember.bench import select, zoo
from ember.bench.harness import GpuTurn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_sweep_order_is_a_fixed_permutation():
    names = [f"model_{i}" for i in range(200)]
    order = zoo.sweep_order(names)
    assert sorted(order) == sorted(names)
    assert order == zoo.sweep_order(list(reversed(names)))  # the same whatever the listing order
    assert order != sorted(names)  # not alphabetical: a prefix samples the whole family
    # a family that grows keeps its members' relative order (continued sweeps stay consistent)
    grown = zoo.sweep_order(names + ["model_x", "model_y"])
    assert [n for n in grown if n in set(names)] == order


def test_batch_scales_with_image_area():
    assert zoo.batch_for(224, 224) == 64
    assert zoo.batch_for(256, 256) == 32  # 49 -> the power of two below
    assert zoo.batch_for(384, 384) == 16
    assert zoo.batch_for(448, 448) == 16
    assert zoo.batch_for(1024, 1024) == zoo.MIN_BATCH
    assert zoo.batch_for(96, 96) == 64  # never above the base batch


def test_unknown_zoo_family_is_named():
    with pytest.raises(KeyError, match="unknown zoo family 'nosuch'"):
        select(["zoo-nosuch"])
    with pytest.raises(KeyError, match="unknown zoo family"):
        select(["zoo-nosuch:resnet50"])


def test_one_zoo_model_registers_once():
    a = zoo.register_one("torchvision", "resnet18")
    b = select(["zoo-torchvision:resnet18"])
    assert b == [a] and a.family == "zoo-torchvision" and a.name == "zoo-torchvision:resnet18"


def test_gpu_turn_is_exclusive_between_processes(tmp_path):
    lock = str(tmp_path / "gpu.lock")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
        from ember.bench.harness import GpuTurn
        t = GpuTurn({lock!r}); t.acquire(); print('held', flush=True); time.sleep(1.5); t.release()
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    turn = GpuTurn(lock)
    t0 = time.perf_counter()
    turn.acquire()
    waited = time.perf_counter() - t0
    turn.acquire()  # a second acquire is a no-op
    turn.release()
    turn.release()
    holder.wait(timeout=30)
    assert waited > 0.5 and turn.waited_s == pytest.approx(waited, abs=0.05)


def test_driver_runs_processes_in_turns_on_one_device(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_shards.py"), "--gpus", "1", "--per-gpu", "2",
           "--no-gpu-split", "--out-dir", str(out), "--name", "t", "--device", "cpu", "--suite", "small",
           "--only", "mlp,nanogpt,tiny_resnet", "--backends", "eager,ember-capture", "--repeat", "2",
           "--warmup", "2", "--no-warm-compile", "--no-overhead", "--no-accuracy"]
    env = {k: v for k, v in os.environ.items() if k != "EMBER_BENCH_GPU_LOCK"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    d = json.loads((out / "t_merged.json").read_text())
    assert d["meta"]["driver"]["per_gpu"] == 2
    attempts = d["meta"]["driver"]["attempts"]
    assert sorted(a["shard"] for a in attempts) == [0, 1] and {a["gpu"] for a in attempts} == {0}
    runs = {r["model"]: r for r in d["runs"]}
    assert set(runs) == {"mlp", "nanogpt", "tiny_resnet"}
    for r in runs.values():
        assert r["status"] == "ok" and r["gpu_turn_wait_s"] is not None
        assert r["backends"]["ember-capture"]["status"] == "pass"
    assert len(list(out.glob("t_shard*.log"))) == 2
