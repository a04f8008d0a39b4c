#include "rl/checkpoint.hpp"

#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/safetensors.hpp"
#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace leap::rl {

namespace fs = std::filesystem;

namespace {

bool has_lora(model::Transformer& m) { return !m->lora_state_dict().empty(); }

}  // namespace

void save_checkpoint(const fs::path& dir, const fs::path& base_dir, model::Transformer& model,
                     torch::optim::Optimizer& optimizer, const TrainerState& state) {
  const fs::path tmp = dir.string() + ".tmp";
  const std::string where = "checkpoint " + dir.string() + ": ";
  auto fail = [&](const std::string& why) {
    util::remove_tree(tmp);  // never a half checkpoint, not even under the temporary name
    throw Error(where + why);
  };
  util::remove_tree(tmp);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) fail("cannot create " + tmp.string() + ": " + util::io_error_text(ec.value()));
  try {
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "vocab.json", "merges.txt"}) {
      if (fs::exists(base_dir / f)) util::copy_file_atomic(base_dir / f, tmp / f);
    }
    {
      std::map<std::string, torch::Tensor> tensors;
      for (auto& [name, t] : model->hf_state_dict()) tensors[name] = t.detach().to(torch::kCPU).contiguous();
      model::write_safetensors(tmp / "model.safetensors", model::tensor_bytes(tensors), {{"format", "pt"}});
    }
    if (has_lora(model)) model->save_lora(tmp / "adapter");
    // Serialized in memory, then written by a checked writer: torch's own file writer reports a
    // full disk from a destructor (an abort), without the path.
    {
      std::ostringstream os(std::ios::binary);
      torch::save(optimizer, os);
      if (!os) throw Error("cannot serialize the optimizer state");
      util::write_file_atomic(tmp / "optimizer.pt", os.str());
    }
    nlohmann::json js;
    js["step"] = state.step;
    js["seed"] = state.seed;
    js["run_id"] = state.run_id;
    {
      auto gen_state = at::detail::getDefaultCPUGenerator().get_state();
      std::vector<int64_t> bytes(gen_state.data_ptr<uint8_t>(), gen_state.data_ptr<uint8_t>() + gen_state.numel());
      js["torch_cpu_rng"] = bytes;
    }
    // Sizes of the large files, checked on load (a truncated file is named before it is parsed).
    nlohmann::json files = nlohmann::json::object();
    for (const char* f : {"model.safetensors", "optimizer.pt"}) files[f] = util::file_size_or(tmp / f);
    js["files"] = files;
    util::write_file_atomic(tmp / "trainer_state.json", js.dump(2) + "\n");
  } catch (const c10::Error& e) {
    fail(e.what_without_backtrace());
  } catch (const Error& e) {
    fail(e.what());
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (!util::remove_tree(dir)) fail("cannot remove the previous " + dir.string());
  if (::rename(tmp.c_str(), dir.c_str()) != 0) fail("cannot rename " + tmp.string() + ": " + util::io_error_text(errno));
  util::sync_dir(dir.parent_path());
}

TrainerState load_checkpoint(const fs::path& dir, model::Transformer& model, torch::optim::Optimizer& optimizer) {
  for (const char* f : {"model.safetensors", "optimizer.pt", "trainer_state.json"})
    if (!fs::exists(dir / f)) throw Error("checkpoint " + dir.string() + ": missing " + f);
  // The trainer state first: it records the sizes of the large files.
  const fs::path state_path = dir / "trainer_state.json";
  nlohmann::json js;
  {
    std::ifstream in(state_path);
    try {
      in >> js;
    } catch (const std::exception& e) {
      throw Error("checkpoint " + state_path.string() + ": cannot be read (truncated or corrupt): " + e.what());
    }
  }
  TrainerState st;
  try {
    st.step = js.at("step").get<int64_t>();
    st.seed = js.at("seed").get<uint64_t>();
    st.run_id = js.value("run_id", "");
  } catch (const std::exception& e) {
    throw Error("checkpoint " + state_path.string() + ": " + e.what());
  }
  if (js.contains("files") && js["files"].is_object()) {
    for (const auto& [name, size] : js["files"].items()) {
      if (!size.is_number_integer()) continue;
      const int64_t want = size.get<int64_t>(), got = util::file_size_or(dir / name);
      if (got != want)
        throw Error("checkpoint " + (dir / name).string() + ": " + std::to_string(got) + " bytes, but " +
                    std::to_string(want) + " were written (the file is truncated or was changed)");
    }
  }
  {
    auto ckpt = model::SafetensorsCheckpoint::open(dir);
    torch::NoGradGuard ng;
    model->load(ckpt);
  }
  if (has_lora(model)) model->load_lora(dir / "adapter");
  const fs::path opt_path = dir / "optimizer.pt";
  try {
    torch::load(optimizer, opt_path.string());
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    throw Error("checkpoint " + opt_path.string() + ": cannot be read (truncated or corrupt): " + why);
  } catch (const std::exception& e) {
    throw Error("checkpoint " + opt_path.string() + ": cannot be read (truncated or corrupt): " + e.what());
  }
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
