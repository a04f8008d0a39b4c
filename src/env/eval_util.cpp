// Small helpers of the verifier's steps (env/evaluation.hpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "env/errors.hpp"
#include "env/evaluation.hpp"
#include "env/poison.hpp"
#include "env/reference.hpp"

namespace leap::env {

std::string fmt_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string fmt_ms(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

void write_tensor(SharedBuffers& buf, size_t i, const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  const size_t n = static_cast<size_t>(c.nbytes());
  if (n != buf.bytes(i)) throw Error("internal: tensor size mismatch while filling buffers");
  std::memcpy(buf.data(i), c.data_ptr(), n);
}

void prefill_output(SharedBuffers& buf, size_t i, const BoundTensor& t) { poison(buf.data(i), buf.bytes(i), t.dtype); }

namespace {

/// A copy of the tensor `t` held at `data` (bools read as uint8 so a sentinel byte stays visible).
torch::Tensor copy_tensor_at(const void* data, const BoundTensor& t) {
  torch::ScalarType st = torch_dtype(t.dtype);
  if (st == torch::kBool) st = torch::kByte;
  return torch::from_blob(const_cast<void*>(data), t.shape, torch::TensorOptions().dtype(st)).clone();
}

}  // namespace

torch::Tensor read_tensor(const SharedBuffers& buf, size_t i, const BoundTensor& t) { return copy_tensor_at(buf.data(i), t); }

torch::Tensor read_bytes_tensor(const std::vector<std::byte>& bytes, const BoundTensor& t) {
  if (bytes.size() != t.bytes()) throw Error("internal: a snapshot of '" + t.name + "' has the wrong size");
  return copy_tensor_at(bytes.data(), t);
}

std::string run_failure_text(const RunOutcome& r) {
  switch (r.verdict) {
    case Verdict::launch_error: return "launch error: " + r.message;
    case Verdict::runtime_error: return "runtime error: " + r.message;
    case Verdict::timeout: return "timeout: " + r.message;
    default: return r.message;
  }
}

ThreadGuard::ThreadGuard(int n) : saved(at::get_num_threads()) {
  if (n > 0 && n != saved) at::set_num_threads(n);
}

ThreadGuard::~ThreadGuard() {
  if (at::get_num_threads() != saved) at::set_num_threads(saved);
}

std::string inputs_text(const RuntimeTask& task, int seed_index) {
  std::string s;
  for (size_t i = 0; i < task.spec().inputs.size(); ++i) {
    const auto& in = task.spec().inputs[i];
    const bool floating = in.dtype.rfind("float", 0) == 0 || in.dtype == "bfloat16";
    std::string d = in.init.kind == tasks::InitSpec::Kind::file ? "fixed values"
                    : (!floating || in.init.strict)             ? "declared distribution"
                                                                : to_string(variant_for(seed_index, static_cast<int>(i)));
    s += (i ? ", " : "") + in.name + ": " + d;
  }
  return s;
}

std::vector<std::vector<int>> add_rotated_sets(BoundPlan& plan, size_t count, int R) {
  std::vector<int> identity(plan.tensors.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
  std::vector<std::vector<int>> rotations(static_cast<size_t>(std::max(0, R)), identity);
  const std::vector<BoundTensor> base = plan.tensors;
  for (int r = 1; r < R; ++r)
    for (size_t i = 0; i < count; ++i) {
      BoundTensor copy = base[i];
      copy.name += "#" + std::to_string(r);
      rotations[static_cast<size_t>(r)][i] = static_cast<int>(plan.tensors.size());
      plan.tensors.push_back(copy);
    }
  return rotations;
}

void add_output_slots(BoundPlan& plan, std::vector<std::vector<int>>& rotations, size_t n_in, size_t n_out,
                      int slots) {
  const size_t R = rotations.size();
  if (R == 0 || slots < static_cast<int>(R) || slots % static_cast<int>(R) != 0)
    throw Error("internal: output slots must be a multiple of the input sets");
  for (size_t b = R; b < static_cast<size_t>(slots); ++b) {
    std::vector<int> rot = rotations[b % R];
    for (size_t j = 0; j < n_out; ++j) {
      BoundTensor copy = plan.tensors[n_in + j];
      copy.name += "@slot" + std::to_string(b);
      rot[n_in + j] = static_cast<int>(plan.tensors.size());
      plan.tensors.push_back(copy);
    }
    rotations.push_back(std::move(rot));
  }
}

RunRequest timing_request(const VerifierOptions& o, const std::vector<std::vector<int>>& rotations) {
  RunRequest r;
  r.warmup = o.warmup;
  r.trials = o.trials;
  r.max_seconds = o.max_seconds;
  r.rotations = rotations;
  r.warmup_ms = o.warmup_ms;
  r.min_timed_ms = o.min_timed_ms;
  r.profile_launches = o.profile_feedback;
  return r;
}

}  // namespace leap::env
