"""An op on a tracer tensor from another thread, while its trace is entered on the caller's, is
recorded in that trace (src/tracer/dispatch.cpp): autograd's engine runs a CUDA tensor's backward
on its device thread while the tracing thread waits, so a CUDA program's joint graph needs it."""

import threading

import torch

import ember._C as _C


def test_an_op_from_another_thread_is_recorded_in_the_entered_trace():
    s = _C.TraceSession()
    x = s.add_input(torch.randn(3), "user", "x", None)
    out = {}
    with s:
        y = x * 2
        worker = threading.Thread(target=lambda: out.setdefault("z", (y + 1).relu()))
        worker.start()
        worker.join()
        graph = s.finish([out["z"]])
    assert graph.ops == ["aten::mul.Tensor", "aten::add.Tensor", "aten::relu"], graph.ops
