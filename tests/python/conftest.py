"""Shared fixtures for ember's Python tests.

ember must import: a broken build fails every test loudly instead of skipping them.

EMBER_TEST_BACKEND=<backend> runs the differential tests against another torch.compile backend
(e.g. "aot_eager") to validate the harness itself; ember's counters are then not asserted. The
default, and what CI runs, is "ember".
"""

from __future__ import annotations

import os

import pytest
import torch

# Without a GPU, Triton kernels run in Triton's interpreter (tests/python/triton). It must be on
# before anything imports triton: triton.language's own jit functions (tl.sum, ...) are made at
# import, interpreted or not.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

BACKEND = os.environ.get("EMBER_TEST_BACKEND", "ember")

if BACKEND == "ember":
    import ember  # noqa: F401  (fails loudly when ember is not built/installed)
    import ember._C  # noqa: F401

import ember.errors  # noqa: E402,F401
import ember.metrics  # noqa: E402,F401
from ember.testing import check_model  # noqa: E402


class Checker:
    """check_model with the suite's backend; counters are asserted only for ember."""

    backend = BACKEND
    is_ember = BACKEND == "ember"

    def __call__(self, fn, args=(), kwargs=None, *, expect_graphs=None, expect_fallbacks=None,
                 min_nodes=None, **kw):
        if not self.is_ember:
            expect_graphs = expect_fallbacks = None
        res = check_model(fn, args, kwargs, backend=self.backend, expect_graphs=expect_graphs,
                          expect_fallbacks=expect_fallbacks, **kw)
        if self.is_ember:
            if min_nodes is None and expect_graphs:
                min_nodes = 1
            if min_nodes is not None:
                assert res["nodes"] >= min_nodes, (
                    f"expected at least {min_nodes} ember node(s), got {res['nodes']}; counters {res}")
            if expect_fallbacks == 0:
                assert not res["fallback_reasons"], res
        return res

    def captured(self, fn, args=(), kwargs=None, *, graphs=1, **kw):
        """A program ember captures whole: `graphs` graphs, no fallback, some nodes."""
        return self(fn, args, kwargs, expect_graphs=graphs, expect_fallbacks=0, **kw)


@pytest.fixture
def check():
    return Checker()


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with fresh Dynamo caches and ember counters, and default grad mode."""
    torch._dynamo.reset()
    ember.metrics.reset()
    grad = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(grad)
    torch._dynamo.reset()


def pytest_sessionfinish(session, exitstatus):
    """Every graph the suite captured through ember.compile parses back to the same text
    (src/graph/parser.h): the graph parser round-trips every graph the suite produces."""
    if BACKEND != "ember" or exitstatus != 0:
        return
    import ember.capture
    seen, bad = set(), []
    for r in ember.capture.records():
        text = r.get("graph") or ""
        if not text or text in seen:
            continue
        seen.add(text)
        try:
            again = ember._C.reprint_graph_text(text)
        except Exception as e:  # noqa: BLE001 (reported below)
            bad.append(f"{type(e).__name__}: {e}\n{text}")
            continue
        if again != text:
            bad.append(f"reprinted differently:\n{text}\n---\n{again}")
    if bad:
        print(f"\ngraph parser: {len(bad)} of {len(seen)} captured graphs do not round-trip; "
              f"the first:\n{bad[0]}")
        session.exitstatus = 1
    elif seen:
        print(f"\ngraph parser: all {len(seen)} distinct captured graphs round-trip")
