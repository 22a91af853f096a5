#pragma once

// What one Triton program has written to global memory, for the reads after it.
//
// A Triton program runs on many threads, and what one thread stores to global memory another
// thread of the program need not see without a barrier. A store of one element (a row's sum
// into the reduction's output buffer) is made by a single thread; the epilogue that reads the
// element back runs on every thread, and the threads of other warps read what was there before
// (a row norm's epilogue would normalise with a stale mean on every warp but the first). Triton's
// interpreter runs a program as one thread, so only a GPU shows it.
//
// The emitter therefore forwards a stored element to later reads of the same element (the value
// stays in a variable, no memory read at all), and puts a barrier (`tl.debug_barrier()`, a
// `bar.sync`, which orders the block's global memory accesses) before any other read of a buffer
// the program has written since the last barrier.

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ember::codegen {

class ProgramMemory {
 public:
  /// The variable holding what the program last stored at `buffer[index]` (index as source
  /// text), or "" when a read must go to memory.
  std::string forwarded(const std::string& buffer, const std::string& index) const {
    auto b = elements_.find(buffer);
    if (b == elements_.end()) return "";
    auto e = b->second.find(index);
    return e == b->second.end() ? "" : e->second;
  }

  /// Whether a read of `buffer` from memory needs a barrier first; if so, the caller emits one
  /// and everything written so far is ordered.
  bool barrier_before_read(const std::string& buffer) {
    if (unsynced_.count(buffer) == 0) return false;
    unsynced_.clear();
    return true;
  }

  /// A store to `buffer`: of one element held in `var` at `index` (text), or of a block ("").
  void wrote(const std::string& buffer, const std::string& index = "",
             const std::string& var = "") {
    unsynced_.insert(buffer);
    elements_[buffer].clear();
    if (!var.empty()) elements_[buffer][index] = var;
    for (auto& scope : scopes_) scope.written.insert(buffer);
  }

  /// A loop body begins: variables it assigns are not visible after it.
  void enter_loop() { scopes_.push_back({elements_, {}}); }
  /// The loop ends: forwarding reverts to before it, less every buffer the loop wrote.
  void exit_loop() {
    Scope s = std::move(scopes_.back());
    scopes_.pop_back();
    elements_ = std::move(s.before);
    for (const std::string& b : s.written) elements_.erase(b);
  }
  /// Around an `if`: what a branch assigns is not known after it.
  void forget() { elements_.clear(); }

 private:
  struct Scope {
    std::map<std::string, std::map<std::string, std::string>> before;
    std::set<std::string> written;
  };
  std::map<std::string, std::map<std::string, std::string>> elements_;  ///< buffer -> index -> var
  std::set<std::string> unsynced_;  ///< buffers written since the last barrier
  std::vector<Scope> scopes_;
};

}  // namespace ember::codegen
