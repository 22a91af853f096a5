#include "graph/ops.h"

#include <iterator>
#include <unordered_map>

namespace ember::graph {

namespace {

struct Row {
  std::string_view name;
  OpCategory category;
};

constexpr Row kRows[] = {
    {"", OpCategory::Other},
#define EMBER_OP(Id, Name, Category) {Name, OpCategory::Category},
#include "graph/ops.def"
};

}  // namespace

OpKind op_kind(std::string_view name) {
  static const std::unordered_map<std::string_view, OpKind> by_name = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (size_t i = 1; i < std::size(kRows); ++i) m.emplace(kRows[i].name, static_cast<OpKind>(i));
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? OpKind::Unknown : it->second;
}

std::string_view op_name(OpKind kind) {
  return kRows[static_cast<size_t>(kind)].name;
}

OpCategory op_category(OpKind kind) {
  return kRows[static_cast<size_t>(kind)].category;
}

int num_op_kinds() {
  return static_cast<int>(std::size(kRows)) - 1;
}

}  // namespace ember::graph
