"""The benchmark report: terminal table, summary lines, JSON and a self-contained HTML/SVG chart."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from .harness import BackendResult, ModelRun, geomean

COMPILED_OK = ("pass", "fail_accuracy")


@dataclasses.dataclass
class Report:
    meta: dict
    overhead: dict
    runs: list[ModelRun]

    # ------------------------------------------------------------------ derived numbers

    def backends(self) -> list[str]:
        names: list[str] = []
        for r in self.runs:
            for b in r.backends:
                if b not in names:
                    names.append(b)
        for b, e in self.overhead.items():
            # Overhead-only rows (Dynamo alone, ember's runtime without Dynamo) are no backends.
            if b not in names and not e.get("reference_only"):
                names.append(b)
        return names

    def groups(self) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        for r in self.runs:
            if (r.mode, r.dtype) not in seen:
                seen.append((r.mode, r.dtype))
        return seen

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per "mode/dtype": per compiled backend: pass counts, geomean speedup, compile times, memory."""
        out: dict[str, dict[str, Any]] = {}
        for mode, dtype in self.groups():
            runs = [r for r in self.runs if r.mode == mode and r.dtype == dtype]
            ran = [r for r in runs if r.status not in ("skipped",)]
            g: dict[str, Any] = {
                "models": len(runs),
                "skipped": len(runs) - len(ran),
                "eager_fail": sum(1 for r in ran if r.status == "eager_fail"),
                "crashed": sum(1 for r in ran if r.status in ("crashed", "timeout")),
                "backends": {},
            }
            compiled = [b for b in self.backends() if b != "eager"]
            for b in compiled:
                res = [r.backends[b] for r in ran if b in r.backends]
                passed = [x for x in res if x.status == "pass"]
                g["backends"][b] = {
                    "attempted": len(res),
                    "pass": len(passed),
                    "fail_accuracy": sum(1 for x in res if x.status == "fail_accuracy"),
                    "fail_to_run": sum(1 for x in res if x.status == "fail_to_run"),
                    "not_run": sum(1 for x in res if x.status == "not_run"),
                    "geomean_speedup": geomean(x.speedup for x in passed),
                    "mean_compile_s": _mean(x.compile_s for x in res if x.status in COMPILED_OK),
                    "mean_compile_warm_s": _mean(x.compile_warm_s for x in res if x.status in COMPILED_OK),
                    "geomean_peak_mem_ratio": geomean(x.peak_mem_ratio for x in passed),
                }
            # pairwise: each compiled backend against inductor (ember vs inductor is the headline)
            if "inductor" in compiled:
                for b in compiled:
                    if b == "inductor":
                        continue
                    both = [r for r in ran if r.backends.get(b, BackendResult(b)).status == "pass"
                            and r.backends.get("inductor", BackendResult("inductor")).status == "pass"]
                    g["backends"][b]["vs_inductor"] = {
                        "models": len(both),
                        "geomean_speedup_ratio": geomean(
                            r.backends[b].speedup / r.backends["inductor"].speedup for r in both
                            if r.backends[b].speedup and r.backends["inductor"].speedup),
                        "geomean_compile_ratio_cold": geomean(
                            r.backends[b].compile_s / r.backends["inductor"].compile_s for r in both
                            if _pos(r.backends[b].compile_s) and _pos(r.backends["inductor"].compile_s)),
                        "geomean_compile_ratio_warm": geomean(
                            r.backends[b].compile_warm_s / r.backends["inductor"].compile_warm_s for r in both
                            if _pos(r.backends[b].compile_warm_s) and _pos(r.backends["inductor"].compile_warm_s)),
                    }
            out[f"{mode}/{dtype}"] = g
        return out

    def failures(self) -> list[dict[str, Any]]:
        rows = []
        for r in self.runs:
            for b, x in r.backends.items():
                if x.status in ("fail_to_run", "fail_accuracy"):
                    rows.append({"model": r.model, "mode": r.mode, "dtype": r.dtype, "backend": b,
                                 "status": x.status, "phase": x.phase,
                                 "reason": x.reason or x.accuracy_detail or ""})
        return rows

    def skipped(self) -> list[dict[str, Any]]:
        return [{"model": r.model, "mode": r.mode, "dtype": r.dtype, "note": r.note}
                for r in self.runs if r.status == "skipped"]

    # ------------------------------------------------------------------ text

    def summary_lines(self) -> list[str]:
        lines = []
        for key, g in self.summary().items():
            head = f"[{key}] {g['models']} models, {g['skipped']} skipped, {g['eager_fail']} failed in eager"
            if g.get("crashed"):
                head += f", {g['crashed']} crashed or timed out"
            lines.append(head)
            for b, x in g["backends"].items():
                lines.append(
                    f"  {b}: geomean speedup {_fx(x['geomean_speedup'])} over eager; passed {x['pass']}/{x['attempted']}"
                    f" (fail_accuracy {x['fail_accuracy']}, fail_to_run {x['fail_to_run']}); mean compile"
                    f" {_fs(x['mean_compile_s'])} cold / {_fs(x['mean_compile_warm_s'])} warm;"
                    f" peak memory {_fx(x['geomean_peak_mem_ratio'])} of eager")
                v = x.get("vs_inductor")
                if v:
                    lines.append(
                        f"  {b} vs inductor ({v['models']} models passing both): speedup ratio"
                        f" {_fx(v['geomean_speedup_ratio'])}; compile-time ratio {_fx(v['geomean_compile_ratio_cold'])}"
                        f" cold / {_fx(v['geomean_compile_ratio_warm'])} warm")
        skipped = self.skipped()
        if skipped:
            notes: dict[str, int] = {}
            for s in skipped:
                notes[s["note"] or "?"] = notes.get(s["note"] or "?", 0) + 1
            lines.append("skipped (not failures): " + "; ".join(f"{n}: {c}" for n, c in notes.items()))
        return lines

    def overhead_lines(self) -> list[str]:
        if not self.overhead:
            return []
        cases = []
        for e in self.overhead.values():
            for k in e:
                if k not in ("status", "reason", "startup_s", "reference_only") and k not in cases:
                    cases.append(k)
        rows = [["backend", "first compile s", *[f"{c} us/call" for c in cases]]]
        for b, e in self.overhead.items():
            if e.get("status") != "pass":
                rows.append([b, "FAILED", e.get("reason", "")[:90]] + [""] * (len(cases) - 1))
                continue
            rows.append([b, f"{e.get('startup_s', 0):.2f}", *[f"{e.get(c, float('nan')):.1f}" for c in cases]])
        return ["per-call overhead on tiny graphs:"] + _fmt_table(rows)

    def table(self) -> str:
        rows = [["model", "mode/dtype", "bs", "backend", "status", "ms [IQR]", "speedup", "compile s cold/warm",
                 "peak MB", "mem/eager", "accuracy", "graphs/breaks"]]
        for r in self.runs:
            key = f"{r.mode}/{r.dtype}"
            if r.status == "skipped":
                rows.append([r.model, key, "-", "-", "skipped", "", "", "", "", "", "", r.note or ""])
                continue
            for b, x in r.backends.items():
                rows.append([
                    r.model, key, str(r.batch_size or "-"), b, x.status,
                    _with_spread(x), _fx(x.speedup) if b != "eager" else "",
                    "" if (b == "eager" or (x.compile_s is None and x.compile_warm_s is None))
                    else f"{_f(x.compile_s, '{:.1f}')}/{_f(x.compile_warm_s, '{:.1f}')}",
                    _f(x.peak_mem_mb, "{:.0f}"), _fx(x.peak_mem_ratio) if b != "eager" else "",
                    x.accuracy, "" if x.graphs is None else f"{x.graphs}/{x.graph_breaks}",
                ])
        out = _fmt_table(rows)
        fails = self.failures()
        if fails:
            out.append("")
            out.append("failures (model / mode/dtype / backend / status@phase: reason):")
            for f in fails:
                out.append(f"  {f['model']} / {f['mode']}/{f['dtype']} / {f['backend']} / {f['status']}"
                           f"@{f['phase'] or 'accuracy'}: {f['reason']}")
        return "\n".join(out)

    def render_text(self) -> str:
        env = self.meta.get("environment", {})
        head = (f"ember.bench {self.meta.get('date', '')}  device={env.get('device')} "
                f"{env.get('gpu') or env.get('cpu')}  torch {env.get('torch')}  suite={self.meta.get('settings', {}).get('suite')}")
        parts = [head, "", self.table(), ""]
        ov = self.overhead_lines()
        if ov:
            parts += ov + [""]
        parts += ["summary:"] + self.summary_lines()
        return "\n".join(parts)

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "overhead": self.overhead, "summary": self.summary(),
                "runs": [dataclasses.asdict(r) for r in self.runs], "failures": self.failures()}

    def to_json(self, path: str | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1, default=_json_default)
        if path:
            with open(path, "w") as f:
                f.write(text)
        return text

    @classmethod
    def load(cls, path: str) -> "Report":
        with open(path) as f:
            d = json.load(f)
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        runs = []
        for rd in d.get("runs", []):
            rd = dict(rd)
            bk = {b: BackendResult(**x) for b, x in rd.pop("backends", {}).items()}
            runs.append(ModelRun(**rd, backends=bk))
        return cls(meta=d.get("meta", {}), overhead=d.get("overhead", {}), runs=runs)

    @classmethod
    def merge(cls, reports: list["Report"]) -> "Report":
        """One report from several (for example one per GPU shard of the same configuration).

        meta is the first report's, with ``settings.models`` the union of all parts' models, ``date`` the
        earliest, ``wall_s`` the longest, and ``parts`` listing each part's date, wall time, command, device
        and models. The per-call overhead is taken from the first part that measured each backend.
        """
        if not reports:
            return cls(meta={}, overhead={}, runs=[])
        meta = json.loads(json.dumps(reports[0].meta, default=_json_default))
        if len(reports) > 1:
            settings = dict(meta.get("settings") or {})
            names: list[str] = []
            for rep in reports:
                for n in (rep.meta.get("settings") or {}).get("models") or []:
                    if n not in names:
                        names.append(n)
            settings["models"] = names
            meta["settings"] = settings
            dates = [str(rep.meta["date"]) for rep in reports if rep.meta.get("date")]
            if dates:
                meta["date"] = min(dates)
            walls = [rep.meta["wall_s"] for rep in reports if isinstance(rep.meta.get("wall_s"), (int, float))]
            if walls:
                meta["wall_s"] = max(walls)
            meta["parts"] = [{
                "date": rep.meta.get("date"), "wall_s": rep.meta.get("wall_s"), "command": rep.meta.get("command"),
                "device": (rep.meta.get("environment") or {}).get("device"),
                "gpu": (rep.meta.get("environment") or {}).get("gpu"),
                "models": (rep.meta.get("settings") or {}).get("models"),
                "time_budget_s": (rep.meta.get("settings") or {}).get("time_budget_s"),
                "overhead": rep.overhead,
            } for rep in reports]
        runs = [r for rep in reports for r in rep.runs]
        overhead: dict = {}
        for rep in reports:
            for b, e in rep.overhead.items():
                overhead.setdefault(b, e)
        return cls(meta=meta, overhead=overhead, runs=runs)

    # ------------------------------------------------------------------ HTML

    def html(self) -> str:
        return render_html(self)

    def save_html(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.html())

    def save_png(self, path: str, browser: str | None = None) -> None:
        """The speedup charts (every mode/dtype, stacked) as a PNG, drawn from the same SVG by a
        headless Chromium (`browser`, else the first of chromium, chromium-browser,
        google-chrome on PATH)."""
        browser = browser or next((shutil.which(b) for b in ("chromium", "chromium-browser",
                                                             "google-chrome") if shutil.which(b)),
                                  None)
        if browser is None:
            raise RuntimeError("ember.bench: a PNG chart needs Chromium (apt-get install chromium); "
                               "the HTML report (--html) has the same charts")
        page, width, height = render_charts(self)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "charts.html")
            with open(src, "w") as f:
                f.write(page)
            out = os.path.abspath(path)
            r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                                "--hide-scrollbars", f"--window-size={width},{height}",
                                f"--screenshot={out}", "file://" + src],
                               capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"ember.bench: Chromium did not draw {path}: {r.stderr[-500:]}")


