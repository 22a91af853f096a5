"""ember.save / ember.load (issue 37, warm start): a compiled model's kernels in one file; a
fresh process with an empty cache that loads it compiles the same model with no compiler run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import ember

CHILD = textwrap.dedent("""
    import json, sys, torch, ember
    from ember import _C
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4))
    x = torch.randn(4, 8)
    action, path = sys.argv[1], sys.argv[2]
    loaded = ember.load(path) if action == "load" else None
    c = ember.compile(m)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
    saved = ember.save(c, path) if action == "save" else None
    print(json.dumps({"compiles": _C.host_compiler_stats()[0], "loaded": loaded, "saved": saved}))
""")


def run_child(action: str, path: str, cache: str) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, action, path], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_loaded_archive_makes_a_fresh_process_compile_nothing(tmp_path):
    archive = str(tmp_path / "mlp.ember.zip")
    first = run_child("save", archive, str(tmp_path / "cache_a"))
    assert first["compiles"] > 0
    assert first["saved"]["kernels"] > 0
    names = zipfile.ZipFile(archive).namelist()
    assert "manifest.json" in names and any(n.endswith(".so") for n in names)
    # Another cache, empty: without the archive it compiles again ...
    assert run_child("none", archive, str(tmp_path / "cache_b"))["compiles"] > 0
    # ... with it, nothing.
    second = run_child("load", archive, str(tmp_path / "cache_c"))
    assert second["loaded"]["kernels"] == first["saved"]["kernels"]
    assert second["compiles"] == 0
    # Loading into a cache that has the entries skips them.
    third = run_child("load", archive, str(tmp_path / "cache_c"))
    assert third["loaded"]["skipped"] == first["saved"]["kernels"] and third["compiles"] == 0


def test_load_refuses_another_setup_and_damaged_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(ember.config, "cache_dir", str(tmp_path / "cache"))
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    c = ember.compile(m)
    c(torch.randn(2, 4))
    archive = tmp_path / "a.zip"
    ember.save(c, archive)
    with zipfile.ZipFile(archive) as z:
        files = {n: z.read(n) for n in z.namelist()}

    def rewrite(path, **changes):
        with zipfile.ZipFile(path, "w") as z:
            for n, data in {**files, **changes}.items():
                z.writestr(n, data)

    manifest = json.loads(files["manifest.json"])
    manifest["versions"]["torch"] = "0.0.1"
    rewrite(tmp_path / "old.zip", **{"manifest.json": json.dumps(manifest)})
    with pytest.raises(ValueError, match=r"torch 0\.0\.1 \(saved\)"):
        ember.load(tmp_path / "old.zip")

    so = next(n for n in files if n.endswith(".so"))
    monkeypatch.setattr(ember.config, "cache_dir", str(tmp_path / "cache2"))
    rewrite(tmp_path / "bad.zip", **{so: files[so][:-16]})
    with pytest.raises(ValueError, match="damaged"):
        ember.load(tmp_path / "bad.zip")
    key = so.split("/")[1].split(".")[0]
    assert not any(f.startswith(key) for f in os.listdir(tmp_path / "cache2" / "kernels"))

    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not an ember archive"):
        ember.load(tmp_path / "junk.zip")


def test_save_names_what_it_cannot_save(tmp_path):
    with pytest.raises(TypeError, match="expected what ember.compile returned"):
        ember.save(lambda x: x, tmp_path / "x.zip")
    c = ember.compile(lambda x: x + 1)
    with pytest.raises(ValueError, match="call it first"):
        ember.save(c, tmp_path / "x.zip")
