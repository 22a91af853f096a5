"""OpInfo sweep: the forward samples of every OpInfo whose ATen lowering is one of ember's
generated kernels (pointwise table, reduction kernels), differential against eager through
ember.testing.check_model, with EMBER_REDUCTION_KERNELS=1.

One test per (op, dtype). By default (CI) a fixed op list (opinfo_sweep_lib.CI_OPS) and at most 3
samples per (op, dtype) (EMBER_OPINFO_SAMPLES overrides); EMBER_OPINFO_FULL=1 runs every sample
of every op in opinfo_sweep_lib.OPS. A test fails when a sample's compiled result differs from
eager or compiling raises; fallbacks and graphs that made no kernel are correct and only counted
(printed in the terminal summary, see conftest.py). `python tests/python/opinfo/sweep_report.py`
prints the same as a table; results are in docs/design/opinfo_sweep.md.
"""

import pytest
import torch

import opinfo_sweep_lib as lib

# (name, variant, dtype) -> why it fails. Real discrepancies found by the sweep, kept visible as
# non-strict xfails (they pass in runs that do not reach the failing sample).
KNOWN_FAILURES: dict[tuple[str, str, torch.dtype], str] = {
    ("addcdiv", "", torch.bfloat16): (
        "bf16 addcdiv(self, t1, t2, value=3.14) with broadcast or 0-dim operands: under "
        "torch.compile the graph ember receives has 3 nodes (div, mul, add), each rounded to bf16 "
        "as its own op, while the eager reference runs ATen's fused addcdiv, which rounds once "
        "(full sweep samples 5, 9, 11: eager 0.2129 vs ember 0.25). ember.trace of torch.addcdiv "
        "gives the single aten::addcdiv node. Fix: keep f32 across fused bf16 chains as Inductor does"
    ),
}


def _params():
    out = []
    for name, variant, dtype in lib.cases():
        marks = []
        reason = KNOWN_FAILURES.get((name, variant, dtype))
        if reason:
            marks.append(pytest.mark.xfail(strict=False, reason=reason))
        out.append(pytest.param(name, variant, dtype, id=lib.case_id(name, variant, dtype), marks=marks))
    return out


@pytest.mark.parametrize("name,variant,dtype", _params())
def test_opinfo_forward(name, variant, dtype):
    results = lib.run_case(name, variant, dtype, lib.samples_per_case())
    lib.RECORDED.append((lib.case_id(name, variant, dtype), results))
    assert results, f"{name} has no samples for {dtype}"
    failed = [r for r in results if r.kind == "fail"]
    assert not failed, "\n".join(
        [f"{len(failed)} of {len(results)} samples of {lib.case_id(name, variant, dtype)} failed:"]
        + [f"  sample {r.index} {r.desc}: {r.message}" for r in failed])


def test_op_table_is_in_op_db():
    """Every op of the explicit list is an OpInfo of op_db, with CPU dtypes to test."""
    ops = lib.opinfos()
    assert set(lib.CI_OPS) <= set(lib.OPS)
    for key, op in ops.items():
        assert any(d in op.supported_dtypes("cpu") for d in lib.DTYPES), key
