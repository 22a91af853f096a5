"""Functional collectives (torch.distributed._functional_collectives) under ember.compile, 2 gloo
processes (issue 38): each program is captured in one graph holding its collectives and their
waits, runs them through c10d's process group, and gives eager's results on every rank; the
wait of a collective goes after the work that does not need its result."""

from __future__ import annotations

import json
import os

import pytest
import torch.distributed as dist

from test_ddp import spawn_ranks

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")

WORKER = os.path.join(os.path.dirname(__file__), "collectives_worker.py")


@pytest.fixture(scope="module")
def rows() -> dict:
    out = spawn_ranks(WORKER, [])
    return {r["program"]: r for r in map(json.loads, out.strip().splitlines())}


PROGRAMS = ["all_reduce", "all_gather", "reduce_scatter", "independent_work",
            "tensor_parallel_mlp"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_collectives_are_graph_nodes_with_eager_results(rows, program):
    r = rows[program]
    assert r["diff"] < 1e-5, r
    assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["eager_frames"] == 0, r
    ops = r["ops"]
    collectives = [i for i, op in enumerate(ops)
                   if op.startswith("_c10d_functional::") and op != "_c10d_functional::wait_tensor"]
    waits = [i for i, op in enumerate(ops) if op == "_c10d_functional::wait_tensor"]
    assert len(collectives) == 1 and len(waits) == 1 and collectives[0] < waits[0], ops


def test_a_wait_goes_after_the_work_that_does_not_need_it(rows):
    ops = rows["independent_work"]["ops"]
    assert ops.index("_c10d_functional::all_reduce") < ops.index("aten::mm") \
        < ops.index("_c10d_functional::wait_tensor"), ops



def test_collectives_issued_early_keep_their_order_and_results(rows):
    # hoist_collectives moves the first all-reduce up to its input (a graph pass after capture;
    # the captured text here is before it): the ranks still issue them in one order and the
    # results are eager's (tests/python/graph_passes has the order itself).
    r = rows["late_collectives"]
    assert r["diff"] < 1e-5, r
    assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["eager_frames"] == 0, r
    assert r["ops"].count("_c10d_functional::all_reduce") == 2, r["ops"]


def test_fsdp_written_with_functional_collectives_trains_in_one_graph(rows):
    # Each layer's weight a shard all-gathered in the forward (the all-gather's backward
    # reduce-scatters the gradient): one training graph, eager's loss and shard gradients over 3
    # SGD steps, and the gathered weights not saved for the backward (gathered again there, as
    # FSDP2 does: Note [Parameters gathered again in the backward]).
    r = rows["sharded_training"]
    assert r["diff"] < 1e-5, r
    assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["eager_frames"] == 0, r
    assert r["training_graphs"] == 1 and r["gathers"] == 3, r
    assert r["gathered_saved"] == [], r