# ------------------------------------------------------------------------------ formatting helpers


def _pos(x: float | None) -> bool:
    return x is not None and x > 0


def _mean(xs: Any) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _f(x: float | None, fmt: str) -> str:
    return "" if x is None else fmt.format(x)


def _with_spread(x: Any) -> str:
    """A median in ms with the timed calls' interquartile range: "1.23 [1.20-1.31]"."""
    if x.median_ms is None:
        return ""
    if x.q1_ms is None:
        return f"{x.median_ms:.2f}"
    return f"{x.median_ms:.2f} [{x.q1_ms:.2f}-{x.q3_ms:.2f}]"


def _fx(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _fs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}s"


def _fmt_table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    out = []
    for j, r in enumerate(rows):
        out.append("  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


COLORS = {"ember": "#e4572e", "inductor": "#2e86de", "eager": "#888888"}
PALETTE = ["#17a589", "#8e44ad", "#f1c40f", "#34495e", "#d35400"]


def _color(b: str, i: int) -> str:
    return COLORS.get(b) or PALETTE[i % len(PALETTE)]


def render_html(rep: Report) -> str:
    esc = html.escape
    backends = [b for b in rep.backends() if b != "eager"]
    env = rep.meta.get("environment", {})
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>ember.bench report</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}.fail{color:#c0392b}.skip{color:#888}"
        "pre{background:#f6f6f6;padding:8px;font-size:12px;white-space:pre-wrap}</style></head><body>",
        f"<h1>ember.bench</h1><p>{esc(str(rep.meta.get('date', '')))} &mdash; device <b>{esc(str(env.get('device')))}</b>"
        f" ({esc(str(env.get('gpu') or env.get('cpu')))}), torch {esc(str(env.get('torch')))},"
        f" suite <b>{esc(str(rep.meta.get('settings', {}).get('suite')))}</b></p>",
        "<h2>Summary</h2><pre>" + esc("\n".join(rep.summary_lines())) + "</pre>",
    ]
    legend = " ".join(
        f"<span style='display:inline-block;width:12px;height:12px;background:{_color(b, i)}'></span> {esc(b)}"
        for i, b in enumerate(backends))
    for mode, dtype in rep.groups():
        runs = [r for r in rep.runs if r.mode == mode and r.dtype == dtype and r.status != "skipped"]
        parts.append(f"<h2>Speedup over eager: {esc(mode)} / {esc(dtype)}</h2><p>{legend} (log scale; bars start at 1.0x)</p>")
        parts.append(_svg_chart(runs, backends))
    parts.append("<h2>All results</h2>" + _html_table(rep))
    ov = rep.overhead_lines()
    if ov:
        parts.append("<h2>Per-call overhead (tiny graphs)</h2><pre>" + esc("\n".join(ov)) + "</pre>")
    parts.append("<h2>Environment</h2><pre>" + esc(json.dumps(rep.meta, indent=1, default=str)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_charts(rep: Report) -> tuple[str, int, int]:
    """A page of only the speedup charts, and the window size that shows all of it."""
    esc = html.escape
    backends = [b for b in rep.backends() if b != "eager"]
    legend = " ".join(
        f"<span style='display:inline-block;width:12px;height:12px;background:{_color(b, i)}'></span> {esc(b)}"
        for i, b in enumerate(backends))
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{font-family:sans-serif;"
             "margin:16px;color:#222;background:#fff}h2{font-size:15px;margin:8px 0}"
             "p{margin:4px 0 8px 0;font-size:12px}</style></head><body>"]
    width, height = 400, 16
    for mode, dtype in rep.groups():
        runs = [r for r in rep.runs if r.mode == mode and r.dtype == dtype and r.status != "skipped"]
        svg = _svg_chart(runs, backends)
        m = re.search(r"width='(\d+)' height='(\d+)'", svg)
        w, h = (int(m.group(1)), int(m.group(2))) if m else (400, 30)
        width, height = max(width, w + 40), height + h + 70
        parts.append(f"<h2>Speedup over eager: {esc(mode)} / {esc(dtype)}</h2><p>{legend} "
                     f"(log scale; bars start at 1.0x)</p>{svg}")
    parts.append("</body></html>")
    return "\n".join(parts), width, height


def _svg_chart(runs: list[ModelRun], backends: list[str]) -> str:
    esc = html.escape
    if not runs or not backends:
        return "<p>(no results)</p>"
    speeds = [x.speedup for r in runs for b, x in r.backends.items() if b in backends and x.speedup]
    lo = min([0.5] + speeds) / 1.1
    hi = max([2.0] + speeds) * 1.1
    label_w, plot_w, bar_h, gap = 260, 560, 12, 8
    row_h = bar_h * len(backends) + gap
    height = 30 + row_h * len(runs) + 20
    width = label_w + plot_w + 220

    def x(v: float) -> float:
        return label_w + (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * plot_w

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-size='11' font-family='sans-serif'>"]
    ticks = [t for t in (0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16) if lo <= t <= hi]
    for t in ticks:
        out.append(f"<line x1='{x(t):.1f}' y1='20' x2='{x(t):.1f}' y2='{height - 20}' stroke='{'#333' if t == 1 else '#ddd'}'/>")
        out.append(f"<text x='{x(t):.1f}' y='14' text-anchor='middle'>{t:g}x</text>")
    for i, r in enumerate(runs):
        y0 = 24 + i * row_h
        out.append(f"<text x='{label_w - 6}' y='{y0 + row_h / 2:.1f}' text-anchor='end'>{esc(r.model)}</text>")
        for j, b in enumerate(backends):
            xres = r.backends.get(b)
            y = y0 + j * bar_h
            if xres is None:
                continue
            if xres.speedup:
                x1, x2 = sorted((x(1.0), x(xres.speedup)))
                tip = (f"{r.model} {b}: {xres.speedup:.2f}x, {xres.median_ms:.2f} ms, status {xres.status}, "
                       f"accuracy {xres.accuracy}, compile {_f(xres.compile_s, '{:.1f}') or 'n/a'} s")
                opacity = "1" if xres.status == "pass" else "0.4"
                out.append(f"<rect x='{x1:.1f}' y='{y + 1}' width='{max(x2 - x1, 1):.1f}' height='{bar_h - 2}' "
                           f"fill='{_color(b, j)}' fill-opacity='{opacity}'><title>{esc(tip)}</title></rect>")
                note = "" if xres.status == "pass" else f" ({xres.status})"
                out.append(f"<text x='{max(x2, x(1.0)) + 4:.1f}' y='{y + bar_h - 2}'>{xres.speedup:.2f}x{esc(note)}</text>")
            else:
                reason = (xres.reason or r.note or xres.status)[:70]
                out.append(f"<text x='{x(1.0) + 4:.1f}' y='{y + bar_h - 2}' fill='#c0392b'>"
                           f"&#10007; {esc(b)}: {esc(xres.status)} &mdash; {esc(reason)}<title>{esc(xres.reason or '')}</title></text>")
    out.append("</svg>")
    return "\n".join(out)


def _html_table(rep: Report) -> str:
    esc = html.escape
    head = ["model", "family", "mode", "dtype", "bs", "backend", "status", "median ms", "IQR ms", "speedup",
            "compile s (cold)", "compile s (warm)", "peak MB", "mem / eager", "accuracy", "graphs", "breaks", "reason"]
    rows = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rep.runs:
        if r.status == "skipped":
            rows.append(f"<tr class='skip'><td>{esc(r.model)}</td><td>{esc(r.family)}</td><td>{esc(r.mode)}</td>"
                        f"<td>{esc(r.dtype)}</td><td colspan='{len(head) - 4}' style='text-align:left'>skipped: {esc(r.note or '')}</td></tr>")
            continue
        for b, x in r.backends.items():
            cls = " class='fail'" if x.status in ("fail_to_run", "fail_accuracy") else ""
            cells = [r.model, r.family, r.mode, r.dtype, r.batch_size, b, x.status, _f(x.median_ms, "{:.3f}"),
                     "" if x.q1_ms is None else f"{x.q1_ms:.3f}-{x.q3_ms:.3f}",
                     "" if b == "eager" else _fx(x.speedup), _f(x.compile_s, "{:.2f}"), _f(x.compile_warm_s, "{:.2f}"),
                     _f(x.peak_mem_mb, "{:.0f}"), "" if b == "eager" else _fx(x.peak_mem_ratio), x.accuracy,
                     "" if x.graphs is None else x.graphs, "" if x.graph_breaks is None else x.graph_breaks,
                     x.reason or (x.accuracy_detail if x.accuracy == "fail" else "") or ""]
            rows.append(f"<tr{cls}>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return "\n".join(rows)
