#include "loop/verifier.h"

#include <map>
#include <set>
#include <sstream>

#include "loop/printer.h"
#include "loop/traverse.h"
#include "support/error.h"

namespace ember::loop {
namespace {

class Verifier {
 public:
  explicit Verifier(const Kernel& k) : k_(k) {}

  std::vector<std::string> run() {
    for (const std::string& s : k_.size_vars) {
      if (!sizes_.insert(s).second) error() << "size variable '" << s << "' is declared twice";
    }
    for (const BufferParam& b : k_.buffers) {
      if (buffers_.count(b.name)) {
        error() << "buffer '" << b.name << "' is declared twice";
        continue;
      }
      buffers_[b.name] = {b.dtype, b.role};
      if (b.sizes.size() != b.strides.size()) {
        error() << "buffer '" << b.name << "' has " << b.sizes.size() << " sizes but "
                << b.strides.size() << " strides";
      }
      for (const auto* dims : {&b.sizes, &b.strides}) {
        for (const Expr& e : *dims) {
          context_ = "buffer '" + b.name + "' shape";
          expr(e);
        }
      }
    }
    context_.clear();
    if (k_.body.defined()) stmt(k_.body);
    if (k_.combo && k_.body.defined()) parts();
    return std::move(errors_);
  }

 private:
  struct BufferInfo {
    DType dtype;
    BufferRole role;
  };

  struct Message {
    explicit Message(std::vector<std::string>& out) : out_(out) {}
    ~Message() { out_.push_back(os_.str()); }
    template <typename T>
    Message& operator<<(const T& v) {
      os_ << v;
      return *this;
    }

   private:
    std::vector<std::string>& out_;
    std::ostringstream os_;
  };
  Message error() { return Message(errors_); }

  void expr(const Expr& e) {
    if (!e.defined()) return;
    if (const auto* v = e.as<Var>()) {
      auto it = vars_.find(v->name);
      if (it == vars_.end()) {
        error() << "variable '" << v->name << "' is used outside the For or Let that binds it"
                << (context_.empty() ? "" : " (in " + context_ + ")");
      } else if (it->second != e.dtype()) {
        error() << "variable '" << v->name << "' is used as " << dtype_name(e.dtype())
                << " but bound as " << dtype_name(it->second);
      }
    } else if (const auto* s = e.as<SizeVar>()) {
      if (!sizes_.count(s->name)) {
        error() << "size variable '" << s->name << "' is not declared by kernel '" << k_.name
                << "'";
      }
    } else if (const auto* l = e.as<Load>()) {
      auto it = buffers_.find(l->buffer);
      if (it == buffers_.end()) {
        error() << "load from undeclared buffer '" << l->buffer << "'";
      } else if (it->second.dtype != e.dtype()) {
        error() << "load from '" << l->buffer << "' as " << dtype_name(e.dtype())
                << " but the buffer holds " << dtype_name(it->second.dtype);
      }
    }
    for_each_child(e, [&](const Expr& c) { expr(c); });
  }

  /// Declares a variable for the duration of `body`.
  void bind(const Expr& var, const Stmt& body) {
    const std::string& name = var.as<Var>()->name;
    if (vars_.count(name))
      error() << "variable '" << name << "' is bound again inside its own scope";
    if (sizes_.count(name)) error() << "variable '" << name << "' has the name of a size variable";
    auto saved = vars_;
    vars_[name] = var.dtype();
    stmt(body);
    vars_ = std::move(saved);
  }

  /// The buffer a write goes to, or nullptr (after reporting why) when it cannot be written.
  const BufferInfo* writable(const std::string& name, const char* what) {
    auto it = buffers_.find(name);
    if (it == buffers_.end()) {
      error() << what << " undeclared buffer '" << name << "'";
      return nullptr;
    }
    if (it->second.role == BufferRole::Input) error() << what << " input buffer '" << name << "'";
    return &it->second;
  }

  void stmt(const Stmt& s) {
    if (const auto* n = s.as<For>()) {
      expr(n->min);
      expr(n->extent);
      if (n->parallel_when.defined()) expr(n->parallel_when);
      bind(n->var, n->body);
    } else if (const auto* n = s.as<Let>()) {
      expr(n->value);
      bind(n->var, n->body);
    } else if (const auto* n = s.as<Allocate>()) {
      for (const Expr& e : n->sizes) expr(e);
      if (buffers_.count(n->buffer)) {
        error() << "alloc '" << n->buffer << "' reuses the name of a buffer in scope";
      }
      auto saved = buffers_;
      buffers_[n->buffer] = {n->dtype, BufferRole::Temp};
      stmt(n->body);
      buffers_ = std::move(saved);
    } else if (const auto* n = s.as<Store>()) {
      expr(n->index);
      expr(n->value);
      const BufferInfo* b = writable(n->buffer, "store to");
      if (b != nullptr && b->dtype != n->value.dtype()) {
        error() << "store of " << dtype_name(n->value.dtype()) << " to '" << n->buffer
                << "', which holds " << dtype_name(b->dtype);
      }
    } else if (const auto* n = s.as<Accumulate>()) {
      expr(n->index);
      for (const Expr& v : n->values) expr(v);
      for (size_t i = 0; i < n->buffers.size(); ++i) {
        std::string what = std::string("accumulate ") + reduce_op_name(n->op) + " into";
        const BufferInfo* b = writable(n->buffers[i], what.c_str());
        bool arg = n->op == ReduceOp::ArgMax || n->op == ReduceOp::ArgMin;
        DType want = arg && i == 1 ? kIndexType : n->values[0].dtype();
        if (b != nullptr && b->dtype != want) {
          error() << what << " '" << n->buffers[i] << "', which holds " << dtype_name(b->dtype)
                  << "; expected " << dtype_name(want);
        }
      }
    } else {
      for_each_stmt_child(
          s, [&](const Expr& e) { expr(e); }, [&](const Stmt& c) { stmt(c); });
    }
  }

  /// A combo kernel's parts are independent: none reads or writes a buffer another one writes.
  void parts() {
    const std::vector<Stmt> parts = k_.parts();
    std::vector<std::set<std::string>> reads(parts.size()), writes(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) buffer_accesses(parts[i], reads[i], writes[i]);
    for (size_t i = 0; i < parts.size(); ++i) {
      for (const std::string& b : writes[i]) {
        if (!k_.find_buffer(b)) continue;  // an allocation of the part's own
        for (size_t j = 0; j < parts.size(); ++j) {
          if (j != i && (reads[j].count(b) || writes[j].count(b))) {
            error() << "combo part " << j << " touches buffer '" << b << "', which part " << i
                    << " writes";
          }
        }
      }
    }
  }

  const Kernel& k_;
  std::set<std::string> sizes_;
  std::map<std::string, DType> vars_;
  std::map<std::string, BufferInfo> buffers_;
  std::string context_;
  std::vector<std::string> errors_;
};

}  // namespace

std::vector<std::string> verify_kernel(const Kernel& k) {
  return Verifier(k).run();
}

void check_kernel(const Kernel& k) {
  std::vector<std::string> errors = verify_kernel(k);
  if (errors.empty()) return;
  std::ostringstream os;
  os << "invalid loop kernel '" << k.name << "':";
  for (const std::string& e : errors) os << "\n  " << e;
  os << "\n" << print_kernel(k);
  EMBER_INTERNAL_ASSERT(false) << os.str();
}

}  // namespace ember::loop
