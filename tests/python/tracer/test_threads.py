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


def test_a_factory_op_from_a_thread_with_the_trace_dispatch_state_is_recorded():
    """Autograd's device thread inherits the tracing thread's dispatch state (PrivateUse1 in the
    include set) but not its session: a factory op there (`scalar_tensor` in a CUDA backward)
    has no tracer tensor to find its trace by, and records into the one entered session."""
    K = torch._C.DispatchKey
    s = _C.TraceSession()
    x = s.add_input(torch.randn(3), "user", "x", None)
    out = {}

    def worker():
        with torch._C._IncludeDispatchKeyGuard(K.PrivateUse1), \
                torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(K.BackendSelect)):
            out["c"] = torch.scalar_tensor(2.0)

    with s:
        worker_thread = threading.Thread(target=worker)
        worker_thread.start()
        worker_thread.join()
        graph = s.finish([x * out["c"]])
    assert graph.ops == ["aten::scalar_tensor", "aten::mul.Tensor"], graph.ops
