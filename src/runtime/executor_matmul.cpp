/// \file
/// The executor's side of mode="max-autotune": matrix products get Triton templates, and a
/// pointwise kernel that is a product's only reader runs as its template's epilogue
/// (runtime/matmul_template.h, docs/design/triton_codegen.md).
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>

#include "codegen/triton/triton_emitter.h"
#include "runtime/executor.h"
#include "runtime/executor_internal.h"
#include "runtime/pipeline.h"
#include "sched/fusion.h"

namespace ember::runtime {

// Note [Launch-bound products]
// At batch 1 a model waits on its host: a generated kernel's step costs 1.5-3 us of host time, a
// cuBLAS or cuDNN call through ATen 15-21 us (session 66, EMBER_HOST_STEP_TIMES), and the calls
// are most of the run's host time (BertForMaskedLM: 86 x 18.6 us of 2332). A product whose device
// time is below that costs its host time: ember's template is a 2 us launch, and takes the
// pointwise kernel after it as its epilogue, one launch for two. So in every mode but
// reduce-overhead (whose replay has no host time to save), a product of at most
// CompileOptions::Runtime::launch_bound_products multiply-adds (2^29: about 5-10 us of an H100 in
// bf16) gets the template in the small configurations (codegen::matmul_configs), timed against
// cuBLAS at its first call as under max-autotune; cuBLAS keeps it when it is faster. The timing
// (triton_tuning.h time_launches: back-to-back launches between two events) counts the host's
// time where it is the longer, so it is the choice for a launch-bound program too. 1x1
// convolutions of that size in inference become such products (rewrite/conv_as_product.h), and
// the other convolutions get the template as an implicit GEMM (their input gathered, a grouped
// one per group: codegen::ConvOperand), timed against cuDNN the same way.
// Measured (session 67, one H100, batch 1, bf16, scripts/ab_probe.py, max-autotune on / off in
// one process): BertForMaskedLM 1.373 / 1.875 ms, ViTForImageClassification 1.271 / 1.798,
// DistilBertForMaskedLM 0.755 / 1.040, LlamaSmall 1.456 / 1.619, GPT2LMHeadModel 1.802 / 1.824;
// with 1x1 convolutions as products too: tv_mobilenet_v2 0.917 / 1.435, timm_efficientnet_b0
// 1.170 / 2.002.

void attach_matmul_templates(Program& p, int device, const sched::Plan& plan,
                             const std::vector<int>& group_of_kernel, int64_t max_products) {
  const graph::Graph& g = p.traced.graph;
  const bool tf32 = at::globalContext().allowTF32CuBLAS();
  const bool interpret = device < 0;  // a CPU graph under Triton's interpreter (tests)
  // Which steps read each value; graph outputs and mutation values are read after the last.
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (graph::ValueId v : step_reads(p, p.steps[s])) readers[v].push_back(static_cast<int>(s));
  }
  for (graph::ValueId v : g.outputs) readers[v].push_back(-1);
  for (const graph::Mutation& m : g.mutations) readers[m.value].push_back(-1);

  std::vector<codegen::MatmulSpec> specs;
  std::vector<std::optional<FusedEpilogue>> epilogues;
  std::vector<std::pair<size_t, int>> step_of;  // (product step, epilogue step or -1)
  // A kernel takes one product as its epilogue: a second product it reads (relu(x @ a + y @ b),
  // a residual block's two 1x1 convolutions as products) gets a plain template, so that its
  // result exists when the kernel runs.
  std::vector<bool> epilogue_taken(p.steps.size(), false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    Step& step = p.steps[s];
    if (!step.call || step.node < 0) continue;
    auto spec = MatmulTemplate::spec_of(g, g.nodes[step.node], tf32, interpret);
    if (!spec) continue;
    // A product on the host, in a graph on a CUDA device (pipeline.h: host_nodes), stays ATen's.
    if (!interpret && g.type(spec->second.out).device.kind != graph::DeviceKind::CUDA) continue;
    const codegen::MatmulSpec& sp = spec->first;
    if (max_products > 0 && sp.batch * sp.m * sp.n * sp.k > max_products) continue;
    // Not a TF32 one in the default mode (an f32 convolution under cuDNN's default, an f32
    // product with allow_tf32): two TF32 kernels differ by TF32's rounding (1e-3), where eager's
    // own call is what the user compares with. Under max-autotune, the user's choice.
    if (max_products > 0 && sp.a_dtype == loop::DType::Float32 && sp.allow_tf32) continue;
    step.matmul_operands = spec->second;
    const graph::TensorType& out = g.type(spec->second.out);
    step.matmul_sizes = graph::constant_values(out.sizes);
    step.matmul_strides = graph::constant_values(out.strides);
    specs.push_back(spec->first);
    step_of.emplace_back(s, -1);
    epilogues.emplace_back();
    // The epilogue: the one kernel that reads the product, a pointwise nest over its elements.
    const std::vector<int>& r = readers[spec->second.out];
    if (r.size() != 1 || r[0] <= static_cast<int>(s) || p.steps[r[0]].kernel < 0 ||
        epilogue_taken[r[0]]) {
      continue;
    }
    const Kernel& k = p.kernels[p.steps[r[0]].kernel];
    const sched::KernelGroup& group = plan.groups[group_of_kernel[p.steps[r[0]].kernel]];
    if (k.index_status) continue;
    auto at = std::find(group.inputs.begin(), group.inputs.end(), spec->second.out);
    if (at == group.inputs.end()) continue;
    FusedEpilogue f;
    bool clash = false;
    for (const loop::BufferParam& b : group.kernel.buffers) {
      f.code.buffers.push_back(b.name);
      clash = clash || b.name == "a" || b.name == "b" || b.name == "bias";
    }
    const std::string& product = group.kernel.buffers[at - group.inputs.begin()].name;
    std::optional<std::string> body = codegen::emit_triton_epilogue(group.kernel, product, nullptr);
    if (clash || !body) continue;
    f.code.body = *body;
    for (at::ScalarType t : buffer_types(p, group)) f.signature.push_back(triton_pointer_type(t));
    for (size_t i = 0; i < group.outputs.size(); ++i) {
      if (!k.allocations[i].unused) f.outputs.push_back(group.inputs.size() + i);
    }
    epilogues.back() = std::move(f);
    step_of.back().second = r[0];
    epilogue_taken[r[0]] = true;
  }
  if (specs.empty()) return;
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<MatmulTemplate>> ts =
      interpret ? MatmulTemplate::interpreted_all(specs, epilogues)
                : MatmulTemplate::cuda_all(specs, device, &errors, epilogues, max_products > 0);
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i] == nullptr) continue;
    auto [s, into] = step_of[i];
    if (into < 0) {
      p.steps[s].matmul = std::move(ts[i]);
      continue;
    }
    Step& k = p.steps[into];
    k.fused = std::move(ts[i]);
    k.fused_product_step = static_cast<int>(s);
    k.matmul_operands = p.steps[s].matmul_operands;
    p.steps[s].fused_into = into;
  }
}

