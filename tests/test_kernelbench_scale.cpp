// `leap tasks import kernelbench` at KernelBench's sizes (issue 18): a memory budget (problems too
// large for it traced at scaled sizes, full-size shapes from the size symbols), cpu sizes, one
// process per problem (a problem that allocates until killed is a skip), resume after a kill, and
// the references at the cpu sizes against eager PyTorch (tools/kernelbench_eager.py).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "env/reference.hpp"
#include "env/task_runtime.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using leap::test::run_leap;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string problem(const std::string& init, const std::string& forward, const std::string& globals,
                    const std::string& inputs, const std::string& init_inputs = "[]", const std::string& head = "") {
  return "import torch\nimport torch.nn as nn\n" + head + "\nclass Model(nn.Module):\n    def __init__(self" +
         (init_inputs == "[]" ? std::string("") : ", *a") + "):\n        super().__init__()\n" + init +
         "\n    def forward(self, x):\n        " + forward + "\n\n" + globals + "\n\ndef get_inputs():\n    return " +
         inputs + "\n\ndef get_init_inputs():\n    return " + init_inputs + "\n";
}

const std::string kRelu = problem("", "return torch.relu(x)", "batch = 16\ndim = 64", "[torch.randn(batch, dim)]");

std::string python() {
  const fs::path venv = fs::path(LEAP_SOURCE_DIR) / ".venv" / "bin" / "python";
  return fs::exists(venv) ? venv.string() : "python3";
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("kernelbench import: a problem too large for the budget is traced at scaled sizes, its shapes at full size") {
  leap::test::TempDir tmp;
  // x: [64, 2^22] float32 = 1 GiB, over a 1.5 GiB budget once cloned; nothing is allocated at that size.
  tmp.write("kb/1_BigScale.py",
            problem("        self.w = nn.Parameter(torch.randn(dim) * 0.5)\n", "return torch.tanh(x) * self.w",
                    "batch = 64\ndim = 4194304", "[torch.randn(batch, dim)]"));
  tmp.write("kb/2_Relu.py", kRelu);
  const fs::path out = tmp.path / "out";
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                    " --memory-gb 1.5 --timeout 120");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "2 problems imported"));
  CHECK(has(r.out, "traced_at scaled"));
  auto set = leap::tasks::load_task_set(out.string());
  const auto* big = set.find("001_big_scale");
  REQUIRE(big);
  CHECK(big->sizes == std::vector<std::pair<std::string, int64_t>>{{"batch", 64}, {"dim", 4194304}});
  REQUIRE(big->inputs.size() == 2);
  CHECK(big->inputs[0].shape == std::vector<std::string>{"batch", "dim"});
  CHECK(big->inputs[1].name == "w");
  CHECK(big->inputs[1].shape == std::vector<std::string>{"dim"});
  CHECK(big->inputs[1].init.seed.has_value());  // normal(0, 0.5) values: a seed, not a 16 MiB file
  CHECK(big->inputs[1].init.kind == leap::tasks::InitSpec::Kind::normal);
  CHECK(std::abs(std::stod(big->inputs[1].init.b) - 0.5) < 0.01);
  CHECK(big->source.at("traced_at").rfind("scaled", 0) == 0);
  // Full-size shapes from the symbols (the cuda backend gets `sizes`), a smaller cpu variant.
  leap::env::RuntimeTask full(*big, "cuda");
  CHECK(full.input_shapes()[0] == std::vector<int64_t>{64, 4194304});
  CHECK(full.output_shapes()[0] == std::vector<int64_t>{64, 4194304});
  leap::env::RuntimeTask cpu(*big, "cpu");
  const auto& cs = cpu.input_shapes()[0];
  CHECK(cs[0] >= 2);
  CHECK(cs[1] >= 2);
  CHECK(cs[0] * cs[1] < 64 * 4194304 / 64);
  CHECK(4194304 % cs[1] == 0);  // halved: divisibility kept
  // The reference (traced at scaled sizes) at the cpu sizes: tanh(x) * w.
  auto ins = leap::env::make_inputs(cpu, 5, 0);
  auto outs = cpu.reference().run(cpu, ins);
  CHECK(torch::allclose(outs[0], torch::tanh(ins[0]) * ins[1], 1e-5, 1e-6));
  CHECK_FALSE(fs::exists(big->dir + "/weights/.check"));  // LibTorch reproduced the seeded values; checked, removed
  auto v = run_leap("tasks validate " + out.string());
  CAPTURE(v.out);
  CHECK(has(v.out, "2 tasks: 0 with problems, 0 weak"));
}

