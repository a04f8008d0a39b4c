#pragma once
// The worker IPC messages in one place: the job the pool sends a worker over the job socket, and
// the worker's reply (JSON text; the tensor memory and the artifact travel beside them as file
// descriptors, see worker_pool.cpp). Both sides encode and decode through these functions, so a
// field added to RunRequest or RunOutcome is added once. A reply is untrusted input: decode_reply
// only parses it; env/reply_check.hpp decides whether it may be used.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env/backend.hpp"
#include "env/launch_plan.hpp"
#include "env/shared_buffers.hpp"

namespace leap::env {

/// A job as the worker receives it.
struct WorkerJob {
  Artifact artifact;
  BoundPlan plan;
  /// Everything of the parent's request but `on_run_done` (a worker-side callback) and, with
  /// `parent_snapshots`, the `snapshots` list (withheld: the worker never learns which runs are
  /// checked).
  RunRequest request;
  size_t total_bytes = 0;                         ///< size of the tensor mapping (bytes)
  std::vector<size_t> offsets;                    ///< each tensor's start in it (bytes)
  std::vector<std::pair<size_t, size_t>> guards;  ///< (offset, bytes) of the guard pages
};

/// The job's message: `artifact`, `plan`, `request` (as WorkerJob::request says) and `layout`.
std::string encode_job(const Artifact& artifact, const BoundPlan& plan, const RunRequest& request,
                       const BufferLayout& layout);

/// Parses encode_job's message. Throws nlohmann::json's exceptions on a malformed message.
WorkerJob decode_job(std::string_view body);

/// A worker's reply: `outcome` (verdict, message, failed launch, times, runs, per-launch times;
/// never job_cpu_ms, which the pool measures) and whether the worker exits after it.
std::string encode_reply(const RunOutcome& outcome, bool exiting);

/// A decoded reply; nothing checked yet (env/reply_check.hpp).
struct WorkerReply {
  RunOutcome outcome;
  bool exiting = false;
};

/// Arrays and objects a reply frame may hold, and how deep: encode_reply writes one object of
/// four arrays (depth 2), a progress frame `{"ran":N}` one object.
inline constexpr int kMaxReplyContainers = 16;
inline constexpr int kMaxReplyDepth = 4;

/// Scans a frame's JSON text, without building anything, for more than kMaxReplyContainers
/// arrays and objects or nesting deeper than kMaxReplyDepth (strings skipped, escapes honoured).
/// Returns "" when within both, else what is wrong. A forged 16-MiB frame of `[` once took the
/// parser 1.1 GB of the grader's memory (a red team, 2026-12-07).
std::string check_reply_shape(std::string_view body);

/// Parses encode_reply's message (or one forged in its place), after check_reply_shape. Throws
/// leap::Error for a frame of the wrong shape or an unknown verdict, nlohmann::json's exceptions
/// for text that is not such a message.
WorkerReply decode_reply(std::string_view body);

}  // namespace leap::env
