"""scripts/zoo_sweep.py: two tiny transformers classes through the whole sweep (a subprocess per
model, JSON rows, markdown, merge), and the output comparison on its own.

Takes about 30-50 s on 2 CPU cores (each model's process imports torch, transformers and ember, and
compiles under Dynamo and ember.compile). Checks the report's shape, not ember's results: a model
ember gets wrong or fails on must still be a row with a status and a reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "zoo_sweep.py")
MODELS = ["GPT2LMHeadModel", "BertForMaskedLM"]

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def zoo():
    spec = importlib.util.spec_from_file_location("_zoo_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    js, md = str(out / "zoo.json"), str(out / "zoo.md")
    subprocess.run([sys.executable, SCRIPT, "--family", "transformers", "--only", ",".join(MODELS),
                    "--jobs", "2", "--timeout", "240", "--json", js, "--markdown", md],
                   check=True, timeout=300, cwd=ROOT)
    return out, json.load(open(js)), open(md).read()


def test_rows(sweep):
    _, data, _ = sweep
    assert data["meta"]["torch"] == torch.__version__
    rows = {r["model"]: r for r in data["rows"]}
    assert sorted(rows) == sorted(MODELS)
    for name, r in rows.items():
        assert r["family"] == "transformers"
        assert r["status"] in ("ok", "ember_error", "dynamo_error"), r
        assert r["info"]["shrink"] == "tiny" and r["info"]["params"] < 1_000_000, r["info"]
        assert r["dynamo_correct"] is True and r["dynamo_graphs"] >= 1, r
        if r["status"] == "ok":
            assert isinstance(r["ember_correct"], bool)
            assert r["ember_graphs"] + r["ember_breaks"] >= 1
            assert r["ember_capture_s"] > 0 and r["dynamo_capture_s"] > 0
            assert r["ember_recompiles"] >= 0 and r["dynamo_recompiles"] >= 0
        else:
            assert r.get("ember_error"), r


def test_markdown_and_merge(sweep, zoo):
    out, data, md = sweep
    assert "## Summary" in md and "## Exceptions" in md and "## All models" in md
    for name in MODELS:
        assert f"| {name} | transformers |" in md
    # a second shard with one failed model, merged with the first
    failed = {"model": "FooForCausalLM", "family": "transformers", "status": "construct_failed",
              "reason": "ValueError: x"}
    other = {"meta": data["meta"], "rows": [failed]}

    b = out / "b.json"
    b.write_text(json.dumps(other))
    merged = out / "merged.md"
    subprocess.run([sys.executable, SCRIPT, "--merge", str(out / "zoo.json"), str(b), "--markdown",
                    str(merged)], check=True, timeout=60, cwd=ROOT, capture_output=True)
    text = merged.read_text()
    assert "models listed: 3" in text
    assert "| FooForCausalLM | transformers | construct_failed | ValueError: x |" in text


def test_compare(zoo):
    a = {"logits": torch.ones(2, 3), "cache": object(), "hidden": (torch.zeros(2), torch.arange(3))}
    same = zoo.tensors_of(a)
    assert len(same) == 3
    assert zoo.compare(same, [t.clone() for t in same], 1e-3)[:2] == (True, 0.0)
    off = [same[0] + 0.1, same[1], same[2]]
    ok, err, why = zoo.compare(same, off, 1e-3)
    assert not ok and abs(err - 0.1) < 1e-6 and "tensor 0" in why
    assert not zoo.compare(same, same[:2], 1e-3)[0]
