// References are timed unfused, one kernel per op, as eager PyTorch runs a problem
// (env/reference.hpp use_unfused_references; docs/kernelbench.md "Reference timing").
#include <doctest/doctest.h>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/tensorexpr/kernel.h>
#include <torch/script.h>

#include <string>

#include "env/reference.hpp"

namespace {

// A chain of six pointwise ops: the TensorExpr fuser makes one group of it when it may fuse.
const char* kPointwiseChain = R"(
def reference(x, y):
    return torch.sigmoid(torch.relu(x * 2.0 + y) * 3.0 - 1.0)
)";

// Kinds of the fusion groups anywhere in `block` (nested blocks of the guards included).
std::string fusion_groups(torch::jit::Block* block) {
  std::string found;
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* b : n->blocks()) found += fusion_groups(b);
    const std::string kind = n->kind().toQualString();
    if (kind.find("FusionGroup") != std::string::npos || kind.find("TensorExprGroup") != std::string::npos)
      found += kind + " ";
  }
  return found;
}

// Runs `call` enough times for the profiling executor to optimise the graph (it profiles the
// first run), then returns the fusion groups of the graph it last executed on this thread.
template <class Call>
std::string groups_after_runs(Call call) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 4; ++i) call(torch::randn({64, 64}), torch::randn({64, 64}));
  auto graph = torch::jit::lastExecutedOptimizedGraph();
  REQUIRE(graph);
  return fusion_groups(graph->block());
}

}  // namespace

TEST_CASE("env reference: a fusable reference runs unfused, while the same graph with the fusers on is fused") {
  bool& must_use_llvm = torch::jit::tensorexpr::getTEMustUseLLVMOnCPU();
  const bool llvm_before = must_use_llvm;

  // Control: the CPU fuser on (it is off by default on the CPU; NNC is on by default and fuses on
  // the GPU). This shows the chain is fusable and that the check below can see a fusion group.
  torch::jit::setTensorExprFuserEnabled(true);
  torch::jit::overrideCanFuseOnCPU(true);
  must_use_llvm = false;  // the wheel's NNC may lack LLVM; its interpreter still makes the group
  auto cu = torch::jit::compile(kPointwiseChain);
  const std::string fused = groups_after_runs(
      [&](const torch::Tensor& x, const torch::Tensor& y) { return cu->get_function("reference")({x, y}); });

  // leap's reference path: compile_reference turns the fusers off for the process.
  const leap::env::Reference ref = leap::env::compile_reference(kPointwiseChain, "", "test: reference", "test.yaml", 2);
  const std::string unfused =
      groups_after_runs([&](const torch::Tensor& x, const torch::Tensor& y) { return ref.call({x, y}); });
  const bool nnc_after = torch::jit::tensorExprFuserEnabled();
  const bool cpu_after = torch::jit::canFuseOnCPU();
  const bool gpu_after = torch::jit::canFuseOnGPU();
  must_use_llvm = llvm_before;
  leap::env::use_unfused_references();

  CHECK_MESSAGE(fused.find("TensorExprGroup") != std::string::npos, "control not fused: '" << fused << "'");
  CHECK_MESSAGE(unfused.empty(), "leap's reference graph has fusion groups: " << unfused);
  CHECK_FALSE(nnc_after);
  CHECK_FALSE(cpu_after);
  CHECK_FALSE(gpu_after);

  // Same values either way: fusion changes kernels, not results.
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({8, 8}), y = torch::randn({8, 8});
  const auto want = torch::sigmoid(torch::relu(x * 2.0 + y) * 3.0 - 1.0);
  CHECK(torch::allclose(ref.call({x, y}).at(0), want, 1e-6, 1e-6));
}
