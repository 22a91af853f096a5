"""ember's knobs, read from the environment (listed in docs/env_vars.md)."""

from __future__ import annotations

import os


def codegen() -> bool:
    """EMBER_CODEGEN=0 turns off generated kernels: every node runs as an ATen call."""
    return os.environ.get("EMBER_CODEGEN", "1") != "0"


def reduction_kernels() -> bool:
    """EMBER_REDUCTION_KERNELS=1 generates kernels for reductions (softmax, layer_norm, sum, ...).
    Off by default: correct, but not yet vectorized and slower than ATen's."""
    return os.environ.get("EMBER_REDUCTION_KERNELS", "0") == "1"
