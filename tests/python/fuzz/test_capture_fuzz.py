"""The capture fuzzer in CI: 500 seeded programs (capture_fuzz.py) under ember.compile against
eager, with aliased inputs and global-state changes between calls. Zero mismatches and zero
errors; a crash ends the test process (the nightly script, scripts/fuzz_capture.py, runs 10,000
in worker processes and counts crashes)."""

from __future__ import annotations

import collections

import pytest

import capture_fuzz
import ember.metrics

COUNT = 500
CHUNKS = 5


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzzed_programs_match_eager(chunk):
    per = COUNT // CHUNKS
    outcomes = collections.Counter()
    bad = []
    ember.metrics.reset()
    for seed in range(chunk * per, (chunk + 1) * per):
        outcome = capture_fuzz.check_program(seed)
        outcomes[outcome.split(":")[0]] += 1
        if outcome != "ok":
            bad.append(f"seed {seed}: {outcome}")
    assert not bad, "\n".join(bad[:10])
    # The programs are captured, not run eagerly: graphs on most calls.
    assert ember.metrics.snapshot()["captured_frames"] >= per


def test_the_generator_is_deterministic_and_varied():
    a = capture_fuzz.make_program(12345).source
    assert a == capture_fuzz.make_program(12345).source
    sources = {capture_fuzz.make_program(s).source for s in range(200)}
    assert len(sources) == 200
    text = "\n".join(sources)
    for construct in ("for i in range", "if ", "lambda", "with torch.no_grad", "items = [",
                      "d = {", "print(", ".abs().mean() >", "_(", "helper"):
        assert construct in text, construct
