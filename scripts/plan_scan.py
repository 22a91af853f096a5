#!/usr/bin/env python3
"""Scan zoo models' Triton plans on a machine with no GPU for kernel shapes that lose on the GPU:
groups with no Triton form (their nodes run as ATen calls) and why, serial loops around block
loops inside a program (`for v_x in range(...)` with a block loop inside: a program walking rows
one at a time), and very large kernel sources (slow Triton compiles).

    ZOO_TIMM_SITE=... PYTHONPATH=scripts/zoo_timm_cpu python scripts/plan_scan.py \\
        --family timm --first 100 --json /tmp/scan.json

Each model is traced for cuda:0 (ember.trace: the module's parameters stay CPU constants, which
triton_plan treats as on the device) at batch 2, default input, fp32, in a subprocess with a
time limit, and planned with ember._C.triton_plan (nothing compiled or run).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

WORKER = r'''
import json, re, sys, torch, ember
from ember.bench import zoo
family, name = sys.argv[1], sys.argv[2]
spec = zoo.expand(f"zoo-{family}:{name}")[0]
wl = spec.build("small", "inference", "cpu", 2)
with torch.no_grad():
    g = ember.trace(wl.model.eval(), tuple(wl.args), device="cuda:0")
plan = ember._C.triton_plan(g)
out = {"groups": len(plan), "no_triton": [], "serial": [], "largest": 0}
serial = re.compile(r"^( +)for v_\w+ in range\(.*\):$")
for d in plan:
    src = d["triton"]
    if src is None:
        out["no_triton"].append([d["why"][:160], d["ops"][:4]])
        continue
    out["largest"] = max(out["largest"], len(src))
    lines = src.splitlines()
    for i, l in enumerate(lines):
        m = serial.match(l)
        if m and any(x.startswith(m.group(1) + "    for ") and " in range(0, " in x
                     for x in lines[i + 1:i + 40]):
            out["serial"].append([l.strip()[:100], d["ops"][:5]])
            break
print("RESULT " + json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="timm")
    ap.add_argument("--first", type=int, default=50, help="the first N of the sweep's order")
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    from ember.bench import zoo  # noqa: PLC0415

    names = zoo.sweep_order(zoo.family_names(a.family))[a.skip:a.skip + a.first]
    rows = {}
    for name in names:
        t0 = time.time()
        try:
            r = subprocess.run([sys.executable, "-c", WORKER, a.family, name], capture_output=True,
                               text=True, timeout=a.timeout)
            got = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
            row = json.loads(got[-1][7:]) if got else {"error": (r.stderr or r.stdout)[-300:]}
        except subprocess.TimeoutExpired:
            row = {"error": f"over {a.timeout:g} s"}
        row["s"] = round(time.time() - t0, 1)
        rows[name] = row
        flag = ""
        if "error" in row:
            flag = "error: " + row["error"].strip().splitlines()[-1][:120] if row["error"].strip() else "error"
        else:
            flag = (f"{row['groups']} groups, {len(row['no_triton'])} without Triton, "
                    f"{len(row['serial'])} serial, largest {row['largest'] // 1024} KB")
        print(f"{name}: {flag}", flush=True)
        for why, ops in row.get("no_triton", [])[:3]:
            print(f"    no Triton: {why} {ops}")
        for loop, ops in row.get("serial", [])[:3]:
            print(f"    serial: {loop} {ops}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    _ = re


if __name__ == "__main__":
    main()
