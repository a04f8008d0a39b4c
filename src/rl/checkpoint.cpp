#include "rl/checkpoint.hpp"

#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/safetensors.hpp"
#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "util/error.hpp"

namespace leap::rl {

namespace fs = std::filesystem;

namespace {

bool has_lora(model::Transformer& m) { return !m->lora_state_dict().empty(); }

}  // namespace

void save_checkpoint(const fs::path& dir, const fs::path& base_dir, model::Transformer& model,
                     torch::optim::Optimizer& optimizer, const TrainerState& state) {
  const fs::path tmp = dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "vocab.json", "merges.txt"}) {
    if (fs::exists(base_dir / f)) fs::copy_file(base_dir / f, tmp / f, fs::copy_options::overwrite_existing);
  }
  {
    std::map<std::string, torch::Tensor> tensors;
    for (auto& [name, t] : model->hf_state_dict()) tensors[name] = t.detach().to(torch::kCPU).contiguous();
    model::write_safetensors(tmp / "model.safetensors", model::tensor_bytes(tensors), {{"format", "pt"}});
  }
  if (has_lora(model)) model->save_lora(tmp / "adapter");
  torch::save(optimizer, (tmp / "optimizer.pt").string());
  nlohmann::json js;
  js["step"] = state.step;
  js["seed"] = state.seed;
  js["run_id"] = state.run_id;
  {
    auto gen_state = at::detail::getDefaultCPUGenerator().get_state();
    std::vector<int64_t> bytes(gen_state.data_ptr<uint8_t>(), gen_state.data_ptr<uint8_t>() + gen_state.numel());
    js["torch_cpu_rng"] = bytes;
  }
  std::ofstream(tmp / "trainer_state.json") << js.dump(2) << "\n";
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir);
}

TrainerState load_checkpoint(const fs::path& dir, model::Transformer& model, torch::optim::Optimizer& optimizer) {
  for (const char* f : {"model.safetensors", "optimizer.pt", "trainer_state.json"})
    if (!fs::exists(dir / f)) throw Error("checkpoint " + dir.string() + ": missing " + f);
  {
    auto ckpt = model::SafetensorsCheckpoint::open(dir);
    torch::NoGradGuard ng;
    model->load(ckpt);
  }
  if (has_lora(model)) model->load_lora(dir / "adapter");
  torch::load(optimizer, (dir / "optimizer.pt").string());
  std::ifstream in(dir / "trainer_state.json");
  nlohmann::json js;
  try {
    in >> js;
  } catch (const std::exception& e) {
    throw Error("checkpoint " + (dir / "trainer_state.json").string() + ": " + e.what());
  }
  TrainerState st;
  st.step = js.at("step").get<int64_t>();
  st.seed = js.at("seed").get<uint64_t>();
  st.run_id = js.value("run_id", "");
  if (js.contains("torch_cpu_rng")) {
    auto bytes = js["torch_cpu_rng"].get<std::vector<int64_t>>();
    auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    for (size_t i = 0; i < bytes.size(); ++i) t.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(bytes[i]);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(t);
  }
  return st;
}

}  // namespace leap::rl
