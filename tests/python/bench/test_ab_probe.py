"""scripts/ab_probe.py: two ember.compile settings of one model in one process, timed in
alternating rounds. On the CPU with the suite's small mlp: codegen off (every node an ATen call)
against the defaults, each setting's compile honoured (the kernels counted), and the options'
text parsed as ember.config values."""

from __future__ import annotations

import argparse
import importlib.util
import os

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load():
    spec = importlib.util.spec_from_file_location("_ab_probe",
                                                  os.path.join(ROOT, "scripts", "ab_probe.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_options_text():
    ab = load()
    assert ab.parse_options("bias_apart=1, conv1x1_as_mm=off,cxx=g++,x") == {
        "bias_apart": True, "conv1x1_as_mm": False, "cxx": "g++", "x": True}
    assert ab.parse_options("") == {}
    # An integer option's 0 and 1 are numbers (session 67 once compared False with 536870912).
    assert ab.parse_options("launch_bound_products=0,cache_size_limit=1") == {
        "launch_bound_products": 0, "cache_size_limit": 1}


def test_two_settings_in_alternating_rounds():
    ab = load()
    args = argparse.Namespace(device="cpu", dtype="fp32", batch_size=2, size="small", warmup=2,
                              rounds=3, calls=2)
    ember.metrics.reset()
    row = ab.run_model("mlp", {}, {"codegen": False}, args)
    assert len(row["round_ratios"]) == 3
    assert len(row["a_times_ms"]) == len(row["b_times_ms"]) == 6
    assert row["a_ms"] > 0 and row["b_ms"] > 0
    # Setting A generated kernels; B (codegen off) none: each compile took its own options.
    assert ember.metrics.snapshot()["graphs"] == 2
    assert ember.metrics.snapshot()["kernels"] >= 1