TEST_CASE("kernelbench import: a problem that allocates until killed is a skip, the next problem imports") {
  leap::test::TempDir tmp;
  tmp.write("kb/1_Hog.py", "hog = []\nwhile True:\n    hog.append(b'x' * (1 << 26))\n" + kRelu);
  tmp.write("kb/2_Relu.py", kRelu);
  const fs::path out = tmp.path / "out";
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                    " --memory-gb 1.5 --timeout 60");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const std::string skipped = leap::test::read_file((out / "skipped.yaml").string());
  CAPTURE(skipped);
  CHECK(has(skipped, "1_Hog.py"));
  CHECK((has(skipped, "used more than the 1.5 GiB budget") || has(skipped, "MemoryError") ||
         has(skipped, "out of memory")));
  auto set = leap::tasks::load_task_set(out.string());
  REQUIRE(set.tasks.size() == 1);
  CHECK(set.tasks[0].name == "002_relu");
  CHECK_FALSE(fs::exists(out / "001_hog"));
}

TEST_CASE("kernelbench import: after a kill of the importer, the same command keeps what was written and resumes") {
  leap::test::TempDir tmp;
  tmp.write("kb/1_Relu.py", kRelu);
  tmp.write("kb/2_Sleeps.py",
            problem("", "import time; time.sleep(60); return x", "batch = 16\ndim = 64", "[torch.randn(batch, dim)]"));
  tmp.write("kb/3_Tanh.py", problem("", "return torch.tanh(x)", "batch = 16\ndim = 64", "[torch.randn(batch, dim)]"));
  const fs::path out = tmp.path / "out";
  const std::string cmd = leap::test::leap_binary() + " tasks import kernelbench " + (tmp.path / "kb").string() +
                          " --out " + out.string();
  // In its own process group, killed (SIGKILL, all of it) while problem 2 runs.
  const std::string script = "setsid " + cmd + " --timeout 100 > " + (tmp.path / "log").string() +
                             " 2>&1 & pid=$!; i=0; while [ ! -f " + (out / "001_relu" / "task.yaml").string() +
                             " ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; sleep 1; /bin/kill -KILL -- -$pid; wait";
  REQUIRE(std::system(("sh -c '" + script + "'").c_str()) == 0);
  CAPTURE(leap::test::read_file((tmp.path / "log").string()));
  REQUIRE(fs::exists(out / "001_relu" / "task.yaml"));
  CHECK_FALSE(fs::exists(out / "003_tanh"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto written = fs::last_write_time(out / "001_relu" / "task.yaml");
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() + " --timeout 3");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "kept  1_Relu.py -> 001_relu"));
  CHECK(has(r.out, "1 problems imported, 1 kept from before, 1 skipped"));
  CHECK(fs::last_write_time(out / "001_relu" / "task.yaml") == written);
  CHECK(has(leap::test::read_file((out / "skipped.yaml").string()), "took longer than --timeout 3 s"));
  REQUIRE(fs::exists(out / "003_tanh" / "task.yaml"));
  // A third run does no work; --force redoes.
  auto again = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() + " --timeout 3");
  CAPTURE(again.out);
  CHECK(has(again.out, "0 problems imported, 2 kept from before, 1 skipped"));
  CHECK(has(again.out, "kept  2_Sleeps.py: skipped before"));
  auto forced = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                         " --timeout 3 --force");
  CAPTURE(forced.out);
  CHECK(has(forced.out, "2 problems imported, 0 kept from before, 1 skipped"));
}

