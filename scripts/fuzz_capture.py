"""The capture fuzzer at nightly size: N seeded programs (tests/python/fuzz/capture_fuzz.py)
under ember.compile against eager, in worker processes, so that a crash is counted (and its
seed named) instead of ending the run.

    python scripts/fuzz_capture.py --count 10000 [--start 0] [--jobs 2] [--json out.json]
    python scripts/fuzz_capture.py --seed 1234 --show     # one program: its source and outcome

Outcomes: ok, mismatch (a silent wrong result: outputs, dtypes or the inputs after a call differ
from eager's), error (ember raised where eager did not, or another exception type), crash (the
worker process died: a segfault, an abort). CI runs 500 programs (tests/python/fuzz).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_DIR = os.path.join(HERE, "..", "tests", "python", "fuzz")

WORKER = """
import json, sys
sys.path[:0] = [{fuzz_dir!r}, {fuzz_dir!r} + "/.."]
import capture_fuzz
for seed in range({start}, {stop}):
    print(json.dumps({{"seed": seed, "started": True}}), flush=True)
    try:
        outcome = capture_fuzz.check_program(seed)
    except BaseException as e:  # the checker itself: counted as an error
        outcome = "error: checker: " + type(e).__name__ + ": " + str(e)[:300]
    print(json.dumps({{"seed": seed, "outcome": outcome}}), flush=True)
"""


def run_range(start: int, stop: int) -> list[dict]:
    """Seeds [start, stop) in one worker; a crash ends the worker, and the rest of the range
    runs in a new one."""
    rows: list[dict] = []
    while start < stop:
        code = WORKER.format(fuzz_dir=FUZZ_DIR, start=start, stop=stop)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        done = {}
        last_started = None
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "outcome" in r:
                done[r["seed"]] = r["outcome"]
            else:
                last_started = r["seed"]
        rows += [{"seed": s, "outcome": o} for s, o in sorted(done.items())]
        if p.returncode == 0:
            break
        crashed = last_started if last_started is not None else start
        tail = (p.stderr or "")[-600:].replace("\n", " | ")
        rows.append({"seed": crashed, "outcome": f"crash: exit {p.returncode}: {tail}"})
        start = crashed + 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=250, help="seeds per worker process")
    ap.add_argument("--json", default="")
    ap.add_argument("--seed", type=int, default=None, help="one program")
    ap.add_argument("--show", action="store_true", help="print the program's source")
    a = ap.parse_args()

    if a.seed is not None:
        sys.path[:0] = [FUZZ_DIR, os.path.join(FUZZ_DIR, "..")]
        import capture_fuzz
        if a.show:
            print(capture_fuzz.make_program(a.seed).source)
        print(capture_fuzz.check_program(a.seed))
        return

    t0 = time.time()
    ranges = [(s, min(s + a.chunk, a.start + a.count))
              for s in range(a.start, a.start + a.count, a.chunk)]
    rows: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for got in pool.map(lambda r: run_range(*r), ranges):
            rows += got
            print(f"{len(rows)}/{a.count} programs, {time.time() - t0:.0f} s", flush=True)
    counts = collections.Counter(r["outcome"].split(":")[0] for r in rows)
    print(f"programs: {len(rows)}; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for r in rows:
        if r["outcome"] != "ok":
            print(f"  seed {r['seed']}: {r['outcome'][:300]}")
    print(f"{time.time() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"count": len(rows), "counts": counts, "seconds": time.time() - t0,
                       "rows": [r for r in rows if r["outcome"] != "ok"]}, f, indent=1)
    sys.exit(0 if counts.get("ok", 0) == len(rows) else 1)


if __name__ == "__main__":
    main()
