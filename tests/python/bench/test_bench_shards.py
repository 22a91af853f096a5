"""scripts/bench_shards.py: model ordering, shard split, argument filtering and the merge of shard reports.

No model is run: the shard reports are written by hand (the driver's processes are exercised on the CPU by
hand, see docs/benchmarks.md). Takes about a second.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def shards():
    spec = importlib.util.spec_from_file_location("_bench_shards", os.path.join(ROOT, "scripts", "bench_shards.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench(shards):
    return shards.import_bench()


def test_priority_order_interleaves_families(shards, bench):
    specs = bench.select(None, None, False)
    order = shards.priority_order(specs, ["nanogpt", "T5Small"])
    assert sorted(s.name for s in order) == sorted(s.name for s in specs)
    fams = {s.family for s in specs}
    head = order[: len(fams)]
    assert {s.family for s in head} == fams  # every family's first model first
    builtin = [s.name for s in order if s.family == "builtin"]
    assert builtin[0] == "nanogpt"
    tr = [s.name for s in order if s.family == "transformers"]
    assert tr[:2] == ["T5Small", "BertForMaskedLM"]


def test_split_is_balanced_and_keeps_order(shards):
    names = [f"m{i}" for i in range(7)]
    parts = shards.split_shards(names, 2)
    assert parts == [["m0", "m2", "m4", "m6"], ["m1", "m3", "m5"]]
    parts = shards.split_shards(names, 2, {"m0": 10.0, "m1": 1.0, "m2": 1.0})
    assert parts[0] == ["m0"] and sorted(parts[0] + parts[1]) == sorted(names)
    assert shards.split_shards(["a"], 3) == [["a"], [], []]


def test_cpu_groups_are_disjoint(shards):
    groups = shards.cpu_groups(2)
    assert len(groups) == 2 and all(groups)
    if len(os.sched_getaffinity(0)) >= 2:
        assert not set(groups[0]) & set(groups[1])


def test_strip_owned_arguments(shards):
    argv = ["--device", "cuda", "--only", "a,b", "--json=x.json", "--include-heavy", "--repeat", "20",
            "--time-budget", "30", "--no-overhead", "--dtype", "bf16"]
    assert shards.strip_owned(argv) == ["--device", "cuda", "--repeat", "20", "--dtype", "bf16"]
    assert shards._drop(["--gpus", "2", "--deadline=5", "--dry-run", "--x"], "--gpus") == ["--deadline=5", "--dry-run", "--x"]


def _fake_report(bench, models, done, path, budget=100):
    from ember.bench.harness import BackendResult, ModelRun

    runs = []
    for n in done:
        r = ModelRun(model=n, family=bench.REGISTRY[n].family, suite="full", mode="inference", dtype="bf16",
                     device="cuda", batch_size=4)
        r.backends = {b: BackendResult(backend=b, status="pass", median_ms=2.0 if b == "eager" else 1.0,
                                       speedup=None if b == "eager" else 2.0, compile_s=None if b == "eager" else 5.0)
                      for b in ("eager", "inductor")}
        runs.append(r)
    meta = {"date": "2026-11-29T10:00:00", "wall_s": 50.0, "environment": {"device": "cuda", "gpu": "H200"},
            "settings": {"models": models, "modes": ["inference"], "dtypes": ["bf16"], "backends": ["eager", "inductor"],
                         "suite": "full", "device": "cuda", "time_budget_s": budget}}
    bench.Report(meta=meta, overhead={"eager": {"status": "pass"}}, runs=runs).to_json(str(path))


def test_merge_marks_crashed_killed_and_unstarted(shards, bench, tmp_path):
    # shard 0 crashed on nanogpt, restart ran tiny_resnet; shard 1 was killed on GPT2LMHeadModel
    _fake_report(bench, ["mlp", "nanogpt", "tiny_resnet"], ["mlp"], tmp_path / "x_shard0.json")
    _fake_report(bench, ["tiny_resnet"], ["tiny_resnet"], tmp_path / "x_shard0.r1.json")
    _fake_report(bench, ["BertForMaskedLM", "GPT2LMHeadModel", "T5Small"], ["BertForMaskedLM"], tmp_path / "x_shard1.json")
    atts = [
        {"shard": 0, "attempt": 0, "json": "x_shard0.json", "models": ["mlp", "nanogpt", "tiny_resnet"], "rc": -11,
         "crashed_model": "nanogpt", "error": "killed by SIGSEGV", "killed_at_deadline": False, "in_flight": None},
        {"shard": 1, "attempt": 0, "json": "x_shard1.json", "models": ["BertForMaskedLM", "GPT2LMHeadModel", "T5Small"],
         "rc": -15, "crashed_model": None, "error": None, "killed_at_deadline": True,
         "in_flight": ["GPT2LMHeadModel", "inference", "bf16"]},
        {"shard": 0, "attempt": 1, "json": "x_shard0.r1.json", "models": ["tiny_resnet"], "rc": 0,
         "crashed_model": None, "error": None, "killed_at_deadline": False, "in_flight": None},
    ]
    order = list(bench.REGISTRY)
    rep = shards.merge(bench, atts, str(tmp_path), order=order, extra_meta={"driver": {"attempts": atts}})
    by = {r.model: r for r in rep.runs}
    assert set(by) == {"mlp", "nanogpt", "tiny_resnet", "BertForMaskedLM", "GPT2LMHeadModel", "T5Small"}
    assert by["nanogpt"].status == "crashed" and "SIGSEGV" in by["nanogpt"].note
    assert by["GPT2LMHeadModel"].status == "skipped" and "still running" in by["GPT2LMHeadModel"].note
    assert by["T5Small"].status == "skipped" and "not started" in by["T5Small"].note
    assert by["tiny_resnet"].status == "ok"
    assert [r.model for r in rep.runs] == [n for n in order if n in by]  # the suite's order
    g = rep.summary()["inference/bf16"]
    assert g["models"] == 6 and g["skipped"] == 2 and g["crashed"] == 1 and g["eager_fail"] == 0
    assert g["backends"]["inductor"]["pass"] == 3 and abs(g["backends"]["inductor"]["geomean_speedup"] - 2.0) < 1e-9
    assert len(rep.meta["parts"]) == 3 and rep.meta["driver"]["attempts"][0]["crashed_model"] == "nanogpt"
    # round trip, and re-merging from the shard files alone (no driver record)
    rep.to_json(str(tmp_path / "m.json"))
    again = bench.Report.load(str(tmp_path / "m.json"))
    assert again.summary() == rep.summary()
    atts2 = shards.attempts_from_files(sorted(str(p) for p in tmp_path.glob("x_shard*.json")))
    assert [(a["shard"], a["attempt"]) for a in atts2] == [(0, 0), (0, 1), (1, 0)]
    rep2 = shards.merge(bench, atts2, str(tmp_path), order=order)
    by2 = {r.model: r for r in rep2.runs}
    assert by2["nanogpt"].status == "skipped" and "not finished" in by2["nanogpt"].note
    assert by2["tiny_resnet"].status == "ok" and by2["T5Small"].note == "not started: driver deadline"
    data = json.loads(again.to_json())
    assert data["summary"]["inference/bf16"]["crashed"] == 1


def test_driver_device_lost_and_crash_records(shards, bench, tmp_path):
    """A shard that exits with code 3 (sticky CUDA error) is not recorded as a crash; any other early exit is."""
    import types

    args, _ = shards.parse(["--out-dir", str(tmp_path), "--name", "x", "--max-restarts", "0", "--mode", "inference",
                            "--dtype", "bf16"])
    drv = shards.Driver(args, [], bench)
    path = tmp_path / "x_shard0.json"
    _fake_report(bench, ["mlp", "nanogpt", "tiny_resnet"], ["mlp"], path)
    data = json.loads(path.read_text())
    data["meta"]["aborted"] = "CUDA context unusable after mlp (inference/bf16): AcceleratorError: illegal address"
    path.write_text(json.dumps(data))
    log = tmp_path / "x_shard0.log"
    log.write_text("=== shard 0\nTraceback (most recent call last):\nRuntimeError: boom\n")
    att = shards.Attempt(0, 0, ["mlp", "nanogpt", "tiny_resnet"], str(path), str(log), [], 10.0, [0])
    att.proc = types.SimpleNamespace(returncode=3)
    drv.attempts.append(att)
    drv.finished(att, [0])
    assert att.crashed_model is None and att.error.startswith("device lost: CUDA context unusable")
    att2 = shards.Attempt(0, 0, ["mlp", "nanogpt", "tiny_resnet"], str(path), str(log), [], 10.0, [0])
    att2.proc = types.SimpleNamespace(returncode=-9)
    drv.finished(att2, [0])
    assert att2.crashed_model == "nanogpt" and att2.error == "killed by SIGKILL; RuntimeError: boom"
    assert not drv.running  # no restart left: nothing started


def test_merge_of_whole_reports_prefers_runs_over_skips(shards, bench, tmp_path):
    from ember.bench.harness import ModelRun

    first, rerun = tmp_path / "first.json", tmp_path / "rerun.json"
    _fake_report(bench, ["BertForMaskedLM", "GPT2LMHeadModel"], ["BertForMaskedLM"], first)
    rep = bench.Report.load(str(first))
    rep.runs.append(ModelRun(model="GPT2LMHeadModel", family="transformers", suite="full", mode="inference",
                             dtype="bf16", device="cuda", batch_size=4, status="skipped", note="not started"))
    rep.meta["driver"] = {}
    rep.to_json(str(first))
    _fake_report(bench, ["GPT2LMHeadModel"], ["GPT2LMHeadModel"], rerun)
    merged = shards.merge_reports(bench, [str(first), str(rerun)])
    status = {r.model: r.status for r in merged.runs}
    assert status == {"BertForMaskedLM": "ok", "GPT2LMHeadModel": "ok"}
    assert merged.meta["merge"]["source"]["GPT2LMHeadModel/inference/bf16"] == "rerun.json"
    # a later skip does not replace an earlier run
    merged = shards.merge_reports(bench, [str(rerun), str(first)])
    assert {r.model: r.status for r in merged.runs}["GPT2LMHeadModel"] == "ok"


def test_merge_on_the_command_line_keeps_the_order_given(shards, bench, tmp_path):
    """`--merge a b`: b's run of a model replaces a's, whatever the names' alphabetical order
    (a re-run named "rerun" listed before "zeroth" must not lose to it)."""
    zeroth, rerun = tmp_path / "zeroth.json", tmp_path / "rerun.json"
    for path in (zeroth, rerun):
        _fake_report(bench, ["GPT2LMHeadModel"], ["GPT2LMHeadModel"], path)
        rep = bench.Report.load(str(path))
        rep.meta["driver"] = {}
        rep.to_json(str(path))
    out = tmp_path / "merged.json"
    assert shards.main(["--merge", str(zeroth), str(rerun), "--json", str(out)]) == 0
    merged = bench.Report.load(str(out))
    assert merged.meta["merge"]["source"]["GPT2LMHeadModel/inference/bf16"] == "rerun.json"


def test_skip_done_leaves_out_models_an_earlier_report_ran(shards, tmp_path):
    def run(model, mode, dtype, status):
        return {"model": model, "mode": mode, "dtype": dtype, "status": status}

    (tmp_path / "a_merged.json").write_text(json.dumps({"runs": [
        run("mlp", "inference", "bf16", "ok"),
        run("nanogpt", "inference", "bf16", "skipped"),     # not started: still to run
        run("tiny_resnet", "inference", "fp32", "ok"),      # another dtype
        run("T5Small", "training", "bf16", "ok"),           # another mode
    ]}))
    (tmp_path / "b_merged.json").write_text(json.dumps({"runs": [run("pyg_GCN", "inference", "bf16",
                                                                     "eager_fail")]}))
    done = shards.done_models([str(tmp_path / "*_merged.json")], "inference", "bf16")
    assert done == {"mlp", "pyg_GCN"}
    assert "--skip-done" not in shards.strip_owned(["--skip-done", "x.json", "--dtype", "bf16"])
