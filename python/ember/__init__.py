"""ember: a just-in-time compiler for PyTorch programs, with a C++ core.

    import torch, ember
    model = torch.compile(model, backend="ember")   # or backend=ember.backend

See README.md and docs/ARCHITECTURE.md.
"""

import torch  # noqa: F401  (loads libtorch before ember._C)

from . import errors, metrics
from . import _C  # noqa: F401
from . import _cudagraphs  # noqa: F401  (CUDA graph capture for mode="reduce-overhead")
from .backend import backend
from .capture import compile, explain
from .errors import CompileError, DataDependentError, InternalError, Unsupported
from .tracing import Graph, trace

import importlib.util as _importlib_util

if _importlib_util.find_spec("triton") is not None:
    from . import _triton  # noqa: F401  (Triton's compiler for generated GPU kernels)

__all__ = [
    "backend",
    "compile",
    "explain",
    "trace",
    "Graph",
    "errors",
    "metrics",
    "CompileError",
    "Unsupported",
    "DataDependentError",
    "InternalError",
]
__version__ = "0.1.0"
