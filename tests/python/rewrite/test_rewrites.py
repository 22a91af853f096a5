"""Each trace-time rewrite (src/rewrite/rewrites.h), before and after, as graph text: a small
program traced with the rewrite turned off (CompileOptions::Trace::disabled_rewrites) and on,
against golden files (tests/python/rewrite/golden/<name>.{before,after}.txt; EMBER_ACCEPT_GOLDEN=1
rewrites them). Programs that need CUDA's choices are traced for cuda:0 with no GPU (nothing
runs); the golden text is a CPU-only torch's (on a GPU machine only the difference is checked).
A row that applies on no device by default is traced under the option that widens it. Every row
of the table has a case here; the device predicates are checked against the table's report."""

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
    "backward_reduction_decomposition": joint(lambda x: (torch.softmax(x, -1) * x).sum(),
                                              [torch.randn(4, 5)], "cuda:0"),
    "batch_norm_backward_decomposition": (
        joint(lambda x, w: F.batch_norm(x, None, None, w, training=True).sum(),
              [torch.randn(4, 3, 5), torch.randn(3)]),
        {"decompose_backward_everywhere": True}),
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
    # Times cuDNN on both layouts on the device: tests/python/gpu (on a machine without one,
    # such as this, the convolution is recorded as it is).
    "grouped_convolution_layout": None,
    "channels_last_convolution": forward(conv, [torch.randn(2, 3, 8, 8),
                                                torch.randn(4, 3, 3, 3)], "cuda:0"),
    # Under EMBER_CONV1X1_AS_MM=1 only (off by default).
    "pointwise_convolution_as_product": (
        forward(lambda x, w: F.relu(F.conv2d(x, w)), [torch.randn(1, 16, 8, 8, dtype=torch.bfloat16),
                                                      torch.randn(32, 16, 1, 1, dtype=torch.bfloat16)],
                "cuda:0"),
        {"conv1x1_as_mm": True}),
    # On the CPU, a grouped convolution too (oneDNN's NHWC kernels; cuDNN's grouped ones are
    # not always faster channels-last: the CUDA row grouped_convolution_layout times them).
    "channels_last_convolution_cpu": forward(lambda x, w: F.conv2d(x, w, padding=1, groups=2),
                                             [torch.randn(2, 4, 8, 8), torch.randn(6, 2, 3, 3)]),
    "vector_norm_as_reduction": forward(lambda x: F.normalize(x, dim=-1) + x.norm(p=float("inf")),
                                        [torch.randn(4, 16, dtype=torch.bfloat16)]),
    "nll_loss_as_gather": forward(gather_loss, [torch.randn(4, 32000),
                                                torch.randint(0, 32000, (4,))], "cuda:0"),
}


def test_every_rewrite_has_a_case():
    assert [r["name"] for r in C.rewrite_table()] == list(CASES)


def case(name):
    """The case's program and the options both of its traces run under."""
    c = CASES[name]
    return c if isinstance(c, tuple) else (c, {})


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
    run, options = case(name)
    before = text_of(run, {**options, "disabled_rewrites": name})
    after = text_of(run, options or None)
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


# The device predicates, as the table reports them: the devices a row applies on before its
# function is called, and the option that widens them to every device.
DEVICES = {
    "cudnn_statistics": ("cuda", None),
    "pool_window_offsets": ("cuda", "trace.splits_everywhere"),
    "pool_backward_from_offsets": ("any", None),
    "foreach_per_tensor": ("any", None),
    "batch_norm_update": ("any", None),
    "sdp_choice": ("cuda", None),
    "backward_decomposition": ("any", None),
    "backward_reduction_decomposition": ("cuda", "trace.decompose_backward_everywhere"),
    "batch_norm_backward_decomposition": ("nowhere", "trace.decompose_backward_everywhere"),
    "split_reduction": ("cuda", "trace.splits_everywhere"),
    "batch_norm_inference": ("cuda", None),
    "index_put_as_where": ("any", None),
    "pad_unaligned_matmul": ("cuda", None),
    "convolution_bias_apart": ("cuda", None),
    "log_softmax_as_logsumexp": ("cuda", "trace.splits_everywhere"),
    "grouped_convolution_layout": ("cuda", None),
    "channels_last_convolution": ("cuda", None),
    "pointwise_convolution_as_product": ("cuda", None),
    "channels_last_convolution_cpu": ("cpu", None),
    "vector_norm_as_reduction": ("any", None),
    "nll_loss_as_gather": ("cuda", "trace.splits_everywhere"),
}


def test_the_table_reports_each_rows_device_predicate():
    table = C.rewrite_table()
    assert {r["name"]: (r["device"], r["widened_by"]) for r in table} == DEVICES
    for r in table:
        assert set(r) == {"name", "ops", "device", "widened_by", "when", "does"}, r
        if r["widened_by"] is not None:  # an option of ember.config
            ember.config.compile_options({r["widened_by"].split(".")[-1]: True})


def test_a_cuda_row_is_not_tried_for_a_cpu_op_unless_its_option_widens_it():
    # log_softmax_as_logsumexp: CUDA, or every device with trace.splits_everywhere.
    def fn(x):
        return F.log_softmax(x, -1)

    x = torch.randn(4, 32000)
    cpu = ember.trace(fn, [x])
    assert cpu.ops == ["aten::_log_softmax"]  # the CPU: not consulted
    cuda = ember.trace(fn, [x], device="cuda:0")
    assert "aten::logsumexp" in cuda.ops and "aten::_log_softmax" not in cuda.ops
    widened = ember.trace(fn, [x], options={"splits_everywhere": True})
    assert widened.ops == cuda.ops  # the CPU under the widening option: as on CUDA
    # A CUDA-only row with no widening option stays off on the CPU under the other options.
    conv = forward(lambda x, w, b: F.conv2d(x, w, b), [torch.randn(1, 3, 8, 8),
                                                       torch.randn(4, 3, 3, 3), torch.randn(4)])
    everything = {"splits_everywhere": True, "decompose_backward_everywhere": True}
    assert conv(everything) == conv(None)
    assert "aten::add" not in conv(everything)


def test_a_row_for_no_device_applies_only_under_its_option():
    run, options = case("batch_norm_backward_decomposition")
    assert "native_batch_norm_backward" in run(None)
    assert "native_batch_norm_backward" not in run(options)
    # Its option on the CPU is what turns it on, as on CUDA (nowhere by default).
    cuda = joint(lambda x, w: F.batch_norm(x, None, None, w, training=True).sum(),
                 [torch.randn(4, 3, 5), torch.randn(3)], "cuda:0")
    assert "native_batch_norm_backward" in cuda(None)


def test_the_tracer_includes_nothing_of_the_rewrites():
    """ember_rewrite sits above ember_tracer (CMakeLists.txt): the tracer knows the row type and
    the call (tracer/rewrite_call.h), and a TraceSession is given its table."""
    src = pathlib.Path(__file__).resolve().parents[3] / "src"
    if not src.is_dir():
        pytest.skip("no source tree")
    for f in sorted((src / "tracer").iterdir()):
        for line in f.read_text().splitlines():
            assert not line.startswith('#include "rewrite/'), (f.name, line)