TEST_CASE("kernelbench import: a crash is tried again by the next run, other skips are kept") {
  // 1_Flaky crashes its process (SIGSEGV) the first time it is imported and runs the second time:
  // a crash says nothing certain about the problem, so the next run tries it again. 2_Sleeps'
  // timeout is the problem's own measure under the same settings: kept.
  leap::test::TempDir tmp;
  const std::string mark = (tmp.path / "crashed-once").string();
  tmp.write("kb/1_Flaky.py", problem("", "return torch.relu(x)",
                                     "import os, signal\nif not os.path.exists('" + mark + "'):\n    open('" + mark +
                                         "', 'w').close()\n    os.kill(os.getpid(), signal.SIGSEGV)\nbatch = 16\ndim = 64",
                                     "[torch.randn(batch, dim)]"));
  tmp.write("kb/2_Sleeps.py",
            problem("", "import time; time.sleep(60); return x", "batch = 16\ndim = 64", "[torch.randn(batch, dim)]"));
  tmp.write("kb/3_Relu.py", kRelu);
  const fs::path out = tmp.path / "out";
  const std::string cmd = "tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() + " --timeout 3";
  auto first = run_leap(cmd);
  CAPTURE(first.out);
  CAPTURE(first.err);
  REQUIRE(first.rc == 0);
  CHECK(has(leap::test::read_file((out / "skipped.yaml").string()), "crashed with signal SIGSEGV"));
  CHECK(has(first.out, "1 problems imported, 0 kept from before, 2 skipped"));
  auto second = run_leap(cmd);
  CAPTURE(second.out);
  REQUIRE(second.rc == 0);
  CHECK(has(second.out, "kept  2_Sleeps.py: skipped before"));
  CHECK(has(second.out, "1 problems imported, 1 kept from before, 1 skipped"));
  REQUIRE(fs::exists(out / "001_flaky" / "task.yaml"));
  CHECK_FALSE(has(leap::test::read_file((out / "skipped.yaml").string()), "1_Flaky.py"));
  auto third = run_leap(cmd);
  CAPTURE(third.out);
  CHECK(has(third.out, "0 problems imported, 2 kept from before, 1 skipped"));
}

TEST_CASE("kernelbench import: references at the cpu sizes agree with eager PyTorch at the same sizes") {
  // Problems of the kinds KernelBench has: a matmul, a linear layer, a conv with training-mode batch
  // norm (batch statistics), a reduction; LEAP_KB_TASKS / LEAP_KB_SRC (an imported set and its
  // checkout) run the same comparison over a real import (docs/kernelbench.md).
  leap::test::TempDir tmp;
  fs::path tasks_dir, kb;
  const char* env_tasks = std::getenv("LEAP_KB_TASKS");
  const char* env_src = std::getenv("LEAP_KB_SRC");
  if (env_tasks && env_src) {
    tasks_dir = env_tasks;
    kb = env_src;
  } else {
    kb = tmp.path / "kb";
    tmp.write("kb/1_Matmul.py",
              "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n"
              "M = 1024\nK = 4096\nN = 2048\ndef get_inputs():\n    return [torch.rand(M, K), torch.rand(K, N)]\n"
              "def get_init_inputs():\n    return []\n");
    tmp.write("kb/2_LinearGelu.py",
              problem("        self.fc = nn.Linear(*a)\n", "return torch.nn.functional.gelu(self.fc(x))",
                      "batch = 256\nin_features = 2048\nout_features = 4096", "[torch.randn(batch, in_features)]",
                      "[in_features, out_features]"));
    tmp.write("kb/3_ConvBatchNorm.py",
              problem("        self.conv = nn.Conv2d(a[0], a[1], 3, padding=1)\n        self.bn = nn.BatchNorm2d(a[1])\n",
                      "return torch.relu(self.bn(self.conv(x)))",
                      "batch_size = 32\nin_channels = 16\nout_channels = 64\nheight = 128\nwidth = 96",
                      "[torch.randn(batch_size, in_channels, height, width)]", "[in_channels, out_channels]"));
    tmp.write("kb/4_RowLogSumExp.py", problem("", "return torch.logsumexp(x, dim=1)", "batch_size = 4096\ndim = 16384",
                                              "[torch.randn(batch_size, dim)]"));
    tasks_dir = tmp.path / "out";
    auto r = run_leap("tasks import kernelbench " + kb.string() + " --out " + tasks_dir.string() + " --timeout 200");
    CAPTURE(r.out);
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "4 problems imported"));
  }
  auto set = leap::tasks::load_task_set(tasks_dir.string());
  std::vector<const leap::tasks::TaskSpec*> sample;
  const size_t every = std::max<size_t>(1, set.tasks.size() / 40);  // about 40 of a real import
  for (size_t i = 0; i < set.tasks.size(); i += every) sample.push_back(&set.tasks[i]);
  std::string cmd = python() + " " + (fs::path(LEAP_SOURCE_DIR) / "tools" / "kernelbench_eager.py").string() + " " +
                    kb.string() + " " + (tmp.path / "eager").string();
  for (const auto* t : sample) cmd += " " + t->dir;
  REQUIRE(std::system((cmd + " > " + (tmp.path / "eager.log").string() + " 2>&1").c_str()) == 0);
  const std::string log = leap::test::read_file((tmp.path / "eager.log").string());
  CAPTURE(log);
  int compared = 0;
  for (const auto* t : sample) {
    CAPTURE(t->name);
    const fs::path d = tmp.path / "eager" / t->name;
    if (!fs::exists(d / "shapes.txt")) {
      FAIL_CHECK("no eager outputs for " << t->name);
      continue;
    }
    leap::env::RuntimeTask rt(*t, "cpu");
    // Fixed values (seeded or files) as leap makes them; the random inputs as get_inputs() made them.
    std::vector<torch::Tensor> ins = leap::env::make_inputs(rt, 1, 0);
    for (size_t i = 0; i < t->inputs.size(); ++i) {
      if (t->inputs[i].init.kind == leap::tasks::InitSpec::Kind::file || t->inputs[i].init.seed) continue;
      const auto bytes = read_bytes(d / ("in" + std::to_string(i) + ".bin"));
      REQUIRE(bytes.size() == static_cast<size_t>(ins[i].numel() * ins[i].element_size()));
      std::memcpy(ins[i].data_ptr(), bytes.data(), bytes.size());
    }
    std::vector<torch::Tensor> outs = rt.reference().run(rt, ins);
    for (size_t j = 0; j < outs.size(); ++j) {
      const auto bytes = read_bytes(d / ("out" + std::to_string(j) + ".bin"));
      torch::Tensor got = outs[j].to(outs[j].is_floating_point() ? torch::kDouble : outs[j].scalar_type()).contiguous();
      REQUIRE(bytes.size() == static_cast<size_t>(got.numel() * got.element_size()));
      torch::Tensor want = torch::empty_like(got);
      std::memcpy(want.data_ptr(), bytes.data(), bytes.size());
      CHECK(torch::allclose(got, want, 1e-4, 1e-4));
    }
    ++compared;
  }
  CHECK(compared == static_cast<int>(sample.size()));
  MESSAGE(compared << " references compared with eager PyTorch at the cpu sizes");
}

