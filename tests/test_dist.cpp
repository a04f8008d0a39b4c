// Data-parallel training with c10d's Gloo process group, on this CPU machine: two processes
// started here with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. (a) the update of two ranks
// equals one process's update on the same global batch; (b) a two-rank `leap train` stores every
// rollout exactly once in one run; (c) a rank that dies or hangs makes the other exit non-zero
// within the collective timeout.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "dist/process_group.hpp"
#include "model/transformer.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;
using Clock = std::chrono::steady_clock;

TEST_SUITE_BEGIN("dist");

namespace {

using test::tiny_model;

/// A TCP port nobody listens on right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

/// Starts `argv` with `env` added to this process's environment, output to `log`.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                          "TORCHELASTIC_USE_AGENT_STORE"})
      unsetenv(k);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    FILE* f = freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(STDOUT_FILENO, STDERR_FILENO);
    leap::test::exec_in_source_dir(argv);
  }
  return pid;
}

/// Waits for `pid` up to `limit_s` (then kills it and returns -1); the exit code otherwise.
int wait_for(pid_t pid, double limit_s) {
  const auto t0 = Clock::now();
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::map<std::string, std::string> rank_env(int rank, int port) {
  return {{"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
}

std::string worker() { return (fs::path(test::leap_binary()).parent_path() / "leap_dist_update_worker").string(); }

std::vector<at::Tensor> load_params(const std::string& path) {
  std::vector<at::Tensor> v;
  torch::load(v, path);
  return v;
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

/// Starts `leap ARGS` (whitespace-separated) as ranks 0 and 1 of a fresh rendezvous; rank r's
/// output goes to `dir/<tag><r>.log` (see log_of).
std::vector<pid_t> launch_ranks(const std::string& args, const fs::path& dir, const std::string& tag) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv{test::leap_binary()};
    std::istringstream in(args);
    for (std::string a; in >> a;) argv.push_back(a);
    pids.push_back(spawn(argv, rank_env(rank, port), (dir / (tag + std::to_string(rank) + ".log")).string()));
  }
  return pids;
}

/// What rank `rank` of launch_ranks(.., dir, tag) printed.
std::string log_of(const fs::path& dir, const std::string& tag, int rank) {
  return test::read_file((dir / (tag + std::to_string(rank) + ".log")).string());
}

int64_t scalar(store::Store& db, const std::string& sql) {
  auto st = db.db().prepare(sql);
  REQUIRE(st.step());
  return st.column_int64(0);
}

}  // namespace

TEST_CASE("dist: rendezvous reads the launcher's variables and names a bad one") {
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(k);
  CHECK(dist::rendezvous_from_env().world_size == 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("LOCAL_RANK", "1", 1);
  const auto r = dist::rendezvous_from_env();
  CHECK(r.rank == 1);
  CHECK(r.local_rank == 1);
  CHECK(r.master_addr == "10.0.0.1");
  CHECK(r.master_port == 29500);
  setenv("RANK", "2", 1);
  CHECK_THROWS_WITH_AS(dist::rendezvous_from_env(), doctest::Contains("RANK=2"), ConfigError);
  setenv("RANK", "0", 1);
  unsetenv("MASTER_PORT");
  CHECK_THROWS_WITH_AS(dist::rendezvous_from_env(), doctest::Contains("MASTER_PORT"), ConfigError);
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(k);
  CHECK(dist::resolve_backend("gloo", false) == "gloo");
  CHECK(dist::resolve_backend("gloo", true) == "gloo");
  CHECK(dist::resolve_backend("auto", false) == "gloo");  // no GPU: gloo
  // nccl without a GPU is a clean config error naming the key
  CHECK_THROWS_WITH_AS(dist::resolve_backend("nccl", false), doctest::Contains("dist.backend"), ConfigError);
  CHECK_THROWS_WITH_AS(dist::resolve_backend("mpi", true), doctest::Contains("dist.backend"), ConfigError);
  if (dist::nccl_available()) {
    CHECK(dist::resolve_backend("auto", true) == "nccl");
    CHECK(dist::resolve_backend("nccl", true) == "nccl");
  } else {
    CHECK(dist::resolve_backend("auto", true) == "gloo");
    CHECK_THROWS_WITH_AS(dist::resolve_backend("nccl", true), doctest::Contains("dist.backend"), ConfigError);
  }
}

namespace {

/// A one-process group of `backend` on a free local port: all-reduce (sum, max), broadcast,
/// all-gather of bytes and barrier, on tensors of `device`; every result is the input itself.
void one_process_collectives(const std::string& backend, const torch::Device& device) {
  dist::Rendezvous r;
  r.master_addr = "127.0.0.1";
  r.master_port = free_port();
  auto pg = dist::ProcessGroup::create(r, backend, 30.0);
  CHECK(pg->world_size() == 1);
  CHECK(pg->backend() == backend);
  auto t = torch::arange(6, torch::TensorOptions().dtype(torch::kFloat32).device(device)).view({2, 3});
  const auto before = t.clone();
  pg->all_reduce_sum(t);
  CHECK(torch::equal(t.cpu(), before.cpu()));
  pg->all_reduce_max(t);
  CHECK(torch::equal(t.cpu(), before.cpu()));
  pg->broadcast(t, 0);
  CHECK(torch::equal(t.cpu(), before.cpu()));
  CHECK(t.device() == device);
  CHECK(pg->all_reduce_sum(std::vector<double>{1.5, -2.0}) == std::vector<double>{1.5, -2.0});
  CHECK(pg->broadcast_bytes("leap", 0) == "leap");
  CHECK(pg->all_gather_bytes("abc") == std::vector<std::string>{"abc"});
  pg->barrier();
}

}  // namespace

TEST_CASE("dist: a one-process gloo group runs every collective (world size 1, a smoke test)") {
  if (!dist::gloo_available()) {
    MESSAGE("LEAP-SKIP: built without Gloo headers (libgloo-dev)");
    return;
  }
  one_process_collectives("gloo", torch::kCPU);
}

TEST_CASE("dist cuda: a one-process NCCL group runs every collective on the GPU (world size 1)") {
  if (!dist::nccl_available() || !torch::cuda::is_available()) {
    MESSAGE("LEAP-SKIP: needs a build with NCCL and a GPU (nccl: " << dist::nccl_available() << ", GPU: "
            << torch::cuda::is_available() << ")");
    return;
  }
  one_process_collectives("nccl", torch::Device(torch::kCUDA, 0));
}

TEST_CASE("dist: two ranks' updates equal one process's on the same global batch (fp32, 1e-5)") {
  if (!dist::gloo_available()) {
    MESSAGE("LEAP-SKIP: built without Gloo headers (libgloo-dev)");
    return;
  }
  const fs::path& root = tiny_model();
  test::TempDir dir;
  const std::string model = (root / "tiny").string();
  // token_mean with uneven shares (4 / 3 samples), segment_mean with rank 1 holding none and with
  // one segment split across the ranks (3 / 4 samples).
  for (const auto& [agg, split] : std::vector<std::pair<std::string, std::string>>{
           {"token_mean", "4"}, {"segment_mean", "7"}, {"segment_mean", "3"}}) {
    CAPTURE(agg);
    CAPTURE(split);
    const std::string one = (dir.path / (agg + split + "-one.pt")).string();
    const pid_t p1 = spawn({worker(), model, one, agg, split, "ok", "60"}, {}, one + ".log");
    REQUIRE_MESSAGE(wait_for(p1, 120) == 0, test::read_file(one + ".log"));
    const int port = free_port();
    std::vector<std::string> outs;
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      outs.push_back((dir.path / (agg + split + "-rank" + std::to_string(rank) + ".pt")).string());
      pids.push_back(spawn({worker(), model, outs.back(), agg, split, "ok", "60"}, rank_env(rank, port),
                           outs.back() + ".log"));
    }
    for (int rank = 0; rank < 2; ++rank)
      REQUIRE_MESSAGE(wait_for(pids[static_cast<size_t>(rank)], 120) == 0, test::read_file(outs[static_cast<size_t>(rank)] + ".log"));
    const auto single = load_params(one), r0 = load_params(outs[0]), r1 = load_params(outs[1]);
    // The update moved the weights (so equality below means something) ...
    auto base = model::load_transformer(model, torch::kFloat32, torch::kCPU);
    std::vector<at::Tensor> initial;
    for (auto& p : base->parameters())
      if (p.requires_grad()) initial.push_back(p.detach());
    CHECK(max_abs_diff(single, initial) > 1e-4);
    // ... identically on both ranks and as in one process.
    CHECK(max_abs_diff(r0, r1) == 0.0);
    CHECK(max_abs_diff(r0, single) <= 1e-5);
  }
}

TEST_CASE("dist: a rank that dies or hangs makes the other exit non-zero within the timeout") {
  if (!dist::gloo_available()) {
    MESSAGE("LEAP-SKIP: built without Gloo headers (libgloo-dev)");
    return;
  }
  const fs::path& root = tiny_model();
  test::TempDir dir;
  for (const std::string mode : {"die", "hang"}) {
    CAPTURE(mode);
    const int port = free_port();
    const std::string log0 = (dir.path / (mode + "0.log")).string(), log1 = (dir.path / (mode + "1.log")).string();
    const auto t0 = Clock::now();
    const pid_t p0 = spawn({worker(), (root / "tiny").string(), (dir.path / "x.pt").string(), "token_mean", "4", mode, "5"},
                           rank_env(0, port), log0);
    const pid_t p1 = spawn({worker(), (root / "tiny").string(), (dir.path / "y.pt").string(), "token_mean", "4", mode, "5"},
                           rank_env(1, port), log1);
    const int rc0 = wait_for(p0, 60);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    kill(p1, SIGKILL);
    wait_for(p1, 10);
    const std::string out = test::read_file(log0);
    CAPTURE(out);
    CHECK(rc0 > 0);  // exited by itself (-1 would mean it had to be killed) with an error
    CHECK(took < 40);  // 5 s timeout plus process start-up
    CHECK(out.find("dist: rank 0 of 2") != std::string::npos);
  }
}

TEST_CASE("dist: leap train on two ranks writes one run with every rollout exactly once") {
  if (!dist::gloo_available()) {
    MESSAGE("LEAP-SKIP: built without Gloo headers (libgloo-dev)");
    return;
  }
  const fs::path& root = tiny_model();
  test::TempDir dir;
  const std::string db = (dir.path / "leap.db").string();
  const std::string args = "train configs/quickstart.yaml --db " + db + " --results-dir " +
                           (dir.path / "results").string() + " --set model.path=" + (root / "tiny").string() +
                           " --set train.steps=2 --set train.sft.enabled=false --set train.eval_every=0"
                           " --set rollout.tasks_per_step=3 --set rollout.group_size=2 --set rollout.max_new_tokens=8"
                           " --set turns.max=2 --set dcp.enabled=false --set dist.backend=gloo --set dist.timeout_s=120"
                           " --set logging.progress=false --set model.cpu_threads=1";  // two ranks share the cores
  const auto pids = launch_ranks(args, dir.path, "train");
  for (int rank = 0; rank < 2; ++rank)
    REQUIRE_MESSAGE(wait_for(pids[static_cast<size_t>(rank)], 300) == 0, log_of(dir.path, "train", rank));
  store::Store s(db);
  CHECK(scalar(s, "SELECT COUNT(*) FROM runs") == 1);
  CHECK(scalar(s, "SELECT COUNT(*) FROM runs WHERE status = 'finished'") == 1);
  CHECK(scalar(s, "SELECT COUNT(*) FROM steps") == 2);
  // 3 groups per step (rank 0 rolls out 1, rank 1 rolls out 2), each of 2 rollouts, each once.
  CHECK(scalar(s, "SELECT COUNT(*) FROM groups") == 6);
  CHECK(scalar(s, "SELECT COUNT(DISTINCT step || '/' || group_index) FROM groups") == 6);
  CHECK(scalar(s, "SELECT MAX(group_index) FROM groups") == 2);
  CHECK(scalar(s, "SELECT COUNT(*) FROM rollouts") == 12);
  CHECK(scalar(s, "SELECT COUNT(*) FROM rollouts r JOIN turns t ON t.rollout_id = r.id WHERE t.turn_index = 1") == 12);
  // The ranks' seeds are recorded, and rank 0 wrote the checkpoint.
  CHECK(scalar(s, "SELECT COUNT(*) FROM events WHERE kind = 'dist' AND message LIKE '%rank 1 %seed%'") == 1);
  CHECK(scalar(s, "SELECT COUNT(*) FROM checkpoints") == 1);
  // Where the run computed (issue 8 item 5): the policy device and the GPU, or why there is none.
  CHECK(scalar(s, "SELECT COUNT(*) FROM events WHERE kind = 'device' AND message LIKE 'policy: cpu (1 threads)%' "
                  "AND message LIKE '%env: cpu backend%' AND message LIKE '%gpu%'") == 1);
}

TEST_CASE("dist: two ranks interrupted mid-run then --resume give every step and rollout exactly once") {
  if (!dist::gloo_available()) {
    MESSAGE("LEAP-SKIP: built without Gloo headers (libgloo-dev)");
    return;
  }
  const fs::path& root = tiny_model();
  test::TempDir dir;
  const std::string db = (dir.path / "leap.db").string();
  const fs::path results = dir.path / "results";
  const std::string common = "train configs/quickstart.yaml --db " + db + " --results-dir " + results.string() +
                             " --set dist.backend=gloo --set dist.timeout_s=120";
  const std::string fresh = common + " --set model.path=" + (root / "tiny").string() +
                            " --set train.steps=6 --set train.checkpoint_every=1 --set train.sft.enabled=false"
                            " --set train.eval_every=0 --set rollout.tasks_per_step=3 --set rollout.group_size=2"
                            " --set rollout.max_new_tokens=8 --set turns.max=1 --set logging.progress=false"
                            " --set model.cpu_threads=1";  // two ranks share the cores
  auto first_checkpoint = [&]() -> std::optional<std::string> {
    std::error_code ec;
    if (!fs::exists(results, ec)) return std::nullopt;
    for (const auto& run : fs::directory_iterator(results))
      if (fs::exists(run.path() / "checkpoints" / "step-1")) return run.path().filename().string();
    return std::nullopt;
  };

  // Interrupt rank 0 (SIGINT, as Ctrl-C) once step 1 is checkpointed; both ranks stop after the same step.
  auto pids = launch_ranks(fresh, dir.path, "a");
  std::optional<std::string> run_id;
  const auto t0 = Clock::now();
  while (!(run_id = first_checkpoint()) && std::chrono::duration<double>(Clock::now() - t0).count() < 300)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_MESSAGE(run_id.has_value(), log_of(dir.path, "a", 0));
  kill(pids[0], SIGINT);
  for (int rank = 0; rank < 2; ++rank) {
    const int rc = wait_for(pids[static_cast<size_t>(rank)], 300);
    CHECK_MESSAGE(rc > 0, log_of(dir.path, "a", rank));
  }
  int64_t done_before = 0;
  {
    store::Store s(db);
    CHECK(scalar(s, "SELECT COUNT(*) FROM runs WHERE status = 'interrupted'") == 1);
    // The interrupt's checkpoint is not written a second time when step k was just checkpointed.
    CHECK(scalar(s, "SELECT COUNT(*) - COUNT(DISTINCT step) FROM checkpoints") == 0);
    done_before = scalar(s, "SELECT COUNT(*) FROM steps");
  }
  REQUIRE_MESSAGE(done_before >= 1, "the run stopped before its first step");
  REQUIRE_MESSAGE(done_before < 6, "the run finished before the interrupt arrived; nothing to resume");

  pids = launch_ranks(common + " --resume " + *run_id, dir.path, "b");
  for (int rank = 0; rank < 2; ++rank)
    REQUIRE_MESSAGE(wait_for(pids[static_cast<size_t>(rank)], 300) == 0,
                    log_of(dir.path, "b", rank));
  store::Store s(db);
  CHECK(scalar(s, "SELECT COUNT(*) FROM runs") == 1);
  CHECK(scalar(s, "SELECT COUNT(*) FROM runs WHERE status = 'finished'") == 1);
  CHECK(scalar(s, "SELECT COUNT(*) FROM steps") == 6);
  CHECK(scalar(s, "SELECT COUNT(DISTINCT step) FROM steps") == 6);
  CHECK(scalar(s, "SELECT COUNT(*) FROM groups") == 18);
  CHECK(scalar(s, "SELECT COUNT(DISTINCT step || '/' || group_index) FROM groups") == 18);
  CHECK(scalar(s, "SELECT COUNT(*) FROM rollouts") == 36);
  CHECK(scalar(s, "SELECT COUNT(*) FROM events WHERE kind = 'resume'") == 1);
}
