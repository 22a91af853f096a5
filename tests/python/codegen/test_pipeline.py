"""The pipeline (src/runtime/pipeline.h): compile_graph runs its named steps in order, times each,
verifies the graph after a step that changed it, and dumps it with the option dump_pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

import ember
import ember._C as C
from ember.tracing import trace_with_structure

STEPS = ["causal_attention", "fold_constants", "choose_target", "hoist_collectives",
         "sink_collective_waits", "bind_inputs", "schedule", "generate_kernels", "plan_lifetimes",
         "plan_memory", "decide_cuda_graphs"]


def f(x):
    return torch.softmax(x * 2, -1) + torch.ones(16) * 3


def test_the_steps_run_in_order_and_are_timed():
    graph, _ = trace_with_structure(f, [torch.randn(8, 16)])
    compiled = C.CompiledGraph(graph)
    assert [name for name, _ in compiled.step_seconds] == STEPS
    assert all(s >= 0 for _, s in compiled.step_seconds)
    x = torch.randn(8, 16)
    torch.testing.assert_close(compiled(x)[0], f(x))


def test_without_constant_folding_the_graph_passes_do_not_run():
    graph, _ = trace_with_structure(f, [torch.randn(8, 16)])
    options = {**ember.config.compile_options(), "runtime.fold_constants": False}
    compiled = C.CompiledGraph(graph, options=options)
    assert [name for name, _ in compiled.step_seconds] == STEPS[2:]


def test_dump_pipeline_prints_the_graph_a_step_changed():
    code = ("import torch, ember\n"
            "f = ember.compile(lambda x: x + torch.ones(3) * 2)\n"
            "f(torch.randn(3))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "EMBER_DUMP_PIPELINE": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ember: pipeline step fold_constants changed the graph:" in p.stderr, p.stderr
    assert "folded_ones" in p.stderr