TEST_CASE("task format: `seed` gives fixed values drawn by LibTorch's generator, the same on every seed") {
  leap::test::TempDir tmp;
  const std::string head = "name: s\nsizes: {N: 64}\ninputs:\n  x: {dtype: float32, shape: [N]}\n";
  const std::string tail = "outputs:\n  y: {dtype: float32, shape: [N]}\nreference:\n  torchscript: |\n"
                           "    def reference(x: Tensor, w: Tensor) -> Tensor:\n        return x * w\n";
  tmp.write("t/task.yaml", head + "  w: {dtype: float32, shape: [N], init: {uniform: {low: -0.5, high: 0.5}, seed: 7}}\n" + tail);
  auto spec = leap::tasks::load_task((tmp.path / "t").string());
  REQUIRE(spec.inputs[1].init.seed == 7u);
  CHECK(spec.inputs[1].init.strict);
  leap::env::RuntimeTask rt(spec, "cpu");
  auto a = leap::env::make_inputs(rt, 1, 0), b = leap::env::make_inputs(rt, 2, 3);
  CHECK(torch::equal(a[1], b[1]));
  CHECK_FALSE(torch::equal(a[0], b[0]));
  auto g = at::detail::createCPUGenerator(7);  // what torch.empty(64).uniform_(-0.5, 0.5, generator=Generator().manual_seed(7)) gives
  CHECK(torch::equal(a[1], torch::empty({64}).uniform_(-0.5, 0.5, g)));
  CHECK(a[1].min().item<float>() >= -0.5f);
  CHECK(a[1].max().item<float>() < 0.5f);
  tmp.write("t/task.yaml", head + "  w: {dtype: float32, shape: [N], init: {randint: {low: 0, high: 4}, seed: 7}}\n" + tail);
  CHECK_THROWS_WITH(leap::tasks::load_task((tmp.path / "t").string()), doctest::Contains("needs a normal or uniform"));
  tmp.write("t/task.yaml", head + "  w: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}, seed: -3}}\n" + tail);
  CHECK_THROWS_WITH(leap::tasks::load_task((tmp.path / "t").string()), doctest::Contains("init.seed: expected a non-negative integer"));
}

