#include "tracer/backward_walk.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/add.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "support/error.h"

namespace ember::tracer {

namespace {

using torch::autograd::Edge;
using torch::autograd::Node;

struct Pending {
  std::vector<at::Tensor> inputs;  // one per input of the node, summed as they come in
  int dependencies = 0;            // edges from needed nodes not yet run
};

void accumulate(Pending& p, uint32_t input_nr, at::Tensor grad) {
  if (!grad.defined()) return;
  at::Tensor& slot = p.inputs.at(input_nr);
  slot = slot.defined() ? at::add(slot, grad) : std::move(grad);
}

struct Later {  // the ready queue's order: the highest sequence number first
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace

std::vector<at::Tensor> walk_backward(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& tangents,
                                      const std::vector<at::Tensor>& inputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const at::Tensor& t : inputs) edges.push_back(torch::autograd::impl::gradient_edge(t));
  return walk_backward_to(outputs, tangents, edges);
}

std::vector<at::Tensor> walk_backward_to(const std::vector<at::Tensor>& outputs,
                                         const std::vector<at::Tensor>& tangents,
                                         const std::vector<torch::autograd::Edge>& inputs) {
  if (outputs.size() != tangents.size()) {
    throw UserError("walk_backward: " + std::to_string(outputs.size()) + " outputs and " +
                    std::to_string(tangents.size()) + " tangents");
  }
  // Where each input's gradient arrives: (node, input number) -> the inputs it belongs to.
  std::map<std::pair<const Node*, uint32_t>, std::vector<size_t>> targets;
  std::unordered_set<const Node*> target_nodes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Edge& e = inputs[i];
    if (!e.is_valid()) continue;
    targets[{e.function.get(), e.input_nr}].push_back(i);
    target_nodes.insert(e.function.get());
  }
  std::vector<Edge> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Edge e = torch::autograd::impl::gradient_edge(outputs[i]);
    if (!e.is_valid()) {
      throw UserError("walk_backward: output " + std::to_string(i) + " does not require grad");
    }
    roots.push_back(std::move(e));
  }
  // Every node the roots reach, children after parents (iterative DFS: deep graphs), then which
  // of them lead to an input's edge: only those run.
  std::vector<Node*> order;
  std::unordered_set<const Node*> seen;
  {
    std::vector<std::pair<Node*, size_t>> stack;
    for (const Edge& r : roots) {
      if (seen.insert(r.function.get()).second) stack.emplace_back(r.function.get(), 0);
      while (!stack.empty()) {
        auto& [node, next] = stack.back();
        if (next < node->next_edges().size()) {
          const Edge& e = node->next_edge(next++);
          if (e.is_valid() && seen.insert(e.function.get()).second) {
            stack.emplace_back(e.function.get(), 0);
          }
          continue;
        }
        order.push_back(node);  // post-order: after everything it reaches
        stack.pop_back();
      }
    }
  }
  std::unordered_set<const Node*> needed;
  for (Node* n : order) {  // post-order: a node's successors are decided before it
    bool need = target_nodes.count(n) > 0;
    for (const Edge& e : n->next_edges())
      need = need || (e.is_valid() && needed.count(e.function.get()));
    if (need) needed.insert(n);
  }
  std::unordered_map<const Node*, Pending> pending;
  auto pending_of = [&](Node* n) -> Pending& {
    Pending& p = pending[n];
    if (p.inputs.empty()) p.inputs.resize(n->num_inputs());
    return p;
  };
  for (Node* n : order) {
    if (!needed.count(n)) continue;
    for (const Edge& e : n->next_edges()) {
      if (e.is_valid() && needed.count(e.function.get()))
        ++pending_of(e.function.get()).dependencies;
    }
  }
  std::vector<at::Tensor> grads(inputs.size());
  auto deliver = [&](const Edge& e, at::Tensor grad) {
    auto t = targets.find({e.function.get(), e.input_nr});
    if (t != targets.end() && grad.defined()) {
      for (size_t i : t->second) grads[i] = grads[i].defined() ? at::add(grads[i], grad) : grad;
    }
    // An input's own accumulator only collects; any other node takes the gradient as input.
    if (t == targets.end() || !e.function->next_edges().empty()) {
      accumulate(pending_of(e.function.get()), e.input_nr, std::move(grad));
    }
  };
  at::AutoGradMode no_grad(false);
  {  // The tangents, checked as the engine checks them against the outputs.
    std::vector<at::Tensor> seeds = tangents;
    torch::autograd::validate_outputs(
        roots, seeds, [](const std::string& msg) { return "walk_backward: tangent: " + msg; });
    for (size_t i = 0; i < roots.size(); ++i) {
      if (needed.count(roots[i].function.get())) deliver(roots[i], seeds[i]);
    }
  }
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (const Edge& r : roots) {
    Node* n = r.function.get();
    Pending& p = pending_of(n);
    if (needed.count(n) && p.dependencies == 0) {
      p.dependencies = -1;  // queued
      ready.push(n);
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    // An input's own accumulator is where its gradient ends: collected above, never run.
    if (target_nodes.count(n) && n->next_edges().empty()) continue;
    std::vector<at::Tensor> in = std::move(pending_of(n).inputs);
    std::vector<at::Tensor> out = (*n)(std::move(in));
    torch::autograd::validate_outputs(n->next_edges(), out, [n](const std::string& msg) {
      return "walk_backward: " + n->name() + ": " + msg;
    });
    for (size_t k = 0; k < n->next_edges().size(); ++k) {
      const Edge& e = n->next_edge(k);
      if (!e.is_valid() || !needed.count(e.function.get())) continue;
      deliver(e, k < out.size() ? out[k] : at::Tensor());
      Pending& p = pending_of(e.function.get());
      if (--p.dependencies == 0) {
        p.dependencies = -1;
        ready.push(e.function.get());
      }
    }
  }
  return grads;
}

}  // namespace ember::tracer
