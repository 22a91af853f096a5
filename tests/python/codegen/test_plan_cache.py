"""Plans cached on disk (src/runtime/plan_cache.h, docs/design/cache.md "Plans"): a second process
compiling the same graph reads its plan back instead of scheduling it, with the same results; a
corrupted entry is refused, scheduled again and replaced; the option turns the cache off; and
plans that scheduled quickly are not stored."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, torch, torch.nn.functional as F, ember
    from ember import _C

    def f(x):  # PoolFormer's token mixer: pooling minus identity, group norm, residual
        for _ in range(3):
            y = F.group_norm(x, 1)
            x = x + (F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y)
        return x

    torch.manual_seed(0)
    x = torch.randn(2, 8, 12, 12)
    out = ember.compile(f)(x)
    torch.testing.assert_close(out, f(x), atol=1e-4, rtol=1e-4)
    print(json.dumps(list(_C.plan_cache_stats())))
""")


def run(tmp_path, **env):
    full = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), **env}
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    hits, stored, rejected = json.loads(r.stdout.strip().splitlines()[-1])
    return hits, stored, rejected, r.stderr


def plans(tmp_path):
    d = tmp_path / "plans"
    return sorted(p for p in d.glob("*.plan")) if d.is_dir() else []


def test_second_process_reads_the_plan_back(tmp_path):
    hits, stored, rejected, _ = run(tmp_path, EMBER_PLAN_CACHE_MIN_SECONDS="0")
    assert (hits, rejected) == (0, 0) and stored >= 1
    assert len(plans(tmp_path)) == stored
    first = {p.name: p.read_bytes() for p in plans(tmp_path)}
    assert all(b.startswith(b"check ") and b"\nember-plan v1\n" in b for b in first.values())
    hits, stored, rejected, _ = run(tmp_path, EMBER_PLAN_CACHE_MIN_SECONDS="0")
    assert (stored, rejected) == (0, 0) and hits == len(first)
    # Deterministic: the same plans, byte for byte.
    assert {p.name: p.read_bytes() for p in plans(tmp_path)} == first


def test_a_corrupted_entry_is_scheduled_again(tmp_path):
    run(tmp_path, EMBER_PLAN_CACHE_MIN_SECONDS="0")
    entries = plans(tmp_path)
    # One with a kernel (entries are named by hashes that change with every build, so which
    # comes first is not fixed; a plan may hold no kernel).
    target = next(p for p in entries if b"kernel " in p.read_bytes())
    # Same size, other bytes: the sidecar's content hash no longer matches.
    data = bytearray(target.read_bytes())
    i = data.index(b"kernel ") + 20
    data[i] = ord("#") if data[i] != ord("#") else ord("%")
    target.write_bytes(bytes(data))
    hits, stored, rejected, err = run(tmp_path, EMBER_PLAN_CACHE_MIN_SECONDS="0")
    assert rejected == 1 and stored == 1 and hits == len(entries) - 1
    assert "failed a check and is scheduled again" in err
    run(tmp_path, EMBER_PLAN_CACHE_MIN_SECONDS="0")  # and the replacement reads back
    assert plans(tmp_path) == entries


@pytest.mark.parametrize("env", [{"EMBER_PLAN_CACHE": "0", "EMBER_PLAN_CACHE_MIN_SECONDS": "0"},
                                 {}])
def test_off_or_quickly_scheduled_plans_are_not_stored(tmp_path, env):
    # Off; or on with the default threshold (0.05 s), which these small graphs stay under.
    hits, stored, rejected, _ = run(tmp_path, **env)
    assert (hits, stored, rejected) == (0, 0, 0)
    assert plans(tmp_path) == []


def test_the_threshold_is_a_number():
    from ember import _C, config
    from ember.errors import CompileError

    assert config.compile_options({"plan_cache_min_seconds": 1})["sched.plan_cache_min_seconds"] \
        == 1.0
    with pytest.raises(CompileError, match="'plan_cache_min_seconds' must be float"):
        config.compile_options({"plan_cache_min_seconds": "soon"})
    _C.TraceSession(options={"sched.plan_cache_min_seconds": 0.5})
    with pytest.raises(CompileError, match="expected a number"):
        _C.TraceSession(options={"sched.plan_cache_min_seconds": True})
