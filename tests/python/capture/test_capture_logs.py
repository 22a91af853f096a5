"""EMBER_LOGS: what ember.compile reports through Python's logging (logger "ember")."""

import logging

import torch

import ember


def test_recompile_names_the_first_failing_guard(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_LOGS", "recompiles")

    def f(x):
        return x * 2

    cf = ember.compile(f, dynamic=False)  # a size change recompiles
    with caplog.at_level(logging.WARNING, logger="ember"):
        cf(torch.randn(3))
        cf(torch.randn(3))  # a cache hit: no log
        assert not [r for r in caplog.records if "recompiling" in r.getMessage()]
        cf(torch.randn(5))
    msgs = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "L['x']" in msgs[0] and "sizes=[3]" in msgs[0] and "sizes=[5]" in msgs[0]


def test_graph_break_log_has_reason_and_line(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_LOGS", "graph_breaks")

    def f(x):
        y = x + 1
        print("", end="")
        return y * 2

    x = torch.randn(4)
    with caplog.at_level(logging.WARNING, logger="ember"):
        out = ember.compile(f)(x)
    torch.testing.assert_close(out, f(x))
    msgs = [r.getMessage() for r in caplog.records if "graph break" in r.getMessage()]
    assert len(msgs) == 1, msgs
    line = f.__code__.co_firstlineno + 2
    assert "print" in msgs[0] and f"test_capture_logs.py:{line}" in msgs[0]


def test_guards_log(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_LOGS", "guards")

    def f(x, n):
        return x * n

    with caplog.at_level(logging.WARNING, logger="ember"):
        ember.compile(f)(torch.randn(2), 3)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "TENSOR_MATCH L['x']" in text and "EQUALS L['n'] == 3" in text
