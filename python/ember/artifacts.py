"""ember.save and ember.load: a compiled program's artifacts in one file, for a warm start in
another process or on another machine of the same kind (issue 37).

What a compiled function needs from disk to start warm is its kernels: the CPU kernels' shared
objects in the kernel cache (`<root>/kernels/<key>.so`, with their sidecars `.so.sum` and sources
`.cpp`) and the GPU kernels' cubins (`<root>/triton/<key>.cubin`, `.json`, `.py`). Capture and
scheduling run again in the new process; they take milliseconds (docs/benchmarks.md, "Warm
start").

`save(compiled, path)` finds the cache entries of the kernels that `compiled`'s graphs were
compiled with, by their sources (each entry keeps its source beside it: every variant of a kernel,
such as Triton's block sizes, is found), and writes them to one zip file with a manifest of
ember's, torch's and Python's versions. `load(path)` checks the manifest against this process and
copies the entries into this user's cache (each file under a temporary name, then renamed, so no
reader sees half of one; CPU objects checked against their sidecars). A cache key covers the
compiler, its flags, the CPU's features and the versions, so an entry made on another kind of
machine is never used: it only costs its disk space.

Loading an archive trusts it as unpickling does: its shared objects run in this process when a
compile finds them. Load only archives you made or trust. The autotuning records of
max-autotune are not saved (the first call times the candidates again).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import weakref
import zipfile
from typing import Any

import torch

from . import _C, config

FORMAT = "ember-artifacts-v1"

# The capture log of each ember.compile result (capture.py registers it), for save().
_LOG_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def register(compiled: Any, log: Any) -> None:
    """Remembers the capture log of `compiled` (an ember.compile result)."""
    _LOG_OF[compiled] = log


def _versions() -> dict:
    from . import __version__

    return {"ember": __version__, "torch": torch.__version__,
            "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def _kernel_sources(compiled: Any) -> list[str]:
    log = _LOG_OF.get(compiled)
    if log is None:
        raise TypeError(f"ember.save: expected what ember.compile returned, got "
                        f"{type(compiled).__name__} (torch.compile(backend='ember') results keep "
                        "their kernels in the same cache: a second process finds them there)")
    sources = []
    for r in log.records():
        sources.extend(r.get("kernel_sources", []))
    return sources


def _folders() -> dict[str, str]:
    options = config.compile_options()
    return {"kernels": _C.kernel_cache_dir(options),
            "triton": os.path.join(_C.kernel_cache_root(options), "triton")}


# The files of one entry, by the suffix of its source file.
_ENTRY_FILES = {"kernels": (".cpp", (".so", ".so.sum")), "triton": (".py", (".cubin", ".json"))}


def _entries(folder: str, source_suffix: str, sources: set[bytes]) -> list[str]:
    """Keys of the entries in `folder` whose source file holds one of `sources`."""
    sizes = {len(s) for s in sources}
    keys = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return keys
    for name in names:
        if not name.endswith(source_suffix) or name.count(".") != 1:
            continue  # temporary files hold a pid and thread in their names
        path = os.path.join(folder, name)
        try:
            if os.path.getsize(path) not in sizes:
                continue
            with open(path, "rb") as f:
                if f.read() in sources:
                    keys.append(name[:-len(source_suffix)])
        except OSError:
            continue
    return keys


def save(compiled: Any, path: str | os.PathLike) -> dict:
    """Writes the kernels of `compiled` (what ember.compile returned, called at least once) to
    the zip file `path`. Returns what it wrote: {"kernels": CPU entries, "triton": GPU entries,
    "bytes": the file's size}."""
    sources = {s.encode() for s in _kernel_sources(compiled)}
    if not sources:
        raise ValueError("ember.save: nothing to save: the compiled function has compiled no "
                         "kernels yet (call it first) or its graphs run without generated kernels")
    folders = _folders()
    found = {kind: _entries(folders[kind], suffix, sources)
             for kind, (suffix, _) in _ENTRY_FILES.items()}
    manifest = {"format": FORMAT, "versions": _versions(), "entries": {}}
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for kind, keys in found.items():
            source_suffix, suffixes = _ENTRY_FILES[kind]
            kept = []
            for key in keys:
                files = [key + s for s in (*suffixes, source_suffix)]
                if not all(os.path.exists(os.path.join(folders[kind], f)) for f in files):
                    continue  # evicted or half-published meanwhile
                for f in files:
                    z.write(os.path.join(folders[kind], f), f"{kind}/{f}")
                kept.append(key)
            manifest["entries"][kind] = kept
        z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return {"kernels": len(manifest["entries"]["kernels"]),
            "triton": len(manifest["entries"]["triton"]), "bytes": os.path.getsize(path)}


def load(path: str | os.PathLike) -> dict:
    """Copies the kernels saved in `path` (ember.save) into this user's kernel cache, so the
    next compile of the same program finds them. Raises ValueError naming the mismatch when the
    file was saved by another ember, torch or Python version, or is not an ember archive. Returns
    {"kernels": CPU entries installed, "triton": GPU entries installed, "skipped": entries
    already present}."""
    path = os.fspath(path)
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"ember.load: {path} is not an ember archive ({e})") from None
    with z:
        try:
            manifest = json.loads(z.read("manifest.json"))
        except (KeyError, ValueError):
            raise ValueError(f"ember.load: {path} has no ember manifest") from None
        if manifest.get("format") != FORMAT:
            raise ValueError(f"ember.load: {path} is in format {manifest.get('format')!r}; this "
                             f"ember reads {FORMAT!r}")
        saved, here = manifest.get("versions", {}), _versions()
        differ = [f"{k} {saved.get(k)} (saved) != {here[k]} (here)" for k in here
                  if saved.get(k) != here[k]]
        if differ:
            raise ValueError(f"ember.load: {path} was saved by another setup: " + ", ".join(differ))
        folders = _folders()
        out = {"kernels": 0, "triton": 0, "skipped": 0}
        for kind, keys in manifest["entries"].items():
            if kind not in _ENTRY_FILES:
                raise ValueError(f"ember.load: {path} names an unknown kind of entry {kind!r}")
            source_suffix, suffixes = _ENTRY_FILES[kind]
            folder = folders[kind]
            os.makedirs(folder, mode=0o700, exist_ok=True)
            for key in keys:
                if not key.isalnum():
                    raise ValueError(f"ember.load: {path} holds a malformed entry name {key!r}")
                if os.path.exists(os.path.join(folder, key + suffixes[0])):
                    out["skipped"] += 1
                    continue
                # The source and sidecar first, the object last: a reader finds the object only
                # when the rest is in place (kernel_cache.h publishes in that spirit).
                for f in (key + source_suffix, *(key + s for s in reversed(suffixes))):
                    _install(z.read(f"{kind}/{f}"), os.path.join(folder, f))
                if kind == "kernels":
                    why = _C.verify_kernel_cache_entry(os.path.join(folder, key + ".so"))
                    if why:
                        for s in (*suffixes, source_suffix):
                            _remove(os.path.join(folder, key + s))
                        raise ValueError(f"ember.load: entry {key} of {path} is damaged ({why})")
                out[kind] += 1
        return out


def _install(data: bytes, path: str) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


__all__ = ["load", "save"]