TEST_CASE("kernelbench import: tuple-unpacked size symbols, randint bounds in symbols, devices that follow the inputs, "
          "coincidental symbol names") {
  leap::test::TempDir tmp;
  const std::string head = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                           "        super().__init__()\n\n";
  // Classes in a tuple-unpacked assignment; the targets' bound is the class count.
  tmp.write("kb/1_CrossEntropy.py",
            head + "    def forward(self, predictions, targets):\n"
                   "        return torch.nn.functional.cross_entropy(predictions, targets)\n\n"
                   "batch_size, num_classes = 4096, 1000\n\n"
                   "def get_inputs():\n    return [torch.randn(batch_size, num_classes), "
                   "torch.randint(0, num_classes, (batch_size,))]\n\ndef get_init_inputs():\n    return []\n");
  // 1 GiB of input, over a 1.5 GiB budget: scaled through the tuple-unpacked symbols alone
  // (version 3 skipped it: no smaller values of its symbols).
  tmp.write("kb/2_TupleScale.py", head + "    def forward(self, x):\n        return torch.tanh(x) * 2\n\n"
                                         "batch, height, width = 64, 4096, 1024\n\n"
                                         "def get_inputs():\n    return [torch.randn(batch, height, width)]\n\n"
                                         "def get_init_inputs():\n    return []\n");
  // Tensors made in forward: a CPU trace writes their device as a constant.
  tmp.write("kb/3_ZerosArange.py",
            head + "    def forward(self, x):\n        h = torch.zeros(x.shape[0], x.shape[1], device=x.device)\n"
                   "        return x * 3 + h + torch.arange(x.shape[1])\n\nbatch = 64\nfeatures = 32\n\n"
                   "def get_inputs():\n    return [torch.randn(batch, features)]\n\ndef get_init_inputs():\n    return []\n");
  // A pooled length of 512 that equals the channel count: named by a symbol only by coincidence.
  tmp.write("kb/4_PoolCoincide.py", head + "    def forward(self, x):\n        return torch.nn.functional.avg_pool1d(x, 2)\n\n"
                                           "batch = 64\nchannels = 512\nlength = 1024\n\n"
                                           "def get_inputs():\n    return [torch.randn(batch, channels, length)]\n\n"
                                           "def get_init_inputs():\n    return []\n");
  const fs::path out = tmp.path / "out";
  const std::string cmd =
      "tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() + " --memory-gb 1.5 --cpu-ms 2 --timeout 120";
  auto r = run_leap(cmd);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "4 problems imported"));
  auto set = leap::tasks::load_task_set(out.string());

  const auto* ce = set.find("001_cross_entropy");
  REQUIRE(ce);
  CHECK(ce->sizes == std::vector<std::pair<std::string, int64_t>>{{"batch_size", 4096}, {"num_classes", 1000}});
  REQUIRE(ce->inputs.size() == 2);
  CHECK(ce->inputs[1].init.kind == leap::tasks::InitSpec::Kind::randint);
  CHECK(ce->inputs[1].init.a == "0");
  CHECK(ce->inputs[1].init.b == "num_classes");
  leap::env::RuntimeTask ce_cpu(*ce, "cpu");
  const int64_t classes = ce_cpu.input_shapes()[0][1];
  CHECK(classes < 1000);
  CHECK(classes >= 8);
  for (int s = 0; s < 3; ++s) {  // every target is a valid class at the cpu sizes; the loss as LibTorch computes it
    auto ins = leap::env::make_inputs(ce_cpu, 11 + s, s);
    CHECK(ins[1].max().item<int64_t>() < classes);
    CHECK(ins[1].max().item<int64_t>() >= classes / 2);  // the bound is the class count, not a smaller literal
    auto outs = ce_cpu.reference().run(ce_cpu, ins);
    CHECK(torch::allclose(outs[0], torch::nn::functional::cross_entropy(ins[0], ins[1]), 1e-5, 1e-6));
  }

  const auto* ts = set.find("002_tuple_scale");
  REQUIRE(ts);
  CHECK(ts->sizes == std::vector<std::pair<std::string, int64_t>>{{"batch", 64}, {"height", 4096}, {"width", 1024}});
  CHECK(ts->inputs[0].shape == std::vector<std::string>{"batch", "height", "width"});
  CHECK(ts->source.at("traced_at").rfind("scaled", 0) == 0);
  leap::env::RuntimeTask ts_full(*ts, "cuda");
  CHECK(ts_full.output_shapes()[0] == std::vector<int64_t>{64, 4096, 1024});
  leap::env::RuntimeTask ts_cpu(*ts, "cpu");
  const auto cs = ts_cpu.input_shapes()[0];
  CHECK(cs[0] >= 2);
  CHECK(cs[1] >= 2);
  CHECK(cs[2] >= 2);
  CHECK(cs[1] < 4096);
  CHECK(cs[2] < 1024);
  auto tin = leap::env::make_inputs(ts_cpu, 3, 0);
  CHECK(torch::allclose(ts_cpu.reference().run(ts_cpu, tin)[0], torch::tanh(tin[0]) * 2, 1e-6, 1e-6));

  const auto* za = set.find("003_zeros_arange");
  REQUIRE(za);
  leap::env::RuntimeTask za_cpu(*za, "cpu");
  CHECK(za_cpu.reference().baked_devices().empty());  // the trace's 'cpu' constants follow x
  CHECK(has(za->source.at("devices"), "2 device constant(s)"));
  auto zin = leap::env::make_inputs(za_cpu, 4, 0);
  CHECK(torch::allclose(za_cpu.reference().run(za_cpu, zin)[0], zin[0] * 3 + torch::arange(32).to(torch::kFloat), 1e-6, 1e-6));

  const auto* pc = set.find("004_pool_coincide");
  REQUIRE(pc);
  CHECK(pc->outputs[0].shape[1] == "channels");
  CHECK(pc->outputs[0].shape[2] != "channels");  // the pooled length follows `length`, not the channels
  leap::env::RuntimeTask pc_cpu(*pc, "cpu");
  const auto ps = pc_cpu.input_shapes()[0];
  CHECK(ps[2] < 1024);
  CHECK(pc_cpu.output_shapes()[0] == std::vector<int64_t>{ps[0], ps[1], ps[2] / 2});
  auto pin = leap::env::make_inputs(pc_cpu, 6, 0);
  CHECK(torch::allclose(pc_cpu.reference().run(pc_cpu, pin)[0], torch::avg_pool1d(pin[0], {2}), 1e-6, 1e-6));

  auto v = run_leap("tasks validate " + out.string());
  CAPTURE(v.out);
  CHECK(has(v.out, "4 tasks: 0 with problems, 0 weak"));

  // Resume across importer versions: a version-3 record that no later change affects is kept, one
  // with a randint input (its bounds changed in version 4) is redone.
  for (const char* t : {"001_cross_entropy", "003_zeros_arange"}) {
    const fs::path y = out / t / "task.yaml";
    std::string text = leap::test::read_file(y.string());
    const size_t at = text.find("  importer: ");
    REQUIRE(at != std::string::npos);
    text.replace(at, text.find('\n', at) - at, "  importer: 3");
    std::ofstream(y) << text;
  }
  auto again = run_leap(cmd);
  CAPTURE(again.out);
  CHECK(has(again.out, "1 problems imported, 3 kept from before, 0 skipped"));
  CHECK(has(again.out, "kept  3_ZerosArange.py -> 003_zeros_arange"));
  CHECK(has(again.out, "ok    1_CrossEntropy.py -> 001_cross_entropy"));
  CHECK(has(leap::test::read_file((out / "003_zeros_arange" / "task.yaml").string()), "  importer: 3\n"));
  CHECK_FALSE(has(leap::test::read_file((out / "001_cross_entropy" / "task.yaml").string()), "  importer: 3\n"));
}

