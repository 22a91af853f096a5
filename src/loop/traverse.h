/// \file
/// Generic traversal of loop IR: visit or rebuild the children of one node. Passes build their
/// recursion from these, so only this file (and the printer, parser, equality, verifier and
/// evaluator) switches over every node kind.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "loop/stmt.h"

namespace ember::loop {

/// Calls `f` on each direct child expression of `e`, in field order.
void for_each_child(const Expr& e, const std::function<void(const Expr&)>& f);

/// Rebuilds `e` with each direct child replaced by `f(child)`. Returns `e` itself (same node)
/// when every child comes back as the same node.
Expr map_children(const Expr& e, const std::function<Expr(const Expr&)>& f);

/// Rebuilds `s` with each direct child expression replaced by `fe(child)` and each direct child
/// statement by `fs(child)`. Returns `s` itself when nothing changed. Binding variables (For::var,
/// Let::var) are not passed to `fe`.
Stmt map_stmt_children(const Stmt& s, const std::function<Expr(const Expr&)>& fe,
                       const std::function<Stmt(const Stmt&)>& fs);

/// Calls `fe` on each direct child expression (binding variables excluded) and `fs` on each
/// direct child statement of `s`, in field order.
void for_each_stmt_child(const Stmt& s, const std::function<void(const Expr&)>& fe,
                         const std::function<void(const Stmt&)>& fs);

/// Whether `s` contains a For.
bool has_loop(const Stmt& s);

/// Adds to `out` the names of the Vars that `e` / `s` read (binding variables of `s` included
/// where its body reads them).
void collect_vars(const Expr& e, std::set<std::string>& out);
void collect_vars(const Stmt& s, std::set<std::string>& out);

/// `s` with every buffer named in `names` (Loads, Stores, Accumulates) renamed to its entry.
Stmt rename_buffers(const Stmt& s, const std::map<std::string, std::string>& names);

/// Adds to `reads` the buffers `s` loads from and to `writes` those it stores or accumulates
/// into, its own Allocates' included (by name).
void buffer_accesses(const Stmt& s, std::set<std::string>& reads, std::set<std::string>& writes);

/// Replaces every Var and SizeVar named in `replacements` with its expression (which must have
/// the same dtype). Not capture-avoiding: the IR has no shadowing (stmt.h).
Expr substitute(const Expr& e, const std::map<std::string, Expr>& replacements);
Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& replacements);

}  // namespace ember::loop
