// Profiling feedback; see env/profile.hpp.
#include "env/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "env/dtype.hpp"
#include "util/error.hpp"

namespace leap::env {

namespace {

int64_t tensor_bytes(const tasks::TensorSpec& spec, const std::vector<int64_t>& shape) {
  DType t;
  if (!dtype_from_string(spec.dtype, t)) throw Error("task tensor '" + spec.name + "': unknown dtype '" + spec.dtype + "'");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n * static_cast<int64_t>(dtype_size(t));
}

/// A number with 3 significant digits in plain notation, trailing zeros dropped ("8.39", "1020",
/// "0.000032", "8").
std::string sig3(double v) {
  if (!std::isfinite(v) || v == 0) return v == 0 ? "0" : std::to_string(v);
  const int e = static_cast<int>(std::floor(std::log10(std::abs(v))));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::max(0, 2 - e), v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

Traffic task_traffic(const RuntimeTask& task) {
  Traffic t;
  const auto& spec = task.spec();
  for (size_t i = 0; i < spec.inputs.size() && i < task.input_shapes().size(); ++i)
    t.read_bytes += tensor_bytes(spec.inputs[i], task.input_shapes()[i]);
  for (size_t i = 0; i < spec.outputs.size() && i < task.output_shapes().size(); ++i)
    t.written_bytes += tensor_bytes(spec.outputs[i], task.output_shapes()[i]);
  return t;
}

std::string profile_text(const ProfileFacts& f) {
  const double total = static_cast<double>(f.traffic.read_bytes + f.traffic.written_bytes);
  std::string s = "profile: " + std::to_string(f.launches) + (f.launches == 1 ? " launch" : " launches") +
                  " per call, " + sig3(f.candidate_ms) + " ms per call (reference " + sig3(f.reference_ms) +
                  " ms); it moves at least " + sig3(total / 1e6) + " MB (" +
                  sig3(static_cast<double>(f.traffic.read_bytes) / 1e6) + " MB of inputs read, " +
                  sig3(static_cast<double>(f.traffic.written_bytes) / 1e6) + " MB of outputs written)";
  if (f.candidate_ms > 0) {
    const double gb_s = total / (f.candidate_ms * 1e-3) / 1e9;
    s += ": " + sig3(gb_s) + " GB/s";
    if (f.peak_gb_s > 0)
      s += ", " + sig3(100.0 * gb_s / f.peak_gb_s) + "% of the " + sig3(f.peak_gb_s) + " GB/s " + f.peak_name;
  }
  if (f.launch_times.empty()) return s;
  double sum = 0;
  for (const auto& lt : f.launch_times) sum += lt.second;
  s += "\nper launch (warm-up runs):";
  for (size_t i = 0; i < f.launch_times.size(); ++i) {
    s += std::string(i ? ", " : " ") + f.launch_times[i].first + " " + sig3(f.launch_times[i].second) + " ms";
    if (sum > 0) s += " (" + sig3(100.0 * f.launch_times[i].second / sum) + "%)";
  }
  return s;
}

}  // namespace leap::env