TEST_CASE("kernelbench import: a problem too large for the CPU checks at any size is imported for the GPU only, "
          "traced once (on the meta device or the CPU), and its reference agrees with eager LibTorch at full size") {
  leap::test::TempDir tmp;
  // Literal sizes (no size symbol to scale), over 60% of a 1.5 GiB budget for the eight checking
  // runs (with the interpreter's 0.6 GiB), so no task can have cpu sizes:
  // - a linear layer on x [16384, 16384] (1 GiB): over 90% of the budget for one CPU trace too,
  //   traced on the meta device;
  // - a convolution on x [32, 16, 224, 224] (98 MiB): one CPU trace fits, so it is traced there
  //   (convolution's meta kernel is Python: on meta tensors the tracer would record its shape code);
  // - the same convolution at [64, 16, 224, 224] with 32 output channels: too large for one CPU
  //   trace, and not traceable on meta: skipped with the reason.
  auto conv = [](const std::string& in, int out_ch) {
    return "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.conv = nn.Conv2d(16, " + std::to_string(out_ch) + ", 3)\n"
           "    def forward(self, x):\n        return torch.relu(self.conv(x))\n"
           "def get_inputs():\n    return [torch.rand(" + in + ")]\ndef get_init_inputs():\n    return []\n";
  };
  tmp.write("kb/1_WideLinear.py",
            "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.fc = nn.Linear(16384, 24)\n"
            "    def forward(self, x):\n        return torch.tanh(self.fc(x)) * 2.0\n"
            "def get_inputs():\n    return [torch.rand(16384, 16384)]\ndef get_init_inputs():\n    return []\n");
  tmp.write("kb/2_WideConv.py", conv("32, 16, 224, 224", 8));
  tmp.write("kb/3_HugeConv.py", conv("64, 16, 224, 224", 32));
  tmp.write("kb/4_Relu.py", kRelu);
  const fs::path out = tmp.path / "out";
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                    " --memory-gb 1.5 --timeout 120");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "3 problems imported"));
  const std::string skipped = leap::test::read_file((out / "skipped.yaml").string());
  CAPTURE(skipped);
  CHECK(has(skipped, "3_HugeConv.py"));
  CHECK(has(skipped, "is traced as its shape code (aten::new_empty"));
  auto set = leap::tasks::load_task_set(out.string());
  const auto* lin = set.find("001_wide_linear");
  const auto* cnv = set.find("002_wide_conv");
  REQUIRE(lin);
  REQUIRE(cnv);
  CHECK_FALSE(set.find("003_huge_conv"));
  CHECK(lin->source.at("traced_at") == "kernelbench (meta device)");
  CHECK(cnv->source.at("traced_at") == "kernelbench");
  for (const auto* t : {lin, cnv}) {
    CAPTURE(t->name);
    CHECK(has(t->source.at("cpu_sizes"), "for the GPU only"));
    CHECK_FALSE(t->runs_on("cpu"));
    CHECK(t->runs_on("cuda"));
  }
  CHECK(set.find("004_relu")->runs_on("cpu"));
  // The cpu backend refuses it, naming the file and why; --full-size (allow_full_size) runs it.
  try {
    leap::env::RuntimeTask refused(*lin, "cpu");
    FAIL("a task without cpu sizes was accepted by the cpu backend");
  } catch (const std::exception& e) {
    CHECK(has(e.what(), lin->file));
    CHECK(has(e.what(), "no cpu sizes"));
    CHECK(has(e.what(), "--full-size"));
  }
  for (const auto* t : {lin, cnv}) {
    CAPTURE(t->name);
    leap::tasks::TaskSpec full = *t;
    full.allow_full_size("cpu");
    leap::env::RuntimeTask rt(full, "cpu");
    REQUIRE(rt.input_shapes().size() == 3);  // x, then the weight and the bias the trace reads
    auto ins = leap::env::make_inputs(rt, 3, 0);
    auto outs = rt.reference().run(rt, ins);
    if (t == lin) {
      CHECK(rt.output_shapes()[0] == std::vector<int64_t>{16384, 24});
      CHECK(torch::allclose(outs[0], torch::tanh(torch::linear(ins[0], ins[1], ins[2])) * 2.0, 1e-5, 1e-5));
      CHECK(ins[1].abs().max().item<double>() <= 1.0 / std::sqrt(16384.0) + 1e-6);  // kaiming-uniform bound
    } else {
      CHECK(rt.output_shapes()[0] == std::vector<int64_t>{32, 8, 222, 222});
      CHECK(torch::allclose(outs[0], torch::relu(torch::conv2d(ins[0], ins[1], ins[2])), 1e-5, 1e-5));
    }
  }
  // `leap tasks list` counts what each backend runs; `leap tasks validate` leaves them out on the CPU.
  auto l = run_leap("tasks list " + out.string());
  CAPTURE(l.out);
  CHECK(has(l.out, "the cpu backend runs 1, the cuda backend 3"));
  CHECK(has(l.out, "none (GPU only)"));
  auto v = run_leap("tasks validate " + out.string());
  CAPTURE(v.out);
  CHECK(has(v.out, "2 tasks for the GPU only not run"));
  CHECK(v.rc == 0);
}

