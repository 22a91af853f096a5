/// \file
/// Plain data: Python values that copy.deepcopy copies structurally and that capture can
/// compare structurally. Atoms are numbers, strings, bytes, None, torch.dtype and torch.device,
/// enum members, and (by identity) classes, functions and modules; containers are tuples,
/// lists, dicts, sets and frozensets of plain data; objects are instances of a plain class
/// (interpreter_objects.cpp: state in the __dict__, base object) that customise neither
/// copying nor pickling, whose __dict__ is plain data. Tensors are not plain data.
///
/// copy.deepcopy(x) of plain data runs for real at capture time; x's whole state is then
/// guarded by a StateEquals guard (guards.h) against a snapshot.
#pragma once

#include <Python.h>

#include <functional>

namespace ember::capture {

/// Whether `v` is plain data of at most `budget` nodes (the budget is spent as it walks).
bool is_plain_data(PyObject* v, int& budget);

/// Structural equality of plain data `a` with a snapshot `b`: the same types, containers of
/// the same length (dicts with the same keys in the same order), equal atoms, objects with
/// equal __dict__s.
bool plain_data_equal(PyObject* a, PyObject* b);

/// Calls `f` on every mutable node of plain data `v` (lists, dicts, sets, objects and their
/// __dict__s), `v` included.
void for_each_mutable(PyObject* v, const std::function<void(PyObject*)>& f);

}  // namespace ember::capture
