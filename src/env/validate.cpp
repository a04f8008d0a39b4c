#include "env/validate.hpp"

#include "env/reference.hpp"

namespace leap::env {

std::vector<Weakness> find_weaknesses(const RuntimeTask& task, const VerifierOptions& options) {
  std::vector<Weakness> out;
  const auto& spec = task.spec();
  // A device written into the reference (a trace made on the CPU) keeps it off the GPU.
  const std::vector<std::string> baked = task.reference().baked_devices();
  if (!baked.empty()) {
    std::string list;
    for (size_t i = 0; i < baked.size() && i < 4; ++i) list += (i ? "; " : "") + baked[i];
    if (baked.size() > 4) list += "; and " + std::to_string(baked.size() - 4) + " more";
    out.push_back({"baked_device", "the reference has a device written into it as a constant (" + list +
                                       "): on the GPU it cannot follow its inputs, and the cuda backend could only "
                                       "time it as an infra_error; create tensors on the inputs' device "
                                       "(device=x.device), or trace it again with that fix"});
  }
  const int seeds = std::max(1, options.seeds);
  std::vector<std::vector<torch::Tensor>> inputs, refs;
  for (int s = 0; s < seeds; ++s) {
    inputs.push_back(make_inputs(task, input_seed(task, options.seed, s), s));
    refs.push_back(task.reference().run(task, inputs.back()));
    for (size_t j = 0; j < refs.back().size(); ++j) {
      const torch::Tensor& r = refs.back()[j];
      if (at::isFloatingType(r.scalar_type()) && !torch::isfinite(r).all().item<bool>()) {
        out.push_back({"nonfinite_reference", "output '" + spec.outputs[j].name + "' holds NaN or inf on seed " +
                                                  std::to_string(s + 1) + " (mark an input's init `strict: true` if the "
                                                  "reference needs a domain)"});
        break;
      }
    }
  }
  // Does every input matter?
  std::vector<torch::Tensor> other = make_inputs(task, input_seed(task, options.seed + 7919, 0), 0);
  for (size_t i = 0; i < inputs[0].size(); ++i) {
    std::vector<torch::Tensor> changed = inputs[0];
    changed[i] = other[i];
    if (torch::equal(changed[i], inputs[0][i])) continue;  // could not change it (tiny domain)
    std::vector<torch::Tensor> r2 = task.reference().run(task, changed);
    bool same = true;
    for (size_t j = 0; j < r2.size(); ++j) same = same && torch::equal(r2[j], refs[0][j]);
    if (same)
      out.push_back({"ignores_input", "the reference's outputs do not change when input '" + spec.inputs[i].name +
                                          "' changes"});
  }
  // Would a trivial kernel pass?
  const double atol = spec.tolerance.atol, rtol = spec.tolerance.rtol;
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const std::string& name = spec.outputs[j].name;
    auto passes_all = [&](auto make) {
      for (int s = 0; s < seeds; ++s) {
        torch::Tensor got = make(s);
        if (!compare_output(got, refs[s][j], atol, rtol, finite_rms(refs[0][j])).ok) return false;
      }
      return true;
    };
    const torch::Tensor& r0 = refs[0][j];
    if (passes_all([&](int s) { return torch::zeros_like(refs[s][j]); }))
      out.push_back({"zeros_pass", "an all-zeros '" + name + "' passes the correctness check on every seed"});
    torch::Scalar c = at::isFloatingType(r0.scalar_type()) ? torch::Scalar(r0.to(torch::kDouble).mean().item<double>())
                                                           : r0.reshape({-1})[0].item();
    if (passes_all([&](int s) { return torch::full_like(refs[s][j], c); }))
      out.push_back({"constant_pass", "a constant '" + name + "' (" + std::to_string(c.toDouble()) +
                                          ") passes the correctness check on every seed"});
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (inputs[0][i].numel() != r0.numel()) continue;
      if (passes_all([&](int s) { return inputs[s][i].reshape(refs[s][j].sizes()).to(refs[s][j].scalar_type()); }))
        out.push_back({"copy_pass", "a copy of input '" + spec.inputs[i].name + "' as '" + name +
                                        "' passes the correctness check on every seed"});
    }
  }
  return out;
}

}  // namespace leap::env
