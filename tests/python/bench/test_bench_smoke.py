"""Smoke test of ember.bench: two tiny models through the whole harness; checks the report, not the times.

Runs in ~20-40 s on 2 CPU cores. Uses the cheap torch.compile backend "aot_eager" instead of Inductor
(Inductor's first C++ compile alone takes longer than this whole test) and the "ember" backend, which
may pass or fail: a failure must be reported with a reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _import_bench():
    try:
        import ember.bench as bench  # noqa: PLC0415

        return bench
    except ImportError:
        # ember/__init__ needs the C++ extension; load ember.bench without it (see bench/standalone.py).
        path = os.path.join(ROOT, "python", "ember", "bench", "standalone.py")
        spec = importlib.util.spec_from_file_location("_ember_bench_standalone", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if os.path.join(ROOT, "python") not in sys.path:
            sys.path.insert(0, os.path.join(ROOT, "python"))
        mod.install_stub()
        import ember.bench as bench  # noqa: PLC0415

        return bench


bench = _import_bench()
MODELS = ["mlp", "nanogpt"]
BACKENDS = ["eager", "aot_eager", "ember"]


@pytest.fixture(scope="module")
def report():
    torch.set_num_threads(min(2, torch.get_num_threads()))
    return bench.run(models=MODELS, backends=BACKENDS, mode="inference,training", dtype="fp32", device="cpu",
                     suite="small", repeat=3, warmup=3, progress=False)


def _check_backend_result(run, name):
    x = run.backends[name]
    assert x.status in ("pass", "fail_accuracy", "fail_to_run"), (run.model, name, x.status)
    if x.status == "fail_to_run":
        assert x.reason, f"{run.model}/{name}: failure without a reason"
        assert x.phase
    elif x.status == "fail_accuracy":
        assert x.accuracy == "fail" and x.accuracy_detail
    else:
        assert x.median_ms is not None and x.median_ms > 0
        assert len(x.times_ms) == 3
        assert x.speedup is not None and x.speedup > 0
        assert x.first_call_s is not None and x.compile_s is not None
        assert x.compile_warm_s is not None
        assert x.accuracy in ("pass", "pass_cosine")
        assert x.graphs is not None and x.graphs >= 1


def test_report_structure(report):
    assert [(r.model, r.mode) for r in report.runs] == [
        ("mlp", "inference"), ("nanogpt", "inference"), ("mlp", "training"), ("nanogpt", "training")]
    for r in report.runs:
        assert r.status == "ok", (r.model, r.note)
        assert r.family == "builtin" and r.suite == "small" and r.device == "cpu" and r.dtype == "fp32"
        assert r.batch_size and r.batch_size > 0
        assert r.fp64_reference == "ok"
        assert list(r.backends) == BACKENDS
        e = r.backends["eager"]
        assert e.status == "pass" and e.median_ms > 0 and e.accuracy == "pass" and e.speedup is None
        _check_backend_result(r, "aot_eager")
        assert r.backends["aot_eager"].status == "pass"
        _check_backend_result(r, "ember")
        assert r.backends["aot_eager"].peak_mem_mb is None  # CPU: no allocator statistics


def test_summary_and_outputs(report, tmp_path):
    s = report.summary()
    assert set(s) == {"inference/fp32", "training/fp32"}
    for g in s.values():
        assert g["models"] == 2 and g["skipped"] == 0
        a = g["backends"]["aot_eager"]
        assert a["pass"] == 2 and a["geomean_speedup"] is not None
        e = g["backends"]["ember"]
        assert e["pass"] + e["fail_accuracy"] + e["fail_to_run"] == 2
    lines = report.summary_lines()
    assert any("geomean speedup" in line for line in lines)
    # With ember on the CPU: also Dynamo alone, and ember's compiled graph called without Dynamo.
    assert set(report.overhead) == set(BACKENDS) | {"dynamo (backend=eager)",
                                                     "ember runtime (no Dynamo)",
                                                     "ember-capture"}
    assert report.overhead["ember runtime (no Dynamo)"]["status"] == "pass"
    # And ember.compile (ember's own capture, no Dynamo).
    assert report.overhead["ember-capture"]["status"] == "pass"
    assert report.overhead["eager"]["status"] == "pass"
    assert report.overhead["aot_eager"]["status"] == "pass"
    text = report.render_text()
    for m in MODELS:
        assert m in text
    assert "per-call overhead" in text
    # Each median with the timed calls' interquartile range, in the table and the JSON.
    e = report.runs[0].backends["eager"]
    assert e.q1_ms <= e.median_ms <= e.q3_ms
    assert f"{e.median_ms:.2f} [{e.q1_ms:.2f}-{e.q3_ms:.2f}]" in text
    # JSON round trip
    path = tmp_path / "r.json"
    report.to_json(str(path))
    data = json.loads(path.read_text())
    assert data["meta"]["environment"]["torch"] == torch.__version__
    assert len(data["runs"]) == 4 and "summary" in data
    again = bench.Report.load(str(path))
    assert again.summary() == report.summary()
    # HTML chart: self-contained, one SVG per mode/dtype
    html = report.html()
    assert html.count("<svg") == 2 and "<script src" not in html and "aot_eager" in html
    # The same charts as a PNG, drawn by headless Chromium where it is installed.
    if shutil.which("chromium"):
        png = tmp_path / "charts.png"
        report.save_png(str(png))
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_ember_failure_is_reported(monkeypatch):
    """A backend failing on a model is reported as fail_to_run with its reason; the others still run."""
    from ember.bench import harness

    def failing_backend(gm, example_inputs):
        raise RuntimeError("ember smoke-test failure: op not supported")

    real = harness.resolve_backend

    def resolve(name):
        if name == "ember":
            return lambda m: torch.compile(m, backend=failing_backend)
        return real(name)

    monkeypatch.setattr(harness, "resolve_backend", resolve)
    rep = bench.run(models=["mlp"], backends=BACKENDS, mode="inference", device="cpu", suite="small", repeat=2,
                    warmup=2, overhead=False, warm_compile=False, progress=False)
    (run,) = rep.runs
    x = run.backends["ember"]
    assert x.status == "fail_to_run" and x.phase == "compile"
    assert "op not supported" in x.reason
    assert run.backends["aot_eager"].status == "pass"
    assert run.backends["eager"].status == "pass"
    fails = rep.failures()
    assert len(fails) == 1 and fails[0]["backend"] == "ember" and "op not supported" in fails[0]["reason"]
    assert "op not supported" in rep.render_text()
    assert rep.summary()["inference/fp32"]["backends"]["ember"]["fail_to_run"] == 1


def test_cli_list_and_rerender(report, tmp_path, capsys):
    from ember.bench.__main__ import main

    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    n = int(out.strip().splitlines()[-1].split()[0])
    assert n >= 30
    path = tmp_path / "r.json"
    report.to_json(str(path))
    html = tmp_path / "r.html"
    assert main(["--from-json", str(path), "--html", str(html)]) == 0
    assert "geomean speedup" in capsys.readouterr().out
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_missing_package_is_skipped_not_failed():
    missing = [s for s in bench.REGISTRY.values() if not s.available()]
    if not missing:
        pytest.skip("every optional package is installed")
    rep = bench.run(models=[missing[0].name], backends=["eager"], device="cpu", overhead=False, progress=False)
    assert rep.runs[0].status == "skipped" and "not installed" in rep.runs[0].note
    assert rep.failures() == []


def test_accuracy_rule():
    from ember.bench.harness import same

    ref = [("x", torch.ones(2000))]
    fp64 = [("x", torch.ones(2000, dtype=torch.float64))]
    assert same(ref, [("x", torch.ones(2000) + 1e-5)], fp64, 1e-3, False, False)[0]
    ok, detail = same(ref, [("x", torch.ones(2000) + 0.5)], fp64, 1e-3, False, False)
    assert not ok and "rmse" in detail
    ok, detail = same(ref, [("x", torch.ones(3))], fp64, 1e-3, False, False)
    assert not ok and "shape" in detail


def _same_whole(ref, res, fp64, tol, cos, low_precision):
    """The accuracy rule on whole tensors (the harness compares in pieces; both must agree)."""
    for i, ((name, a), (_, b)) in enumerate(zip(ref, res)):
        f = fp64[i][1] if fp64 is not None else None
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return False
            continue
        if cos:
            x, y = a.flatten().double(), b.flatten().double()
            if torch.allclose(x, y, atol=tol, rtol=tol, equal_nan=True):
                continue
            if not torch.nn.functional.cosine_similarity(x, y, dim=0, eps=1e-6).item() >= 0.99:
                return False
            continue
        if torch.allclose(a, b.to(a.dtype), atol=tol, rtol=tol, equal_nan=True):
            continue
        if f is None:
            return False
        ad, bd, f = a.double(), b.double(), f.double()
        if torch.isnan(bd).any() and not torch.isnan(ad).any():
            return False
        fin = torch.isfinite(f) & torch.isfinite(ad) & torch.isfinite(bd)
        f, ad, bd = f[fin], ad[fin], bd[fin]
        ref_err = torch.sqrt(torch.mean((f - ad) ** 2)).item()
        res_err = torch.sqrt(torch.mean((f - bd) ** 2)).item()
        mult = 3.0 if (low_precision or b.dtype in (torch.bfloat16, torch.float16) or a.numel() < 1000 or tol >= 2e-2) else 2.0
        if res_err > mult * ref_err + tol / 10.0:
            return False
    return True


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 24])
def test_accuracy_rule_in_pieces_matches_whole(monkeypatch, chunk):
    from ember.bench import harness

    monkeypatch.setattr(harness, "COMPARE_CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(3000, generator=g, dtype=torch.float64)
    eager = (exact + 1e-4 * torch.randn(3000, generator=g, dtype=torch.float64)).float()
    cases = []
    for scale in (1e-6, 1e-4, 3e-4, 1e-2):
        cases.append((eager, (exact + scale * torch.randn(3000, generator=g, dtype=torch.float64)).float()))
    nan = cases[-1][1].clone()
    nan[5] = float("nan")
    cases.append((eager, nan))
    inf_ref = exact.clone()
    inf_ref[7] = float("inf")
    cases.append((eager, cases[1][1]))
    cases.append((eager.bfloat16(), (exact + 1e-3 * torch.randn(3000, generator=g, dtype=torch.float64)).bfloat16()))
    cases.append((torch.arange(10), torch.arange(10)))
    cases.append((torch.arange(10), torch.arange(10).flip(0)))
    seen = set()
    for a, b in cases:
        for f in (exact if a.is_floating_point() else None, inf_ref if a.is_floating_point() else None, None):
            for cos in (False, True):
                for tol in (1e-5, 1e-3, 2e-2):
                    fp64 = [("x", f)] if f is not None else None
                    got, _ = harness.same([("x", a)], [("x", b)], fp64, tol, cos, False)
                    want = _same_whole([("x", a)], [("x", b)], fp64, tol, cos, False)
                    assert got == want, (tol, cos, a.dtype, f is None)
                    seen.add(got)
    assert seen == {True, False}


def test_interquartile_range():
    from ember.bench.harness import interquartile_ms

    assert interquartile_ms([0.001, 0.002, 0.003, 0.004, 0.005]) == pytest.approx((2.0, 4.0))
    assert interquartile_ms([0.003, 0.001]) == pytest.approx((1.0, 3.0))  # few calls: min, max
