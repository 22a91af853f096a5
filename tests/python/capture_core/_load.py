"""Imports ember's torch-free capture core: the top-level `_capture_core` of a build directory on
sys.path (scripts/test_capture_core.sh puts it there) when there is one, else `ember._capture_core`
of the installed ember. The build directory wins so that an installed (possibly editable, possibly
older) ember cannot shadow the module under test."""

from __future__ import annotations

import importlib


def load_capture_core():
    try:
        return importlib.import_module("_capture_core")
    except ImportError:
        return importlib.import_module("ember._capture_core")


cc = load_capture_core()
