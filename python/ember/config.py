"""ember's knobs, read from the environment (listed in docs/env_vars.md)."""

from __future__ import annotations

import os


def codegen() -> bool:
    """EMBER_CODEGEN=0 turns off generated kernels: every node runs as an ATen call."""
    return os.environ.get("EMBER_CODEGEN", "1") != "0"
