"""scikit-build-core metadata provider (pyproject.toml): ember's dependency on torch, pinned to
the minor version of the torch it is built against, whose libtorch its C++ links to
(`torch==X.Y.*`). Runs in the build's Python, so the build needs torch installed there: build
with `--no-build-isolation` (`pip wheel --no-build-isolation --no-deps .`)."""

from __future__ import annotations

from typing import Any


def dynamic_metadata(field: str, settings: Any = None, project: Any = None) -> list[str]:
    if field != "dependencies":
        raise RuntimeError(f"packaging/torch_pin.py provides dependencies, not {field}")
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("building ember needs torch installed in the build's Python: build "
                           "with --no-build-isolation") from e
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return [f"torch=={major}.{minor}.*"]
