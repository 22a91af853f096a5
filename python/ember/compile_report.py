"""The compile report: one self-contained HTML page per frame compile of ember.compile, and an
index of them.

    ember.report("out/")        # the compiles of this process so far
    EMBER_REPORT=out/ python …  # the same, written when the process exits

Each page shows what the compile decided and why: whether the frame was captured whole, broke
(with the reason and the source lines around the break) or runs eagerly; the graph; the guards
that decide when the compiled code runs again; the generated kernels with their source; and the
timings (the whole compile, the capture). Pages are plain HTML and CSS, no scripts, so any browser
(or a text tool) reads them; tests/python/capture/test_compile_report.py renders them in headless
Chromium.
"""

from __future__ import annotations

import atexit
import html
import linecache
import os
import re
from typing import Any

_LOCATION = re.compile(r" at (?P<file>[^\s()]+):(?P<line>\d+) \(")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: .85em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .25em .6em; }
.captured { color: #1a7f37; } .break { color: #9a6700; } .eager { color: #cf222e; }
.hit { background: #fff3b0; }
"""


def _status(r: dict) -> tuple[str, str]:
    if not r["captured"]:
        return "eager", "runs eagerly"
    if r["graph_break"]:
        return "break", "graph break"
    return "captured", "captured whole"


def _source_lines(reason: str, around: int = 3) -> str:
    """The program's lines around the first location a reason names (the break's own line
    marked), or ""."""
    m = _LOCATION.search(reason)
    if m is None:
        return ""
    path, line = m.group("file"), int(m.group("line"))
    rows = []
    for n in range(max(1, line - around), line + around + 1):
        text = linecache.getline(path, n)
        if not text:
            continue
        mark = " class='hit'" if n == line else ""
        rows.append(f"<span{mark}>{n:5d}  {html.escape(text.rstrip())}</span>")
    if not rows:
        return ""
    return f"<p>{html.escape(path)}:{line}</p><pre>" + "\n".join(rows) + "</pre>"


def page(r: dict, index: int) -> str:
    """One compile record (ember.capture.records()) as a self-contained HTML page."""
    esc = html.escape
    cls, status = _status(r)
    counts = [("nodes", r["nodes"]), ("kernels", r["kernels"]), ("ATen calls", r["extern_steps"]),
              ("views", r["view_steps"]), ("nodes in kernels", r["fused_nodes"]),
              ("guards", r["guards"]), ("inputs", r["inputs"]),
              ("compile s", f"{r['seconds']:.4f}"), ("capture s", f"{r['capture_seconds']:.4f}")]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>ember compile {index}: "
             f"{esc(r['code'])}</title><style>{_STYLE}</style></head><body>",
             f"<h1>Compile {index}: {esc(r['code'])}</h1>",
             f"<p id='status' class='{cls}'><b>{status}</b>"
             + (f": {esc(r['reason'])}" if r["reason"] else "") + "</p>"]
    if r["reason"]:
        parts.append(_source_lines(r["reason"]))
    parts.append("<table id='counts'>" + "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in counts) + "</table>")
    if r["symbolic_fallback"]:
        parts.append(f"<p>{esc(r['symbolic_fallback'])}</p>")
    if r["codegen_notes"]:
        parts.append("<h2>Not generated</h2><ul>" + "".join(
            f"<li>{esc(n)}</li>" for n in r["codegen_notes"]) + "</ul>")
    if r["graph"]:
        parts.append(f"<h2>Graph</h2><pre id='graph'>{esc(r['graph'])}</pre>")
    if r["guard_text"]:
        parts.append(f"<h2>Guards</h2><pre id='guards'>{esc(r['guard_text'])}</pre>")
    for k, source in enumerate(r.get("kernel_sources", [])):
        parts.append(f"<h2>Kernel {k}</h2><pre class='kernel'>{esc(source)}</pre>")
    parts.append("<p><a href='index.html'>all compiles</a></p></body></html>")
    return "\n".join(parts)


def index_page(records: list[dict]) -> str:
    esc = html.escape
    rows = []
    for i, r in enumerate(records):
        cls, status = _status(r)
        rows.append(f"<tr><td><a href='compile_{i}.html'>{i}</a></td><td>{esc(r['code'])}</td>"
                    f"<td class='{cls}'>{status}</td><td>{r['nodes']}</td><td>{r['kernels']}</td>"
                    f"<td>{r['seconds']:.3f}</td><td>{esc(r['reason'])}</td></tr>")
    graphs = sum(1 for r in records if r["captured"])
    breaks = sum(1 for r in records if r["graph_break"] or not r["captured"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>ember compiles</title>"
            f"<style>{_STYLE}</style></head><body><h1>ember: {len(records)} compiles</h1>"
            f"<p id='summary'>{graphs} graphs, {breaks} graph breaks or eager frames, "
            f"{sum(r['kernels'] for r in records)} kernels, "
            f"{sum(r['seconds'] for r in records):.3f} s compiling</p>"
            "<table><tr><th>#</th><th>frame</th><th>status</th><th>nodes</th><th>kernels</th>"
            "<th>compile s</th><th>reason</th></tr>" + "".join(rows) + "</table></body></html>")


def report(directory: str | os.PathLike) -> str:
    """Writes index.html and compile_<i>.html (one per frame compile of every ember.compile in
    this process so far) into `directory`; returns the index's path."""
    from .capture import records

    recs = records()
    os.makedirs(directory, exist_ok=True)
    for i, r in enumerate(recs):
        with open(os.path.join(directory, f"compile_{i}.html"), "w", encoding="utf-8") as f:
            f.write(page(r, i))
    path = os.path.join(directory, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(index_page(recs))
    return path


_at_exit: list[Any] = []


def report_at_exit(directory: str) -> None:
    """Writes the report into `directory` when the process exits (EMBER_REPORT), once."""
    if directory and not _at_exit:
        _at_exit.append(directory)
        atexit.register(lambda: report(_at_exit[0]))
