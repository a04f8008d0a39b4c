#include "store/records.hpp"

#include "util/error.hpp"

namespace leap::store {

std::string_view to_string(RunKind kind) {
  switch (kind) {
    case RunKind::train: return "train";
    case RunKind::eval: return "eval";
  }
  return "train";
}

std::string_view to_string(RunStatus status) {
  switch (status) {
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
  }
  return "running";
}

RunKind parse_run_kind(std::string_view s) {
  if (s == "train") return RunKind::train;
  if (s == "eval") return RunKind::eval;
  throw StoreError("unknown run kind '" + std::string(s) + "' (train|eval)");
}

RunStatus parse_run_status(std::string_view s) {
  if (s == "running") return RunStatus::running;
  if (s == "finished") return RunStatus::finished;
  if (s == "failed") return RunStatus::failed;
  if (s == "interrupted") return RunStatus::interrupted;
  throw StoreError("unknown run status '" + std::string(s) +
                   "' (running|finished|failed|interrupted)");
}

}  // namespace leap::store
