// bench_optimizer: one AdamW step of a model-shaped parameter list, torch::optim::AdamW (A)
// against rl::FusedAdamW (B), alternating A B A B; prints each side's median seconds and the
// median ratio B/A with its range (issue "GPU II", item 3).
//
//   ./build/bench_optimizer [--layers 30] [--hidden 576] [--inter 1536] [--vocab 49152]
//                           [--pairs 7] [--device cpu|cuda]
// Defaults: SmolLM2-135M's shapes (30 layers, hidden 576, 9 heads of 64, 3 KV heads, MLP 1536,
// vocab 49152, tied embeddings), float32 master weights as the trainer keeps them.
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "pairs.hpp"
#include "rl/fused_adamw.hpp"

using namespace leap;

namespace {

/// The parameters of a Llama-shaped model: per layer q, k, v, o, gate, up, down and two norms,
/// then the final norm and the (tied) embedding. [out, in] float32 on `device`, with gradients.
std::vector<at::Tensor> model_shaped(int64_t layers, int64_t hidden, int64_t inter, int64_t vocab, int64_t kv,
                                     torch::Device device) {
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t l = 0; l < layers; ++l) {
    shapes.insert(shapes.end(), {{hidden, hidden}, {kv, hidden}, {kv, hidden}, {hidden, hidden}, {inter, hidden},
                                 {inter, hidden}, {hidden, inter}, {hidden}, {hidden}});
  }
  shapes.push_back({hidden});
  shapes.push_back({vocab, hidden});
  std::vector<at::Tensor> ps;
  for (const auto& s : shapes) {
    auto p = (torch::randn(s, torch::TensorOptions().device(device)) * 0.02).requires_grad_(true);
    p.mutable_grad() = torch::randn_like(p) * 1e-3;
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"--layers", "30"}, {"--hidden", "576"}, {"--inter", "1536"},
                                          {"--vocab", "49152"}, {"--pairs", "7"}, {"--device", "cpu"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!a.count(argv[i])) {
      std::fprintf(stderr, "bench_optimizer: unknown option %s\n", argv[i]);
      return 2;
    }
    a[argv[i]] = argv[i + 1];
  }
  const torch::Device device(a["--device"]);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_optimizer: --device cuda, but no CUDA device\n");
    return 2;
  }
  const int64_t hidden = std::stoll(a["--hidden"]);
  auto make = [&] {
    torch::manual_seed(0);
    return model_shaped(std::stoll(a["--layers"]), hidden, std::stoll(a["--inter"]), std::stoll(a["--vocab"]),
                        hidden / 3, device);
  };
  auto unfused_params = make(), fused_params = make();
  int64_t numel = 0;
  for (const auto& p : unfused_params) numel += p.numel();
  const auto opts = torch::optim::AdamWOptions(1e-4).weight_decay(0.1);
  torch::optim::AdamW unfused(unfused_params, opts);
  rl::FusedAdamW fused(fused_params, opts);
  auto timed = [&](torch::optim::Optimizer& opt) {
    if (device.is_cuda()) torch::cuda::synchronize();
    const double t0 = bench::now_s();
    opt.step();
    if (device.is_cuda()) torch::cuda::synchronize();
    return bench::now_s() - t0;
  };
  std::printf("bench_optimizer: %zu parameters, %.1fM values, float32 on %s\n", unfused_params.size(), numel / 1e6,
              device.str().c_str());
  const auto p = bench::alternate([&] { return timed(unfused); }, [&] { return timed(fused); },
                                  std::stoi(a["--pairs"]), 2);
  std::printf("torch::optim::AdamW step: median %.4f s\nrl::FusedAdamW step:      median %.4f s\n",
              bench::median(p.a_s), bench::median(p.b_s));
  std::printf("fused / unfused seconds: %s\n", p.summary().c_str());
  std::printf("parameters agree after the same steps: max |diff| %.3g\n", [&] {
    double m = 0;
    for (size_t i = 0; i < unfused_params.size(); ++i)
      m = std::max(m, (unfused_params[i] - fused_params[i]).abs().max().item<double>());
    return m;
  }());
  return 0;
}
