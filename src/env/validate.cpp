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
  // One seed's inputs and outputs at a time (the first seed's kept): a task at its full sizes
  // (one without cpu sizes) needs two sets of inputs and outputs, not one per seed.
  const int seeds = std::max(1, options.seeds);
  const double atol = spec.tolerance.atol, rtol = spec.tolerance.rtol;
  const size_t n_out = spec.outputs.size();
  std::vector<torch::Tensor> inputs0, refs0;
  std::vector<double> rms(n_out, 0.0);
  std::vector<torch::Scalar> constant(n_out);
  std::vector<char> zeros_ok(n_out, 1), constant_ok(n_out, 1);
  std::vector<std::vector<char>> copy_ok(n_out);  // [output][input]: a same-sized input, still passing
  std::vector<Weakness> nonfinite;
  std::vector<char> constant_in(spec.inputs.size(), 1);  // one value in every element, on every seed
  std::vector<torch::Tensor> first_in;
  for (int s = 0; s < seeds; ++s) {
    std::vector<torch::Tensor> inputs = make_inputs(task, input_seed(task, options.seed, s), s);
    for (size_t i = 0; i < inputs.size() && i < constant_in.size(); ++i) {
      const torch::Tensor flat = inputs[i].reshape({-1});
      if (s == 0) first_in.push_back(flat.numel() > 0 ? flat[0] : flat);
      constant_in[i] = constant_in[i] && flat.numel() > 1 && torch::equal(flat, first_in[i].expand_as(flat));
    }
    std::vector<torch::Tensor> refs = task.reference().run(task, inputs);
    for (size_t j = 0; j < refs.size(); ++j) {
      const torch::Tensor& r = refs[j];
      if (at::isFloatingType(r.scalar_type()) && !torch::isfinite(r).all().item<bool>()) {
        nonfinite.push_back({"nonfinite_reference", "output '" + spec.outputs[j].name + "' holds NaN or inf on seed " +
                                                        std::to_string(s + 1) + " (mark an input's init `strict: true` if the "
                                                        "reference needs a domain)"});
        break;
      }
    }
    if (s == 0) {
      for (size_t j = 0; j < n_out && j < refs.size(); ++j) {
        rms[j] = finite_rms(refs[j]);
        constant[j] = at::isFloatingType(refs[j].scalar_type()) ? torch::Scalar(refs[j].to(torch::kDouble).mean().item<double>())
                                                                 : refs[j].reshape({-1})[0].item();
        for (size_t i = 0; i < inputs.size(); ++i) copy_ok[j].push_back(inputs[i].numel() == refs[j].numel());
      }
    }
    // Would a trivial kernel pass this seed? (each check stops at its first failing seed)
    for (size_t j = 0; j < n_out && j < refs.size(); ++j) {
      const torch::Tensor& r = refs[j];
      if (zeros_ok[j]) zeros_ok[j] = compare_output(torch::zeros_like(r), r, atol, rtol, rms[j]).ok;
      if (constant_ok[j]) constant_ok[j] = compare_output(torch::full_like(r, constant[j]), r, atol, rtol, rms[j]).ok;
      for (size_t i = 0; i < copy_ok[j].size(); ++i)
        if (copy_ok[j][i])
          copy_ok[j][i] = compare_output(inputs[i].reshape(r.sizes()).to(r.scalar_type()), r, atol, rtol, rms[j]).ok;
    }
    if (s == 0) {
      inputs0 = std::move(inputs);
      refs0 = std::move(refs);
    }
  }
  out.insert(out.end(), nonfinite.begin(), nonfinite.end());
  // An input that is one constant everywhere and on every seed (KernelBench's norm layers start at
  // weight 1, bias 0): an answer that assumes the constant passes (a tester, 2026-12-07).
  for (size_t i = 0; i < constant_in.size() && i < first_in.size(); ++i)
    if (constant_in[i])
      out.push_back({"constant_input", "input '" + spec.inputs[i].name + "' is " +
                                           std::to_string(first_in[i].item<double>()) +
                                           " in every element on every seed: an answer that assumes it (ignores a "
                                           "weight of ones or a bias of zeros) passes; declare a spread around it "
                                           "(e.g. uniform: {low: 0.5, high: 1.5})"});
  // Does every input matter?
  std::vector<torch::Tensor> other = make_inputs(task, input_seed(task, options.seed + 7919, 0), 0);
  for (size_t i = 0; i < inputs0.size(); ++i) {
    std::vector<torch::Tensor> changed = inputs0;
    changed[i] = other[i];
    if (torch::equal(changed[i], inputs0[i])) continue;  // could not change it (tiny domain)
    std::vector<torch::Tensor> r2 = task.reference().run(task, changed);
    // Within the correctness check's tolerance, not bit for bit: a tester's 3_DeepNarrowMLP ran
    // its network on zeros instead of x and was `correct` (its output moves 2e-9 with x) while
    // validate said ok (2026-12-08).
    bool same = true;
    for (size_t j = 0; j < r2.size() && j < refs0.size(); ++j)
      same = same && compare_output(r2[j], refs0[j], atol, rtol, j < rms.size() ? rms[j] : 0).ok;
    if (same)
      out.push_back({"ignores_input", "the reference's outputs do not change beyond the tolerance when input '" +
                                          spec.inputs[i].name + "' changes: an answer that ignores it passes"});
  }
  other.clear();
  for (size_t j = 0; j < n_out && j < refs0.size(); ++j) {
    const std::string& name = spec.outputs[j].name;
    if (zeros_ok[j]) out.push_back({"zeros_pass", "an all-zeros '" + name + "' passes the correctness check on every seed"});
    if (constant_ok[j])
      out.push_back({"constant_pass", "a constant '" + name + "' (" + std::to_string(constant[j].toDouble()) +
                                          ") passes the correctness check on every seed"});
    for (size_t i = 0; i < copy_ok[j].size(); ++i)
      if (copy_ok[j][i])
        out.push_back({"copy_pass", "a copy of input '" + spec.inputs[i].name + "' as '" + name +
                                        "' passes the correctness check on every seed"});
  }
  return out;
}

}  // namespace leap::env
