// Benchmark (not a test; no GPU needed): compile latency of leap's in-process NVRTC path against
// `nvcc -cubin` run as a subprocess, on every starter cuda solution, same source and architecture.
// Where the project's Python has torch, also one cold torch.utils.cpp_extension.load_inline build
// of a small kernel with the same body (the usual harness's per-candidate cost).
//   ninja -C build bench_env_compile && ./build/bench_env_compile [tasks/starter] [reps] [python]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "env/extract.hpp"
#include "env/nvrtc_compiler.hpp"
#include "util/fs.hpp"
#include "util/subprocess.hpp"
#include "pairs.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

using leap::bench::median;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The relu starter kernel with a host launcher, for load_inline (one cold build).
const char* kLoadInlineScript = R"PY(
import os, sys, time, tempfile
import torch
from torch.utils.cpp_extension import load_inline
cuda_src = open(sys.argv[1]).read() + r'''
#include <torch/extension.h>
torch::Tensor relu_launch(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long long n = x.numel();
  relu_vec4<<<(unsigned)std::max<long long>(1, (n / 4 + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
'''
cpp_src = "torch::Tensor relu_launch(torch::Tensor x);"
d = tempfile.mkdtemp(prefix="leap-load-inline-")
t0 = time.perf_counter()
load_inline(name="leap_bench_relu", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_launch"],
            build_directory=d, extra_cuda_cflags=["-arch=sm_90"], verbose=False)
print("LOAD_INLINE_SECONDS %.3f" % (time.perf_counter() - t0))
)PY";

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(LEAP_SOURCE_DIR) + "/tasks/starter";
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const std::string python = argc > 3 ? argv[3] : "/work/main/.venv/bin/python";
  const std::string nvcc = std::string(LEAP_CUDA_HOME) + "/bin/nvcc";
  const std::string arch = "sm_90";

  struct Item {
    std::string name, code;
  };
  std::vector<Item> items;  // every <task>/solutions/cuda_*.md
  for (const auto& t : fs::directory_iterator(dir)) {
    if (!t.is_directory() || !fs::is_directory(t.path() / "solutions")) continue;
    for (const auto& e : fs::directory_iterator(t.path() / "solutions"))
      if (e.path().filename().string().rfind("cuda_", 0) == 0)
        items.push_back({t.path().filename().string() + "/" + e.path().stem().string(),
                         env::extract_answer(slurp(e.path()), env::CodeLanguage::cuda).code});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.name < b.name; });

  const fs::path tmp = fs::temp_directory_path() / ("leap-bench-compile-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  env::NvrtcOptions no;
  no.arch = arch;
  no.cache_dir = (tmp / "cache").string();
  env::NvrtcCompiler nvrtc(no);
  std::printf("bench_env_compile: %zu starter cuda solutions, %d rep(s) each, %s; NVRTC %s in-process (cache off: a "
              "fresh source each rep) vs `nvcc -cubin -arch=%s -std=c++17` subprocess\n",
              items.size(), reps, arch.c_str(), env::nvrtc_version().c_str(), arch.c_str());
  std::printf("%-44s %10s %10s %7s\n", "solution", "nvrtc ms", "nvcc ms", "ratio");
  std::vector<double> ratios, nvrtc_meds, nvcc_meds;
  double relu_nvrtc = 0;
  std::string relu_code;
  for (const auto& it : items) {
    std::vector<double> a, b;
    for (int r = 0; r < reps; ++r) {
      // A distinct comment per rep: a new cache key, so NVRTC really runs (the cache-write and the
      // CUBIN symbol scan are part of the measured path).
      const std::string src = it.code + "\n// rep " + std::to_string(r) + "\n";
      double t0 = now_ms();
      env::NvrtcResult res = nvrtc.compile(src);
      a.push_back(now_ms() - t0);
      if (!res.ok) {
        std::printf("%s: NVRTC failed:\n%s\n", it.name.c_str(), res.feedback.c_str());
        return 1;
      }
      const fs::path cu = tmp / "solution.cu";
      spit(cu, src);
      util::ProcessOptions po;
      po.cwd = tmp.string();
      po.timeout_s = 300;
      t0 = now_ms();
      auto pr = util::run_process({nvcc, "-cubin", "-arch=" + arch, "-std=c++17", "solution.cu", "-o", "solution.cubin"}, po);
      b.push_back(now_ms() - t0);
      if (!pr.ok()) {
        std::printf("%s: nvcc failed:\n%s\n", it.name.c_str(), pr.output.c_str());
        return 1;
      }
    }
    double ma = median(a), mb = median(b);
    nvrtc_meds.push_back(ma);
    nvcc_meds.push_back(mb);
    ratios.push_back(mb / ma);
    if (it.name.rfind("relu/", 0) == 0) {
      relu_nvrtc = ma;
      relu_code = it.code;
    }
    std::printf("%-44s %10.1f %10.1f %6.1fx\n", it.name.c_str(), ma, mb, mb / ma);
    std::fflush(stdout);
  }
  std::printf("\nmedian over solutions: NVRTC %.1f ms, nvcc %.1f ms; median ratio nvcc/NVRTC %.2fx\n", median(nvrtc_meds),
              median(nvcc_meds), median(ratios));

  // One cold load_inline of the relu kernel, where torch is importable.
  if (!relu_code.empty() && fs::exists(python)) {
    spit(tmp / "relu.cu", relu_code);
    spit(tmp / "load_inline.py", kLoadInlineScript);
    util::ProcessOptions po;
    po.timeout_s = 900;
    auto pr = util::run_process({python, (tmp / "load_inline.py").string(), (tmp / "relu.cu").string()}, po);
    auto pos = pr.output.find("LOAD_INLINE_SECONDS ");
    if (pr.ok() && pos != std::string::npos) {
      double s = std::atof(pr.output.c_str() + pos + 20);
      std::printf("torch load_inline (relu, cold, 1 rep): %.0f ms; NVRTC median for relu %.1f ms; ratio %.0fx\n", s * 1000,
                  relu_nvrtc, s * 1000 / relu_nvrtc);
    } else {
      std::string tail = pr.output.size() > 1500 ? pr.output.substr(pr.output.size() - 1500) : pr.output;
      std::printf("torch load_inline: not measured (%s):\n%s\n", pr.timed_out ? "timed out" : "failed", tail.c_str());
    }
  } else {
    std::printf("torch load_inline: not measured (no python at %s)\n", python.c_str());
  }
  util::remove_tree(tmp);
  return 0;
}
