// Test helpers shared by the scheduler's tests: graphs built op by op, and golden kernel text.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/verifier.h"

namespace ember::sched::test {

/// A CPU tensor type; contiguous unless `strides` are given.
inline graph::TensorType type(graph::DType t, graph::Dims sizes, graph::Dims strides = {},
                              int64_t offset = 0) {
  graph::TensorType tt;
  tt.dtype = t;
  tt.strides = strides.empty() ? graph::contiguous_strides(sizes) : std::move(strides);
  tt.sizes = std::move(sizes);
  tt.storage_offset = offset;
  return tt;
}

/// A graph built op by op; each op has one output of the given type.
struct Builder {
  graph::Graph g;

  graph::ValueRef input(graph::TensorType t) {
    return graph::ValueRef{g.add_input(t, graph::InputKind::User)};
  }
  graph::ValueRef op(const std::string& qualified, std::vector<std::string> names,
                     std::vector<graph::Arg> args, graph::TensorType out) {
    size_t dot = qualified.find('.');
    graph::OpInfo info{qualified.substr(0, dot),
                       dot == std::string::npos ? "" : qualified.substr(dot + 1), names,
                       std::vector<bool>(names.size(), false)};
    int32_t n = g.add_node(g.intern_op(info), std::move(args), {std::move(out)});
    return graph::ValueRef{g.nodes[n].outputs[0]};
  }
  graph::ValueRef mul(graph::ValueRef a, graph::ValueRef b, graph::TensorType out) {
    return op("aten::mul.Tensor", {"self", "other"}, {a, b}, std::move(out));
  }
  graph::ValueRef add(graph::ValueRef a, graph::ValueRef b, graph::TensorType out) {
    return op("aten::add.Tensor", {"self", "other", "alpha"}, {a, b, int64_t{1}}, std::move(out));
  }
  graph::ValueRef sub(graph::ValueRef a, graph::ValueRef b, graph::TensorType out) {
    return op("aten::sub.Tensor", {"self", "other", "alpha"}, {a, b, int64_t{1}}, std::move(out));
  }
};

/// A contiguous f32 CPU tensor type.
inline graph::TensorType f32(graph::Dims sizes) {
  return type(graph::DType::Float32, std::move(sizes));
}

inline std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `k` verifies, prints as tests/cpp/sched/golden/<name> (EMBER_ACCEPT_GOLDEN=1 rewrites it) and
/// its text parses back to itself.
inline void expect_golden(const loop::Kernel& k, const std::string& name) {
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  std::string text = loop::print_kernel(k);
  std::string path = std::string(EMBER_SCHED_GOLDEN_DIR) + "/" + name;
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << text;
  EXPECT_EQ(text, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  EXPECT_EQ(loop::print_kernel(loop::parse_kernel(text)), text);
}

}  // namespace ember::sched::test
