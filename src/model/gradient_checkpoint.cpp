// Gradient checkpointing (model/transformer.hpp `checkpoint`): a decoder layer's activations are
// recomputed in backward instead of kept, in the forward's autocast precision.
#include "model/autocast.hpp"
#include "model/transformer.hpp"

namespace leap::model {

namespace {

using CkptFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// The autocast state (model/autocast.hpp) is captured at the forward and put back around the
// recomputation in backward (as torch.utils.checkpoint does), so checkpointed layers are
// recomputed in the forward's precision: the gradients are those of the function that gave the
// forward's outputs.
struct FnHolder : torch::CustomClassHolder {
  CkptFn fn;
  int64_t n_inputs = 0;
  AutocastState autocast;  // of the forward, for the recomputation
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<FnHolder> holder, at::TensorList all) {
    std::vector<torch::Tensor> ins(all.begin(), all.begin() + holder->n_inputs);
    ctx->save_for_backward(std::vector<torch::Tensor>(all.begin(), all.end()));
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    auto outs = holder->fn(ins);
    return outs;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    auto saved = ctx->get_saved_variables();
    const int64_t n = holder->n_inputs;
    std::vector<torch::Tensor> ins;
    std::vector<torch::Tensor> targets;
    std::vector<int64_t> target_idx;
    for (int64_t i = 0; i < static_cast<int64_t>(saved.size()); ++i) {
      auto t = saved[i];
      if (i < n) {
        auto d = t.detach().requires_grad_(t.requires_grad());
        ins.push_back(d);
        if (t.requires_grad()) { targets.push_back(d); target_idx.push_back(i); }
      } else if (t.requires_grad()) {
        targets.push_back(t);
        target_idx.push_back(i);
      }
    }
    std::vector<torch::Tensor> outs, gouts;
    {
      torch::AutoGradMode on(true);
      AutocastScope autocast(holder->autocast);  // recompute in the forward's precision
      auto res = holder->fn(ins);
      for (size_t i = 0; i < res.size(); ++i)
        if (res[i].requires_grad() && i < grads.size() && grads[i].defined()) {
          outs.push_back(res[i]);
          gouts.push_back(grads[i]);
        }
    }
    torch::autograd::variable_list result(1 + saved.size());
    if (!outs.empty() && !targets.empty()) {
      auto g = torch::autograd::grad(outs, targets, gouts, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
      for (size_t j = 0; j < g.size(); ++j) result[1 + target_idx[j]] = g[j];
    }
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(CkptFn fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params) {
  bool any = torch::GradMode::is_enabled();
  bool needs = false;
  for (auto& t : inputs) needs = needs || t.requires_grad();
  for (auto& t : params) needs = needs || t.requires_grad();
  if (!any || !needs) return fn(inputs);
  auto holder = c10::make_intrusive<FnHolder>();
  holder->fn = std::move(fn);
  holder->n_inputs = static_cast<int64_t>(inputs.size());
  holder->autocast = AutocastState::capture();
  std::vector<torch::Tensor> all(inputs);
  for (auto& p : params)
    if (p.requires_grad()) all.push_back(p);
  return CheckpointFunction::apply(holder, at::TensorList(all));
}

}  // namespace leap::model
