"""Run ember.bench where ``import ember`` fails (for example before the C++ extension ember._C is built).

    python python/ember/bench/standalone.py --suite small --backends eager,inductor

``install_stub()`` first tries a normal ``import ember``; if that raises ImportError it registers a bare
``ember`` package (its ``__path__`` points at python/ember, its ``__init__`` is not run) so that
``ember.bench`` and the pure-Python modules next to it can be imported. The "ember" backend is then
reported as failing, with the import error as its reason.
"""

from __future__ import annotations

import os
import sys
import types


def install_stub() -> bool:
    """Make ``import ember.bench`` work. Returns True when a stub package had to be installed."""
    mod = sys.modules.get("ember")
    if mod is not None and getattr(mod, "__path__", None):
        return bool(getattr(mod, "__ember_bench_stub__", False))
    pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        import ember  # noqa: F401

        return False
    except ImportError as e:
        stub = types.ModuleType("ember")
        stub.__path__ = [pkg_dir]  # type: ignore[attr-defined]
        stub.__file__ = os.path.join(pkg_dir, "__init__.py")
        stub.__ember_bench_stub__ = True  # type: ignore[attr-defined]
        stub.__ember_import_error__ = f"{type(e).__name__}: {e}"  # type: ignore[attr-defined]
        sys.modules["ember"] = stub
        return True


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    # Don't let python/ember/bench itself shadow top-level modules.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    install_stub()
    from ember.bench.__main__ import main

    sys.exit(main())
