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

namespace {

/// The trainer state of `js` (read from `state_path`, in checkpoint folder `dir`), every key
/// checked (load_checkpoint); `rng` gets the CPU generator's saved state.
TrainerState checked_trainer_state(const nlohmann::json& js, const fs::path& dir, const fs::path& state_path,
                                   std::optional<int64_t> expected_step, const std::string& expected_run_id,
                                   torch::Tensor& rng) {
  auto bad = [&](const std::string& key, const std::string& why) {
    return Error("checkpoint " + state_path.string() + ": \"" + key + "\" " + why);
  };
  if (!js.is_object()) throw Error("checkpoint " + state_path.string() + ": not a JSON object");
  TrainerState st;
  if (!js.contains("step") || !js["step"].is_number_integer()) throw bad("step", "must be an integer");
  st.step = js["step"].get<int64_t>();
  if (st.step < 0) throw bad("step", "is " + std::to_string(st.step) + ", below 0");
  const std::string folder = dir.filename().string();
  if (folder.rfind("step-", 0) == 0 && folder.substr(5) != std::to_string(st.step))
    throw bad("step", "is " + std::to_string(st.step) + ", but the folder is " + folder);
  if (expected_step && *expected_step != st.step)
    throw bad("step", "is " + std::to_string(st.step) + ", but the store records this checkpoint at step " +
                          std::to_string(*expected_step));
  if (!js.contains("seed") || !js["seed"].is_number_unsigned()) throw bad("seed", "must be an integer >= 0");
  st.seed = js["seed"].get<uint64_t>();
  if (js.contains("run_id") && !js["run_id"].is_string()) throw bad("run_id", "must be a string");
  st.run_id = js.value("run_id", "");
  if (!expected_run_id.empty() && st.run_id != expected_run_id)
    throw bad("run_id", "is '" + st.run_id + "', but the checkpoint is resumed for run '" + expected_run_id + "'");
  // "files" and "torch_cpu_rng" are absent from checkpoints of an older leap: then not checked.
  if (js.contains("files") && !js["files"].is_object()) throw bad("files", "must be an object of file sizes");
  for (const char* f : {"model.safetensors", "optimizer.pt"}) {
    if (!js.contains("files")) break;
    const auto it = js["files"].find(f);
    if (it == js["files"].end() || !it->is_number_integer()) throw bad(std::string("files.") + f, "must be an integer");
    const int64_t want = it->get<int64_t>(), got = util::file_size_or(dir / f);
    if (got != want)
      throw Error("checkpoint " + (dir / f).string() + ": " + std::to_string(got) + " bytes, but " +
                  std::to_string(want) + " were written (the file is truncated or was changed)");
  }
  if (!js.contains("torch_cpu_rng")) return st;
  if (!js["torch_cpu_rng"].is_array()) throw bad("torch_cpu_rng", "must be a list of bytes");
  const auto& bytes = js["torch_cpu_rng"];
  const int64_t want = at::detail::getDefaultCPUGenerator().get_state().numel();
  if (static_cast<int64_t>(bytes.size()) != want)
    throw bad("torch_cpu_rng", "holds " + std::to_string(bytes.size()) + " bytes; the generator's state is " +
                                   std::to_string(want));
  rng = torch::empty({want}, torch::kUInt8);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!bytes[i].is_number_integer() || bytes[i].get<int64_t>() < 0 || bytes[i].get<int64_t>() > 255)
      throw bad("torch_cpu_rng", "element " + std::to_string(i) + " is not a byte (0-255)");
    rng.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(bytes[i].get<int64_t>());
  }
  return st;
}

}  // namespace

TrainerState load_checkpoint(const fs::path& dir, model::Transformer& model, torch::optim::Optimizer& optimizer,
                             std::optional<int64_t> expected_step, const std::string& expected_run_id) {
  for (const char* f : {"model.safetensors", "optimizer.pt", "trainer_state.json"})
    if (!fs::exists(dir / f)) throw Error("checkpoint " + dir.string() + ": missing " + f);
  // The trainer state first, whole: it records the sizes of the large files, and nothing is
  // loaded from a checkpoint whose state does not fit it.
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
  torch::Tensor rng;  // stays undefined without "torch_cpu_rng"
  const TrainerState st = checked_trainer_state(js, dir, state_path, expected_step, expected_run_id, rng);
  // LibTorch checks the generator's state too (an mt19937 state it rejects): tried here, before
  // anything is loaded, so its error names the file and key; set for good after the tensors.
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  if (rng.defined()) {
    const torch::Tensor before = gen.get_state();
    try {
      gen.set_state(rng);
    } catch (const c10::Error& e) {
      std::string why = e.what_without_backtrace();
      if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
      throw Error("checkpoint " + state_path.string() + ": \"torch_cpu_rng\" is not a generator state: " + why);
    }
    gen.set_state(before);  // set again after the tensors load, below
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
  if (rng.defined()) gen.set_state(rng);
  return st;
}

}  // namespace leap::rl
