"""Combo kernels (sched/combo.h, docs/design/scheduler.md "Combo kernels") on the Triton path: a
combo kernel's parts each get their own range of programs of one launch. A loop-IR combo kernel
against the reference interpreter, and optimizer steps over many parameters through
torch.compile, whose per-parameter kernels run as a few Triton combo kernels (in Triton's
interpreter on the CPU, launched for real on a GPU)."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

import ember
from optimizer_steps import SHAPES, optimizer_steps_match_eager
from triton_check import DEVICE, INTERPRET, check_kernel

GOLDEN = pathlib.Path(__file__).parents[2] / "cpp"


def test_combo_kernel_matches_the_reference_interpreter():
    """Two parts that scale a matrix by a scalar (one jit function, called twice), an exp over a
    vector and scalar code, of several sizes: every output against the loop-IR interpreter."""
    text = (GOLDEN / "codegen/golden/combo.loop").read_text()
    for m in (1, 3, 200):
        k = check_kernel(text, {"m": m})
        assert k["form"] == "combo"
        assert k["source"].count("@triton.jit\ndef ember_combo_p") == 3


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_optimizer_steps_run_as_triton_combo_kernels(name, monkeypatch):
    if INTERPRET:
        monkeypatch.setenv("EMBER_TRITON_INTERPRET", "1")  # CPU graphs get Triton kernels
    backend = sys.modules["ember.backend"]
    real = backend._C
    made = []

    class Recorder:
        def __getattr__(self, attr):
            return getattr(real, attr)

        @staticmethod
        def CompiledGraph(*args, **kwargs):  # noqa: N802
            made.append(real.CompiledGraph(*args, **kwargs))
            return made[-1]

    monkeypatch.setattr(backend, "_C", Recorder())
    snap = optimizer_steps_match_eager(name, SHAPES, device=DEVICE)
    assert snap["kernels"] == 2, snap  # see tests/python/training/test_optimizer.py
    assert made and all(g.num_kernels >= 1 for g in made)
    for g in made:
        assert all("@triton.jit" in s for s in g.kernel_sources)
        assert all("(combo of" in s for s in g.describe_steps() if s.startswith("kernel")), \
            g.describe_steps()
