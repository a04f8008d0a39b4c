// The worker IPC messages (env/worker_job.hpp): a job and a reply survive encoding whole, the
// snapshot list of a parent_snapshots job never reaches the worker, and a malformed reply throws.
#include <doctest/doctest.h>

#include <string>

#include "env/worker_job.hpp"

using namespace leap;

namespace {

env::BoundPlan two_tensor_plan() {
  env::BoundPlan plan;
  env::BoundTensor x;
  x.name = "x";
  x.dtype = env::DType::float32;
  x.shape = {4, 8};
  x.role = env::TensorRole::input;
  env::BoundTensor y = x;
  y.name = "y";
  y.role = env::TensorRole::output;
  plan.tensors = {x, y};
  env::BoundLaunch l;
  l.kernel = "k";
  l.grid = {2, 1, 1};
  l.block = {128, 1, 1};
  l.shared_bytes = 64;
  l.signature = "void k(const float*, float*, long)";
  env::BoundArg a;
  a.kind = env::ArgKind::tensor;
  a.tensor = 0;
  env::BoundArg n;
  n.kind = env::ArgKind::int64;
  n.i = 32;
  l.args = {a, n};
  plan.launches = {l, l};
  return plan;
}

}  // namespace

TEST_CASE("env worker job: the job and the reply survive encoding, withheld snapshots stay in the parent") {
  const env::BoundPlan plan = two_tensor_plan();
  env::Artifact art;
  art.backend = "cpu";
  art.path = "/cache/k.so";
  art.key = "abc";
  env::RunRequest req;
  req.warmup = 2;
  req.trials = 7;
  req.max_seconds = 0.5;
  req.rotations = {{0, 1}, {2, 3}};
  req.rewrite_seed = 0xDEADBEEFCAFEull;
  req.rewrite_inputs = {0};
  req.perturb_inputs = {0, 1};
  req.perturb_bounds = {env::UniformBounds{}, env::UniformBounds{-0.1, 0.7}};
  req.warmup_ms = 3;
  req.min_timed_ms = 4;
  req.profile_launches = true;
  req.snapshots = {{3, {{1, 4}}}, {5, {{1, 5}}}};
  req.worker_sample_slots = 3;
  req.worker_sample_first = 4;
  req.worker_sample_outputs = {1};
  const env::BufferLayout layout = env::BufferLayout::make({128, 128, 128, 128});

  const env::WorkerJob job = env::decode_job(env::encode_job(art, plan, req, layout));
  CHECK(job.artifact.path == art.path);
  CHECK(job.artifact.key == art.key);
  REQUIRE(job.plan.tensors.size() == 2);
  CHECK(job.plan.tensors[1].name == "y");
  CHECK(job.plan.tensors[1].shape == std::vector<int64_t>{4, 8});
  REQUIRE(job.plan.launches.size() == 2);
  CHECK(job.plan.launches[0].block[0] == 128);
  CHECK(job.plan.launches[0].args[1].i == 32);
  CHECK(job.request.warmup == 2);
  CHECK(job.request.trials == 7);
  CHECK(job.request.rotations == req.rotations);
  CHECK(job.request.rewrite_seed == req.rewrite_seed);
  CHECK(job.request.perturb_inputs == req.perturb_inputs);
  REQUIRE(job.request.perturb_bounds.size() == 2);
  CHECK(job.request.perturb_bounds_of(0) == nullptr);  // unbounded
  REQUIRE(job.request.perturb_bounds_of(1) != nullptr);
  CHECK(job.request.perturb_bounds_of(1)->low == -0.1);  // exact: JSON keeps a double
  CHECK(job.request.perturb_bounds_of(1)->high == 0.7);
  CHECK(job.request.profile_launches);
  CHECK(job.request.snapshots.size() == 2);
  CHECK(job.request.snapshots[1].run == 5);
  CHECK(job.request.worker_sample_slots == 3);
  CHECK(job.request.worker_sample_first == 4);
  CHECK(job.request.worker_sample_outputs == std::vector<int>{1});
  CHECK(job.total_bytes == layout.total_bytes);
  CHECK(job.offsets == layout.offsets);
  CHECK(job.guards == layout.guards);
  CHECK_FALSE(job.request.reference.has_value());

  // The parent makes the copies itself: which runs are checked is not in the message.
  req.parent_snapshots = true;
  const std::string body = env::encode_job(art, plan, req, layout);
  CHECK(body.find("\"snapshots\":[]") != std::string::npos);
  const env::WorkerJob parent_side = env::decode_job(body);
  CHECK(parent_side.request.parent_snapshots);
  CHECK(parent_side.request.snapshots.empty());

  env::RunOutcome out;
  out.verdict = env::Verdict::runtime_error;
  out.message = "boom";
  out.failed_launch = 1;
  out.times_ms = {0.5, 0.25};
  out.runs = {0, 1, 2};
  out.launch_ms = {0.1, 0.2};
  out.sampled_runs = {2, -1};
  out.job_cpu_ms = 99;  // the pool's own measurement: never sent
  const env::WorkerReply r = env::decode_reply(env::encode_reply(out, true));
  CHECK(r.exiting);
  CHECK(r.outcome.verdict == env::Verdict::runtime_error);
  CHECK(r.outcome.message == "boom");
  CHECK(r.outcome.failed_launch == 1);
  CHECK(r.outcome.times_ms == out.times_ms);
  CHECK(r.outcome.runs == out.runs);
  CHECK(r.outcome.launch_ms == out.launch_ms);
  CHECK(r.outcome.sampled_runs == out.sampled_runs);
  CHECK(r.outcome.job_cpu_ms == -1);
  // Forged or broken replies: a parse error or an unknown verdict throws (the pool refuses it).
  CHECK_THROWS(env::decode_reply("{\"verdict\": \"correct\"}"));
  CHECK_THROWS(env::decode_reply("{\"verdict\": \"best\", \"message\": \"\", \"failed_launch\": -1, \"times_ms\": [], \"runs\": []}"));
  CHECK_THROWS(env::decode_reply("not json"));
}

TEST_CASE("env worker job: a reply frame of too many or too deep arrays is refused before it is parsed") {
  // A red team's 16-MiB frame of '[' took the parser 1.1 GB (2026-12-07); the scan builds nothing.
  const std::string nest(1 << 20, '[');
  CHECK(env::check_reply_shape(nest).find("nests deeper than") != std::string::npos);
  CHECK_THROWS_WITH(env::decode_reply(nest), doctest::Contains("nests deeper than"));
  std::string flat = "{\"times_ms\": [";
  for (int i = 0; i < 1000; ++i) flat += std::string(i ? "," : "") + "[]";
  flat += "]}";
  CHECK(env::check_reply_shape(flat).find("more than 16 arrays and objects") != std::string::npos);
  // Brackets inside strings (a message quoting code, with escaped quotes) are text, not structure.
  env::RunOutcome out;
  out.verdict = env::Verdict::runtime_error;
  out.message = "a[b[c[d[e[f]]]]] \"{{{{{{\" \\ [[[[[[[[[[[[[[[[[[[[";
  out.times_ms = {1.0};
  out.runs = {0};
  const std::string body = env::encode_reply(out, false);
  CHECK(env::check_reply_shape(body).empty());
  CHECK(env::decode_reply(body).outcome.message == out.message);
  CHECK(env::check_reply_shape("{\"ran\":3}").empty());
}
