"""Each trace-time rewrite (src/tracer/rewrites.h), before and after, as graph text: a small
program traced with the rewrite turned off (CompileOptions::Trace::disabled_rewrites) and on,
against golden files (tests/python/rewrite/golden/<name>.{before,after}.txt; EMBER_ACCEPT_GOLDEN=1
rewrites them). Programs that need CUDA's choices are traced for cuda:0 with no GPU (nothing
runs); the golden text is a CPU-only torch's (on a GPU machine only the difference is checked).
Every row of the table has a case here."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C
from ember.tracing import trace_joint

GOLDEN = pathlib.Path(__file__).parent / "golden"


def forward(fn, args, device=None):
    return lambda options: str(ember.trace(fn, args, device=device, options=options))


def joint(fn, args, device=None):
    def run(options):
        g, _, _ = trace_joint(fn, args, [a.is_floating_point() for a in args], device=device,
                              options=ember.config.compile_options(options))
        return str(g)
    return run


def bn_train(x, w, b, rm, rv):
    return torch.relu(torch.ops.aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[0])


def conv(x, w, b=None):
    return F.conv2d(x, w, b, padding=1)


def gather_loss(x, t):
    return F.nll_loss(F.log_softmax(x, -1), t)


def index_put(x, m):
    y = x.clone()
    y[m] = 0.5
    return y


def foreach_add(a, b):
    return torch._foreach_add([a, b], 1.0)


CASES = {
    "cudnn_statistics": forward(bn_train, [torch.randn(4, 8, 6, 6), torch.randn(8),
                                           torch.randn(8), torch.zeros(8), torch.ones(8)],
                                "cuda:0"),
    "pool_window_offsets": joint(lambda x: F.max_pool2d(x * 2, 3, 2, 1).sum(),
                                 [torch.randn(2, 4, 12, 12)], "cuda:0"),
    "pool_backward_from_offsets": joint(lambda x: F.max_pool2d(x * 2, 3, 2, 1).sum(),
                                        [torch.randn(2, 4, 12, 12)], "cuda:0"),
    "foreach_per_tensor": forward(foreach_add, [torch.randn(3), torch.randn(4)]),
    "batch_norm_update": forward(
        lambda x, rm, rv: F.batch_norm(x, rm, rv, training=True),
        [torch.randn(4, 3), torch.zeros(3), torch.ones(3)]),
    "sdp_choice": None,  # asks CUDA's kernel: tests/python/gpu
    "backward_decomposition": joint(lambda x: torch.tanh(x).sum(), [torch.randn(4, 5)]),
    "split_reduction": forward(lambda x: F.group_norm(x, 1), [torch.randn(8, 512, 4001)],
                               "cuda:0"),
    "batch_norm_inference": forward(
        lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
        [torch.randn(4, 3, 5), torch.zeros(3), torch.ones(3), torch.randn(3), torch.randn(3)],
        "cuda:0"),
    "index_put_as_where": forward(index_put, [torch.randn(4, 5), torch.rand(4, 5) > 0.5]),
    "pad_unaligned_matmul": forward(lambda a, b: a @ b,
                                    [torch.randn(128, 1024, dtype=torch.bfloat16),
                                     torch.randn(1024, 1001, dtype=torch.bfloat16)], "cuda:0"),
    "convolution_bias_apart": forward(conv, [torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3),
                                             torch.randn(4)], "cuda:0"),
    "log_softmax_as_logsumexp": forward(lambda x: F.log_softmax(x, -1), [torch.randn(4, 32000)],
                                        "cuda:0"),
    "channels_last_convolution": forward(conv, [torch.randn(2, 3, 8, 8),
                                                torch.randn(4, 3, 3, 3)], "cuda:0"),
    "nll_loss_as_gather": forward(gather_loss, [torch.randn(4, 32000),
                                                torch.randint(0, 32000, (4,))], "cuda:0"),
}


def test_every_rewrite_has_a_case():
    assert [r["name"] for r in C.rewrite_table()] == list(CASES)


def text_of(run, options):
    try:
        return run(options)
    except Exception as e:  # noqa: BLE001 (the error is the "before" of a rewrite that makes it work)
        return f"error: {type(e).__name__}: {str(e).splitlines()[0]}\n"


def check_golden(path: pathlib.Path, text: str):
    if os.environ.get("EMBER_ACCEPT_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with EMBER_ACCEPT_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs:\n{text}"


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c is not None])
def test_before_and_after(name):
    run = CASES[name]
    before = text_of(run, {"disabled_rewrites": name})
    after = text_of(run, None)
    assert before != after, f"{name} changed nothing:\n{after}"
    assert not after.startswith("error"), after
    if torch.cuda.is_available():
        return  # the golden text is a CPU-only torch's (a real CUDA build chooses cuDNN's ops)
    check_golden(GOLDEN / f"{name}.before.txt", before)
    check_golden(GOLDEN / f"{name}.after.txt", after)


def test_every_op_a_row_names_is_an_operator_of_this_torch():
    """A renamed operator in a new torch fails here, not by the rewrite silently not applying."""
    for row in C.rewrite_table():
        for name in row["ops"]:
            if name.endswith("*"):
                continue  # a family (aten::_foreach_*)
            assert torch._C._jit_get_schemas_for_operator(name), (row["name"], name)
