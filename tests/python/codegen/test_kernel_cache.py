"""The kernel cache seen from a program (docs/design/cache.md): without a working C++ compiler
or with an unusable cache directory ember.compile still gives eager's results, says so once on
stderr naming the cause and the fix, and leaves no files behind. Each case runs in a fresh
process (the warnings are once per process)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import torch, ember
    def f(x):
        return torch.relu(x * 2 + 1).sum(dim=0)
    c = ember.compile(f)
    for n in (5, 7):
        x = torch.randn(n, 3)
        torch.testing.assert_close(c(x), f(x))
    print("RESULTS OK")
""")


def run(env_update, tmp_path):
    env = dict(os.environ)
    env.update(env_update)
    env.pop("EMBER_LOGS", None)
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RESULTS OK" in p.stdout
    return p.stderr


def files_under(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def test_no_compiler_warns_once_and_leaves_no_files(tmp_path):
    cache = tmp_path / "cache"
    err = run({"EMBER_CXX": "/nonexistent/ember-cxx", "EMBER_CACHE_DIR": str(cache)}, tmp_path)
    lines = [line for line in err.splitlines() if "ember: warning" in line]
    assert len(lines) == 1, err
    assert "/nonexistent/ember-cxx" in lines[0] and "EMBER_CXX" in lines[0]
    assert files_under(cache / "kernels") == []


def test_a_cache_dir_others_can_write_is_not_used(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    err = run({"EMBER_CACHE_DIR": str(cache)}, tmp_path)
    assert "can be written by other users" in err and "EMBER_CACHE_DIR" in err, err
    assert files_under(cache) == []


def test_a_read_only_cache_dir_is_not_used(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through read-only modes")
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    err = run({"EMBER_CACHE_DIR": str(cache)}, tmp_path)
    assert "not writable" in err, err


def test_a_fresh_cache_is_private_and_checked(tmp_path):
    cache = tmp_path / "new" / "cache"
    err = run({"EMBER_CACHE_DIR": str(cache)}, tmp_path)
    assert "ember: warning" not in err, err
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    sos = [f for f in files_under(cache / "kernels") if f.endswith(".so")]
    assert sos and all(os.path.exists(cache / "kernels" / (f + ".sum")) for f in sos)


def test_a_column_tile_layer_norm_compiles_in_seconds(tmp_path, monkeypatch):
    # gcc 12's -O3 unroll-and-jam took 39 s on this kernel's unit (a LayerNorm over a sum of
    # five inputs, one transposed: column tiles of 32 inside a loop over 1024 rows, four passes)
    # and over 8 minutes on timm's qwen3_vit; host_compiler.h turns it off (1.5 s).
    import time

    import torch
    import torch.nn.functional as F

    import ember
    from ember import _C

    monkeypatch.setattr(ember.config, "cache_dir", str(tmp_path))

    def f(a, b, c, d, e, w, bias):
        s = a.transpose(0, 1) + b + c + d + e
        return F.layer_norm(s, (1024,), w, bias), s.transpose(0, 1)

    args = [torch.randn(1024, 64)] + [torch.randn(64, 1024) for _ in range(4)]
    args += [torch.randn(1024), torch.randn(1024)]
    before = _C.host_compiler_stats()[0]
    start = time.perf_counter()
    out = ember.compile(f)(*args)
    took = time.perf_counter() - start
    assert _C.host_compiler_stats()[0] > before  # compiled now, not from a cache
    torch.testing.assert_close(out[0], f(*args)[0], rtol=1e-4, atol=1e-4)
    assert took < 20, f"{took:.1f} s to compile"
