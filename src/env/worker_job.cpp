// The worker IPC messages; see env/worker_job.hpp.
#include "env/worker_job.hpp"

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "env/dtype.hpp"
#include "util/error.hpp"

namespace leap::env {

namespace {

using json = nlohmann::json;

/// The bound plan: tensors (name, dtype, shape, role) and launches (kernel, dims, arguments).
json plan_to_json(const BoundPlan& plan) {
  json t = json::array();
  for (const auto& x : plan.tensors)
    t.push_back({{"name", x.name}, {"dtype", std::string(to_string(x.dtype))}, {"shape", x.shape},
                 {"role", static_cast<int>(x.role)}});
  json l = json::array();
  for (const auto& x : plan.launches) {
    json args = json::array();
    for (const auto& a : x.args)
      args.push_back({{"k", static_cast<int>(a.kind)}, {"t", a.tensor}, {"i", a.i}, {"f", a.f}});
    l.push_back({{"kernel", x.kernel}, {"grid", x.grid}, {"block", x.block},
                 {"shared_bytes", x.shared_bytes}, {"signature", x.signature}, {"args", args}});
  }
  return {{"tensors", t}, {"launches", l}};
}

BoundPlan plan_from_json(const json& j) {
  BoundPlan plan;
  for (const auto& x : j.at("tensors")) {
    BoundTensor t;
    t.name = x.at("name").get<std::string>();
    dtype_from_string(x.at("dtype").get<std::string>(), t.dtype);
    t.shape = x.at("shape").get<std::vector<int64_t>>();
    t.role = static_cast<TensorRole>(x.at("role").get<int>());
    plan.tensors.push_back(std::move(t));
  }
  for (const auto& x : j.at("launches")) {
    BoundLaunch l;
    l.kernel = x.at("kernel").get<std::string>();
    l.grid = x.at("grid").get<std::array<int64_t, 3>>();
    l.block = x.at("block").get<std::array<int64_t, 3>>();
    l.shared_bytes = x.at("shared_bytes").get<int64_t>();
    l.signature = x.at("signature").get<std::string>();
    for (const auto& a : x.at("args")) {
      BoundArg b;
      b.kind = static_cast<ArgKind>(a.at("k").get<int>());
      b.tensor = a.at("t").get<int>();
      b.i = a.at("i").get<int64_t>();
      b.f = a.at("f").is_number() ? a.at("f").get<double>() : std::nan("");
      l.args.push_back(b);
    }
    plan.launches.push_back(std::move(l));
  }
  return plan;
}

json outcome_to_json(const RunOutcome& o) {  // job_cpu_ms stays with the pool
  return {{"verdict", std::string(to_string(o.verdict))}, {"message", o.message},
          {"failed_launch", o.failed_launch}, {"times_ms", o.times_ms}, {"runs", o.runs},
          {"launch_ms", o.launch_ms}, {"sampled_runs", o.sampled_runs}};
}

RunOutcome outcome_from_json(const json& j) {
  RunOutcome o;
  o.verdict = verdict_from_string(j.at("verdict").get<std::string>());
  o.message = j.at("message").get<std::string>();
  o.failed_launch = j.at("failed_launch").get<int>();
  o.times_ms = j.at("times_ms").get<std::vector<double>>();
  o.runs = j.at("runs").get<std::vector<int>>();
  if (j.contains("launch_ms")) o.launch_ms = j.at("launch_ms").get<std::vector<double>>();
  if (j.contains("sampled_runs")) o.sampled_runs = j.at("sampled_runs").get<std::vector<int>>();
  return o;
}

}  // namespace

std::string encode_job(const Artifact& artifact, const BoundPlan& plan, const RunRequest& request,
                       const BufferLayout& layout) {
  json job = {{"artifact", {{"backend", artifact.backend}, {"path", artifact.path}, {"key", artifact.key}}},
              {"plan", plan_to_json(plan)},
              {"warmup", request.warmup},
              {"trials", request.trials},
              {"max_seconds", request.max_seconds},
              {"rotations", request.rotations},
              {"rewrite_seed", request.rewrite_seed},
              {"warmup_ms", request.warmup_ms},
              {"min_timed_ms", request.min_timed_ms},
              {"rewrite_inputs", request.rewrite_inputs},
              {"perturb_inputs", request.perturb_inputs},
              {"perturb_bounds", json::array()},
              {"profile_launches", request.profile_launches},
              {"parent_snapshots", request.parent_snapshots},
              {"parent_zeroes_scratch", request.parent_zeroes_scratch},
              {"noop", request.noop},
              {"report_every", request.report_every},
              {"worker_sample_slots", request.worker_sample_slots},
              {"worker_sample_first", request.worker_sample_first},
              {"worker_sample_outputs", request.worker_sample_outputs},
              {"snapshots", json::array()},
              {"total_bytes", layout.total_bytes},
              {"offsets", layout.offsets},
              {"guards", layout.guards}};
  for (const UniformBounds& b : request.perturb_bounds) job["perturb_bounds"].push_back(json::array({b.low, b.high}));
  if (!request.parent_snapshots)  // else the list stays in the parent: the worker never learns which runs are checked
    for (const Snapshot& snap : request.snapshots) job["snapshots"].push_back(json::array({snap.run, snap.copies}));
  if (request.reference)
    job["reference"] = {{"torchscript", request.reference->torchscript},
                        {"file", request.reference->file},
                        {"task_file", request.reference->task_file},
                        {"inputs", request.reference->inputs}};
  return job.dump();
}

WorkerJob decode_job(std::string_view body) {
  const json job = json::parse(body);
  WorkerJob w;
  w.artifact.backend = job.at("artifact").at("backend").get<std::string>();
  w.artifact.path = job.at("artifact").at("path").get<std::string>();
  w.artifact.key = job.at("artifact").at("key").get<std::string>();
  w.plan = plan_from_json(job.at("plan"));
  RunRequest& req = w.request;
  req.warmup = job.at("warmup").get<int>();
  req.trials = job.at("trials").get<int>();
  req.max_seconds = job.at("max_seconds").get<double>();
  req.rotations = job.at("rotations").get<std::vector<std::vector<int>>>();
  req.rewrite_seed = job.at("rewrite_seed").get<uint64_t>();
  req.warmup_ms = job.at("warmup_ms").get<double>();
  req.min_timed_ms = job.at("min_timed_ms").get<double>();
  req.rewrite_inputs = job.at("rewrite_inputs").get<std::vector<int>>();
  req.perturb_inputs = job.value("perturb_inputs", std::vector<int>{});
  if (job.contains("perturb_bounds"))
    for (const auto& b : job.at("perturb_bounds")) req.perturb_bounds.push_back({b.at(0).get<double>(), b.at(1).get<double>()});
  req.profile_launches = job.value("profile_launches", false);
  req.parent_snapshots = job.value("parent_snapshots", false);
  req.parent_zeroes_scratch = job.value("parent_zeroes_scratch", false);
  req.noop = job.value("noop", false);
  req.report_every = job.value("report_every", 1);
  req.worker_sample_slots = job.value("worker_sample_slots", 0);
  req.worker_sample_first = job.value("worker_sample_first", -1);
  req.worker_sample_outputs = job.value("worker_sample_outputs", std::vector<int>{});
  for (const auto& sj : job.at("snapshots")) {
    Snapshot snap;
    snap.run = sj.at(0).get<int>();
    snap.copies = sj.at(1).get<std::vector<std::pair<int, int>>>();
    req.snapshots.push_back(std::move(snap));
  }
  if (job.contains("reference")) {
    const json& rj = job.at("reference");
    ReferenceProgram rp;
    rp.torchscript = rj.at("torchscript").get<std::string>();
    rp.file = rj.at("file").get<std::string>();
    rp.task_file = rj.at("task_file").get<std::string>();
    rp.inputs = rj.at("inputs").get<int>();
    req.reference = std::move(rp);
  }
  w.total_bytes = job.at("total_bytes").get<size_t>();
  w.offsets = job.at("offsets").get<std::vector<size_t>>();
  w.guards = job.at("guards").get<std::vector<std::pair<size_t, size_t>>>();
  return w;
}

std::string encode_reply(const RunOutcome& outcome, bool exiting) {
  json reply = outcome_to_json(outcome);
  reply["exiting"] = exiting;
  return reply.dump();
}

std::string check_reply_shape(std::string_view body) {
  int depth = 0, containers = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character is skipped
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++containers > kMaxReplyContainers)
        return "it holds more than " + std::to_string(kMaxReplyContainers) + " arrays and objects";
      if (++depth > kMaxReplyDepth) return "it nests deeper than " + std::to_string(kMaxReplyDepth) + " levels";
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return "";
}

WorkerReply decode_reply(std::string_view body) {
  if (const std::string why = check_reply_shape(body); !why.empty()) throw Error(why);
  const json j = json::parse(body);
  return {outcome_from_json(j), j.value("exiting", false)};
}

}  // namespace leap::env
