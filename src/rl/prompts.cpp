#include "rl/prompts.hpp"

#include <sstream>

namespace leap::rl {

namespace {

const char* kCpuExample = R"(Example task: y = 2 * x for x: float32 [N], sizes N = 1024.
Example answer:
```cpp
#include <cstdint>

extern "C" void scale2(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i];
}
```

```yaml
launches:
  - kernel: scale2
    grid: [1]
    block: [1]
    shared_bytes: 0
    args: [x, y, numel(x)]
```)";

const char* kCudaExample = R"(Example task: y = 2 * x for x: float32 [N], sizes N = 1048576.
Example answer:
```cuda
extern "C" __global__ void scale2(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
```

```yaml
launches:
  - kernel: scale2
    grid: [ceil_div(N, 256)]
    block: [256]
    shared_bytes: 0
    args: [x, y, N]
```)";

std::string join_shape(const std::vector<std::string>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i];
  return s + "]";
}

}  // namespace

std::string system_prompt(std::string_view backend) {
  std::ostringstream os;
  if (backend == "cuda") {
    os << "You write fast, correct CUDA kernels. Answer with one ```cuda block (device code only, "
          "extern \"C\" __global__ entry points, no host code, no includes beyond what NVRTC ships) "
          "and one ```yaml launch plan.";
  } else {
    os << "You write fast, correct C++ kernels for the CPU. Answer with one ```cpp block (extern \"C\" "
          "functions) and one ```yaml launch plan.";
  }
  os << " The launch plan lists the launches in order; args name tensors (passed as pointers), size "
        "expressions (passed as int64) or constants. Expressions: integers, size symbols, + - * / %, "
        "ceil_div(a, b), min, max, numel(t), dim(t, i). Optional scratch: temporaries, zero-filled.";
  return os.str();
}

std::string interface_text(const tasks::TaskSpec& task, std::string_view backend) {
  std::ostringstream os;
  const auto sizes = task.sizes_for(std::string(backend));
  os << "sizes:";
  bool first = true;
  for (const auto& [name, _] : task.sizes) {
    auto it = sizes.find(name);
    if (it == sizes.end()) continue;
    os << (first ? " " : ", ") << name << " = " << it->second;
    first = false;
  }
  os << "\n";
  for (const auto& t : task.inputs) os << "input " << t.name << ": " << t.dtype << " " << join_shape(t.shape) << "\n";
  for (const auto& t : task.outputs) os << "output " << t.name << ": " << t.dtype << " " << join_shape(t.shape) << "\n";
  for (const auto& c : task.constants) os << "constant " << c.name << " = " << c.value << " (" << c.dtype << ")\n";
  return os.str();
}

std::string task_message(const tasks::TaskSpec& task, std::string_view backend) {
  std::ostringstream os;
  os << "Task " << task.name << ": write a " << (backend == "cuda" ? "CUDA" : "CPU")
     << " kernel that computes the same outputs as this PyTorch module.\n\n"
     << task.prompt << (task.prompt.empty() || task.prompt.back() == '\n' ? "" : "\n") << "\n"
     << interface_text(task, backend) << "\n"
     << (backend == "cuda" ? kCudaExample : kCpuExample) << "\n";
  return os.str();
}

std::vector<model::ChatMessage> first_turn_messages(const tasks::TaskSpec& task, std::string_view backend) {
  return {{"system", system_prompt(backend)}, {"user", task_message(task, backend)}};
}

std::string feedback_message(std::string_view verdict, std::string_view feedback, double speedup) {
  std::ostringstream os;
  os << "Result: " << verdict << "\n";
  if (!feedback.empty()) os << feedback << (feedback.back() == '\n' ? "" : "\n");
  if (verdict == "correct") {
    os << "Your answer is correct";
    if (speedup == speedup) os << " (speedup " << speedup << "x)";
    os << ". Make it faster; answer again in the same format.";
  } else {
    os << "Fix the problem and answer again in the same format.";
  }
  return os.str();
}

std::vector<model::ChatMessage> next_turn_context(std::vector<model::ChatMessage> context, std::string_view answer,
                                                  std::string_view verdict, std::string_view feedback, double speedup) {
  context.push_back({"assistant", strip_think(answer)});
  context.push_back({"user", feedback_message(verdict, feedback, speedup)});
  return context;
}

std::string strip_think(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t open = text.find("<think>", pos);
    if (open == std::string_view::npos) {
      out.append(text.substr(pos));
      break;
    }
    out.append(text.substr(pos, open - pos));
    size_t close = text.find("</think>", open);
    if (close == std::string_view::npos) break;
    pos = close + 8;
  }
  // Drop the blank lines a removed span leaves at the start.
  size_t start = out.find_first_not_of("\n");
  return start == std::string::npos ? std::string() : out.substr(start);
}

std::string digest_line(int turn, std::string_view verdict, std::string_view feedback) {
  std::string first(feedback.substr(0, feedback.find('\n')));
  if (first.size() > 120) {
    first.resize(117);
    first += "...";
  }
  std::string line = "attempt " + std::to_string(turn) + ": " + std::string(verdict);
  if (!first.empty()) line += " (" + first + ")";
  return line;
}

std::string summary_request() {
  return "Summarise your attempts so far in a few lines: what you tried, what the environment "
         "said, and what to change next. No code.";
}

}  // namespace leap::rl
