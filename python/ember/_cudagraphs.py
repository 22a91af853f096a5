"""CUDA graph capture for mode="reduce-overhead" (src/runtime/cuda_graph.h).

The C++ runtime calls `_capture` once per compiled graph, on its second call: it runs the graph's
program under torch.cuda.graph (a side stream, a private memory pool of torch's caching
allocator, thread-local capture errors) and hands back the CUDAGraph, kept alive by the runtime,
and its cudaGraphExec_t, which the runtime replays with cuGraphLaunch from C++ on later calls.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _C


def _capture(device: int, body: Callable[[], None]) -> tuple[Any, int]:
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device):
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            body()
        try:
            exec_handle = graph.raw_cuda_graph_exec()
        except RuntimeError:  # not instantiated by capture_end in this version of torch
            graph.instantiate()
            exec_handle = graph.raw_cuda_graph_exec()
    return graph, int(exec_handle)


_C.set_cuda_graph_hook(_capture)