bool Executor::run_fused_step(const Step& step, std::vector<at::Tensor>& env,
                              const CallArena& arena) const {
  if (step.fused->chosen() < 0) return false;
  const Kernel& k = p_.kernels[step.kernel];
  const MatmulOperands& o = step.matmul_operands;
  std::vector<at::Tensor> buffers;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    if (k.inputs[i] == o.out) {
      buffers.push_back(env[o.a]);  // the product's slot: never read, any tensor
      continue;
    }
    const at::Tensor& x = env[k.inputs[i]];
    if (!has_layout(x, k.input_layouts[i].sizes, k.input_layouts[i].strides)) return false;
    buffers.push_back(x);
  }
  std::vector<at::Tensor> outs;
  for (const Kernel::Output& out : k.allocations) {
    if (out.unused) {
      outs.push_back(at::empty({0}, out.options));
    } else if (out.arena_slot >= 0 && arena.memory.defined()) {
      outs.push_back(in_arena(arena, out.arena_slot, out.sizes, out.strides, out.options));
    } else {
      outs.push_back(at::empty_strided(out.sizes, out.strides, out.options));
    }
  }
  buffers.insert(buffers.end(), outs.begin(), outs.end());
  if (!step.fused->run_fused(env[o.a], env[o.b], o.bias >= 0 ? &env[o.bias] : nullptr, buffers,
                             nullptr)) {
    return false;
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) env[k.outputs[i]] = outs[i];
  return true;
}

void Executor::decide_fused_step(const Step& step, std::vector<at::Tensor>& env,
                                 torch::jit::Stack& stack) const {
  const Kernel& k = p_.kernels[step.kernel];
  const MatmulOperands& o = step.matmul_operands;
  if (!k.triton) return;
  // Scratch outputs: this call's own come from the kernel that just ran.
  std::vector<at::Tensor> buffers;
  size_t product_slot = 0;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    if (k.inputs[i] == o.out) product_slot = i;
    buffers.push_back(env[k.inputs[i]]);
  }
  for (const Kernel::Output& out : k.allocations) {
    buffers.push_back(out.unused ? at::empty({0}, out.options)
                                 : at::empty_strided(out.sizes, out.strides, out.options));
  }
  const Step& product = p_.steps[step.fused_product_step];
  step.fused->run_fused(env[o.a], env[o.b], o.bias >= 0 ? &env[o.bias] : nullptr, buffers, [&] {
    product.call->run(env, stack);
    std::vector<at::Tensor> args = buffers;
    args[product_slot] = env[o.out];
    k.triton->launch(args);
  });
}

int Executor::num_matmul_templates() const {
  int n = 0;
  for (const Step& s : p_.steps) n += (s.matmul ? 1 : 0) + (s.fused ? 1 : 0);
  return n;
}

int Executor::num_fused_epilogues() const {
  int n = 0;
  for (const Step& s : p_.steps) n += s.fused ? 1 : 0;
  return n;
}

int Executor::num_matmul_templates_chosen() const {
  int n = 0;
  for (const Step& s : p_.steps) {
    n +=
        (s.matmul && s.matmul->chosen() >= 0 ? 1 : 0) + (s.fused && s.fused->chosen() >= 0 ? 1 : 0);
  }
  return n;
}

}  // namespace ember::runtime
