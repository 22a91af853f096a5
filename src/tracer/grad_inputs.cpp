#include "tracer/grad_inputs.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

#include "support/error.h"
#include "tracer/autograd_node.h"
#include "tracer/backward_walk.h"

namespace ember::tracer {

namespace ag = torch::autograd;

void GradInputs::add(const at::Tensor& t, bool leaf) {
  if (leaf) {
    t.requires_grad_(true);
    edges_.push_back(ag::impl::gradient_edge(t));  // its accumulator
  } else {
    NodePtr node = make_node<ag::Identity>();
    const uint32_t nr = node->add_input_metadata(t);
    ag::impl::set_gradient_edge(t, ag::Edge(node, nr));
    edges_.emplace_back(std::move(node), nr);
  }
  tensors_.push_back(t);
}

std::vector<int> GradInputs::modified_in_place() const {
  std::vector<int> out;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ag::Edge now = ag::impl::gradient_edge(tensors_[i]);
    if (now.function != edges_[i].function || now.input_nr != edges_[i].input_nr) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::vector<at::Tensor> GradInputs::gradients(const std::vector<at::Tensor>& outputs,
                                              const std::vector<at::Tensor>& tangents,
                                              bool walk) const {
  if (walk) return walk_backward_to(outputs, tangents, edges_);
  EMBER_INTERNAL_ASSERT(outputs.size() == tangents.size())
      << outputs.size() << " outputs and " << tangents.size() << " tangents";
  ag::edge_list roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EMBER_INTERNAL_ASSERT(outputs[i].requires_grad()) << "output " << i << " requires no grad";
    roots.push_back(ag::impl::gradient_edge(outputs[i]));
  }
  if (roots.empty()) return std::vector<at::Tensor>(edges_.size());
  return ag::Engine::get_default_engine().execute(roots, tangents, /*keep_graph=*/false,
                                                  /*create_graph=*/false,
                                                  /*accumulate_grad=*/false, edges_);
}

}  // namespace ember::tracer
