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
