/// \file
/// Sources: where a value the capture read lives, so that guards and graph inputs re-read it on
/// every call. A source is a path from a root (a local slot of the frame, a global, a builtin)
/// through attribute and item accesses: `L['self'].layers[2].weight`.
///
/// A SourceTable holds the paths of one compiled frame as a flat list, parents before children,
/// so one forward pass evaluates all of them for a call.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "capture/hook/frame_hook.h"

namespace ember::capture {

enum class SourceKind : uint8_t {
  Local,    ///< localsplus slot `index` of the frame (FrameView::value)
  Global,   ///< `key` in the frame's globals
  Builtin,  ///< `key` in the frame's builtins
  Attr,     ///< getattr(parent, key)
  Item,     ///< parent[key]
  Const,    ///< `key` itself: an object the table holds (the globals dict of an inlined function)
  /// getattr(parent, key) for an nn.Module whose attribute lives in one of its registries, read
  /// from that dict directly (`index`: 0 _parameters, 1 _buffers, 2 _modules) instead of through
  /// nn.Module.__getattr__ (Python): two dict lookups per call.
  ModuleMember,
  /// parent[v], where v is the value of source `index` (evaluated before it): a dict keyed by a
  /// tensor or object read through another source (an optimizer's `state[param]`). A dict
  /// (or defaultdict) is read without `__missing__`: a missing key fails the lookup.
  ItemOf,
  /// hasattr(parent, key) as True or False: an attribute the capture found missing.
  HasAttr,
  /// The items a builtin iterator has left, as a new list, read without advancing it
  /// (iterator_rest): a comprehension's iterator argument (Note [A comprehension's iterator]).
  IterRest,
};

struct Source {
  SourceKind kind = SourceKind::Local;
  int parent = -1;
  int index = 0;
  nanobind::object key;  ///< a str for Global, Builtin, Attr; the key object for Item
};

/// `module`'s member `name` from registry `registry` (see SourceKind::ModuleMember); a new
/// reference, or nullptr with an AttributeError when it is not there.
PyObject* module_member_of(PyObject* module, PyObject* name, int registry);

/// The items builtin iterator `it` (a list, tuple, range or dict iterator) has left, as a new
/// list, without advancing it (through its __reduce__). New reference, or nullptr with a
/// TypeError for another kind of iterator (or the error __reduce__ raised).
PyObject* iterator_rest(PyObject* it);

class SourceTable {
 public:
  int local(int slot, PyObject* name);
  int global(PyObject* name);
  int builtin(PyObject* name);
  int attr(int parent, PyObject* name);
  int item(int parent, PyObject* key);
  int constant(PyObject* obj);
  int module_member(int parent, PyObject* name, int registry);
  int item_of(int parent, int key_source);
  int has_attr(int parent, PyObject* name);
  int iter_rest(int parent);

  int size() const { return static_cast<int>(nodes_.size()); }
  const Source& at(int id) const { return nodes_[static_cast<size_t>(id)]; }

  /// Python-like text of source `id`: `L['x']`, `G['torch'].nn`, `L['self'].layers[0]`.
  std::string name(int id) const;

  /// Evaluates every source for frame `f` into `out` (new references, in table order). Returns
  /// the id of the first source whose lookup fails (a missing global or attribute; the Python
  /// error is cleared), or -1 when all succeed. A lookup that fails in a way that is not
  /// "missing" also counts as a failure; nothing raises.
  int evaluate(const FrameView& f, std::vector<nanobind::object>& out) const;

 private:
  int add(SourceKind kind, int parent, int index, PyObject* key);

  std::vector<Source> nodes_;
  std::vector<std::string> local_names_;  ///< by node, for Local nodes
  std::map<std::tuple<int, int, int, std::string>, int> dedup_;
};

}  // namespace ember::capture