TEST_CASE("kernelbench import: the seeded values are checked by their SHA-256 against LibTorch's draw, a mismatch "
          "fails naming the input, a match removes the digests") {
  leap::test::TempDir tmp;
  tmp.write("kb/1_LinearTanh.py",
            problem("        self.fc = nn.Linear(*a)\n", "return torch.tanh(self.fc(x))",
                    "batch = 8\nin_features = 64\nout_features = 32", "[torch.randn(batch, in_features)]",
                    "[in_features, out_features]"));
  const fs::path kb = tmp.path / "kb", out = tmp.path / "out";
  // The Python tool alone leaves the digests for `leap tasks import` to compare.
  const std::string tool = python() + " " + (fs::path(LEAP_SOURCE_DIR) / "tools" / "kernelbench_import.py").string() +
                           " " + kb.string() + " --out " + out.string() + " --timeout 120 > " +
                           (tmp.path / "tool.log").string() + " 2>&1";
  REQUIRE(std::system(tool.c_str()) == 0);
  const fs::path digest = out / "001_linear_tanh" / "weights" / ".check" / "fc_weight.sha256";
  REQUIRE(fs::exists(digest));
  const std::string good = leap::test::read_file(digest.string());
  CHECK(good.size() == 65);  // 64 hex digits and a newline: no values are stored
  std::ofstream(digest) << std::string(64, '0') << "\n";
  auto bad = run_leap("tasks import kernelbench " + kb.string() + " --out " + out.string() + " --timeout 120");
  CAPTURE(bad.out);
  CAPTURE(bad.err);
  CHECK(bad.rc != 0);
  CHECK(has(bad.err, "does not reproduce"));
  CHECK(has(bad.err, "001_linear_tanh.fc_weight"));
  CHECK(fs::exists(digest));
  std::ofstream(digest) << good;
  auto ok = run_leap("tasks import kernelbench " + kb.string() + " --out " + out.string() + " --timeout 120");
  CAPTURE(ok.out);
  CHECK(ok.rc == 0);
  CHECK(has(ok.out, "LibTorch reproduces the import's values exactly"));
  CHECK_FALSE(fs::exists(out / "001_linear_tanh" / "weights" / ".check"));
}

