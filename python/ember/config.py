"""ember's knobs, read from the environment (listed in docs/env_vars.md)."""

from __future__ import annotations

import os

# Most compiled entries one ember.compile keeps per code object (torch.compile's
# torch._dynamo.config.cache_size_limit). A frame whose entries reach it runs its original
# bytecode from then on, with one warning naming the guard that failed last: a recompile storm
# costs eager's time, not a compile per call. Read by every ember.compile call.
cache_size_limit: int = int(os.environ.get("EMBER_CACHE_SIZE_LIMIT", "8"))


def codegen() -> bool:
    """EMBER_CODEGEN=0 turns off generated kernels: every node runs as an ATen call."""
    return os.environ.get("EMBER_CODEGEN", "1") != "0"


def reduction_kernels() -> bool:
    """EMBER_REDUCTION_KERNELS=0 leaves reductions (softmax, layer_norm, sum, var, argmax, ...) to
    ATen instead of generating kernels for them (on by default)."""
    return os.environ.get("EMBER_REDUCTION_KERNELS", "1") != "0"


def reduction_fusion() -> bool:
    """EMBER_REDUCTION_FUSION=0 keeps reduction kernels to the reduction alone: their input is
    realized by a kernel of its own and the pointwise values after them get kernels of their own
    (prologue and epilogue fusion is on by default)."""
    return os.environ.get("EMBER_REDUCTION_FUSION", "1") != "0"
