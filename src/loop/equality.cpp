#include "loop/equality.h"

#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "support/hash.h"

namespace ember::loop {
namespace {

bool field_equal(const Expr& a, const Expr& b) {
  return structurally_equal(a, b);
}
bool field_equal(const Stmt& a, const Stmt& b) {
  return structurally_equal(a, b);
}
bool field_equal(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}
template <typename T>
requires(std::is_integral_v<T> || std::is_enum_v<T> ||
         std::is_same_v<T, std::string>) bool field_equal(const T& a, const T& b) {
  return a == b;
}
template <typename T>
bool field_equal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!field_equal(a[i], b[i])) return false;
  }
  return true;
}

template <typename Tuple>
bool fields_equal(const Tuple& a, const Tuple& b) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return (field_equal(std::get<I>(a), std::get<I>(b)) && ...);
  }
  (std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

void hash_field(Hasher& h, const Expr& e);
void hash_field(Hasher& h, const Stmt& s);
void hash_field(Hasher& h, double v) {
  h.f64(v);
}
void hash_field(Hasher& h, const std::string& s) {
  h.str(s);
}
template <typename T>
requires(std::is_integral_v<T> || std::is_enum_v<T>) void hash_field(Hasher& h, T v) {
  h.i64(static_cast<int64_t>(v));
}
template <typename T>
void hash_field(Hasher& h, const std::vector<T>& items) {
  h.u64(items.size());
  for (const T& item : items) hash_field(h, item);
}

template <typename Tuple>
void hash_fields(Hasher& h, const Tuple& t) {
  std::apply([&](const auto&... f) { (hash_field(h, f), ...); }, t);
}

void hash_field(Hasher& h, const Expr& e) {
  if (!e.defined()) {
    h.i64(-1);
    return;
  }
  h.i64(static_cast<int64_t>(e.kind()));
  h.i64(static_cast<int64_t>(e.dtype()));
  switch (e.kind()) {
#define EMBER_LOOP_EXPR(Name)               \
  case ExprKind::Name:                      \
    hash_fields(h, e.as<Name>()->fields()); \
    return;
#include "loop/nodes.def"
  }
}

void hash_field(Hasher& h, const Stmt& s) {
  if (!s.defined()) {
    h.i64(-1);
    return;
  }
  h.i64(1000 + static_cast<int64_t>(s.kind()));
  switch (s.kind()) {
#define EMBER_LOOP_STMT(Name)               \
  case StmtKind::Name:                      \
    hash_fields(h, s.as<Name>()->fields()); \
    return;
#include "loop/nodes.def"
  }
}

}  // namespace

bool structurally_equal(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  if (!a.defined() || !b.defined()) return false;
  if (a.kind() != b.kind() || a.dtype() != b.dtype()) return false;
  switch (a.kind()) {
#define EMBER_LOOP_EXPR(Name) \
  case ExprKind::Name:        \
    return fields_equal(a.as<Name>()->fields(), b.as<Name>()->fields());
#include "loop/nodes.def"
  }
  return false;
}

bool structurally_equal(const Stmt& a, const Stmt& b) {
  if (a.same_as(b)) return true;
  if (!a.defined() || !b.defined()) return false;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
#define EMBER_LOOP_STMT(Name) \
  case StmtKind::Name:        \
    return fields_equal(a.as<Name>()->fields(), b.as<Name>()->fields());
#include "loop/nodes.def"
  }
  return false;
}

namespace {

auto param_fields(const BufferParam& p) {
  return std::tie(p.name, p.role, p.dtype, p.sizes, p.strides);
}

}  // namespace

bool structurally_equal(const Kernel& a, const Kernel& b) {
  if (a.name != b.name || a.size_vars != b.size_vars || a.buffers.size() != b.buffers.size() ||
      a.combo != b.combo) {
    return false;
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    if (!fields_equal(param_fields(a.buffers[i]), param_fields(b.buffers[i]))) return false;
  }
  return structurally_equal(a.body, b.body);
}

uint64_t structural_hash(const Expr& e) {
  Hasher h;
  hash_field(h, e);
  return h.digest();
}

uint64_t structural_hash(const Stmt& s) {
  Hasher h;
  hash_field(h, s);
  return h.digest();
}

uint64_t structural_hash(const Kernel& k) {
  Hasher h;
  h.str(k.name);
  hash_field(h, k.size_vars);
  h.u64(k.buffers.size());
  for (const BufferParam& p : k.buffers) hash_fields(h, param_fields(p));
  hash_field(h, k.body);
  h.u64(k.combo ? 1 : 0);
  return h.digest();
}

}  // namespace ember::loop