TEST_CASE("kernelbench import: a trace that bakes in one size still gets cpu sizes from the others") {
  // KernelBench's l1_086 (depthwise-separable conv): the trace keeps `groups=in_channels` as a
  // constant, so it fails wherever the size search halves in_channels. The search used to stop
  // there and leave the task at KernelBench's sizes on the cpu (l1_086 was then killed at the
  // 11.8 GiB budget); it now searches again with that size held. in_channels is the largest
  // symbol here, so it is the first one halved.
  leap::test::TempDir tmp;
  tmp.write("kb/1_DepthwiseSeparable.py",
            problem("        self.dw = nn.Conv2d(a[0], a[0], 3, padding=1, groups=a[0], bias=False)\n"
                    "        self.pw = nn.Conv2d(a[0], a[1], 1, bias=False)\n",
                    "return self.pw(self.dw(x))",
                    "batch_size = 8\nin_channels = 128\nout_channels = 16\nheight = 40\nwidth = 40",
                    "[torch.rand(batch_size, in_channels, height, width)]", "[in_channels, out_channels]"));
  const fs::path out = tmp.path / "out";
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                    " --cpu-ms 1 --timeout 120");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "1 problems imported"));
  auto set = leap::tasks::load_task_set(out.string());
  REQUIRE(set.tasks.size() == 1);
  const auto& t = set.tasks[0];
  REQUIRE(t.size_overrides.count("cpu"));
  CAPTURE(t.source.count("cpu_sizes") ? t.source.at("cpu_sizes") : std::string());
  CHECK(t.size_overrides.at("cpu").count("in_channels") == 0);  // held at 128
  CHECK_FALSE(t.size_overrides.at("cpu").empty());
  leap::env::RuntimeTask cpu(t, "cpu");
  const auto& cs = cpu.input_shapes()[0];
  REQUIRE(cs.size() == 4);
  CHECK(cs[1] == 128);
  CHECK(cs[0] * cs[2] * cs[3] < 8 * 40 * 40);
  // The reference at the cpu sizes runs (groups = 128 = in_channels there too).
  auto ins = leap::env::make_inputs(cpu, 5, 0);
  auto outs = cpu.reference().run(cpu, ins);
  CHECK(outs[0].sizes().vec() == cpu.output_shapes()[0]);
  CHECK(outs[0].size(2) == cs[2]);
}
