"""Context managers that set one piece of torch's global state and restore it on exit: the
default dtype, deterministic algorithms, float32 matmul precision, the thread count. Shared by
the global-state guard tests (capture/test_capture_global_state.py) and the capture fuzzer
(fuzz/capture_fuzz.py)."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def deterministic(on):
    old, old_warn = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old, warn_only=old_warn)


@contextlib.contextmanager
def matmul_precision(p):
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(p)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


@contextlib.contextmanager
def num_threads(n):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
