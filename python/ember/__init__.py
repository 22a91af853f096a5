"""ember: a just-in-time compiler for PyTorch programs, with a C++ core.

    import torch, ember
    model = torch.compile(model, backend="ember")   # or backend=ember.backend

See README.md and docs/ARCHITECTURE.md.
"""

import torch  # noqa: F401  (loads libtorch before ember._C)


def _check_torch() -> None:
    """ember._C links to the libtorch of the torch it was built against: another minor version
    would fail at import with a missing symbol, or worse, later. Say so plainly instead."""
    try:
        from ._build_info import TORCH_VERSION as built
    except ImportError:  # a source tree without a build: _C's import says what is missing
        return
    now = torch.__version__.split("+")[0]
    if now.split(".")[:2] != built.split(".")[:2]:
        major_minor = ".".join(built.split(".")[:2])
        raise ImportError(
            f"ember was built against torch {built}, but torch {torch.__version__} is installed: "
            f"install torch=={major_minor}.* or rebuild ember against this torch "
            f"(pip install --no-build-isolation .)")


_check_torch()

from . import errors, metrics  # noqa: E402
from . import _C  # noqa: F401,E402
from . import _cudagraphs  # noqa: F401  (CUDA graph capture for mode="reduce-overhead")
from .backend import backend
from .artifacts import load, save
from .capture import compile, explain
from .compile_report import report
from .errors import CompileError, DataDependentError, InternalError, Unsupported
from .tracing import Graph, trace



def finish_compiles(timeout_s: float | None = None) -> bool:
    """Waits until the compiles ember left running in the background are done: the candidate
    launch configurations of large Triton kernels (config option triton_background_tuning), which
    each kernel times at its next launch. None: no time limit. True when none is left."""
    return _C.finish_background_compiles(-1.0 if timeout_s is None else float(timeout_s))


import importlib.util as _importlib_util  # noqa: E402

if _importlib_util.find_spec("triton") is not None:
    from . import _triton  # noqa: F401  (Triton's compiler for generated GPU kernels)

__all__ = [
    "backend",
    "compile",
    "explain",
    "finish_compiles",
    "load",
    "save",
    "report",
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
