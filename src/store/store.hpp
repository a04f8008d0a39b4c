#pragma once
// The leap experiment store: writers used by `leap train` / `leap eval`, readers used by tests
// and `leap report`. Schema: docs/schema.md.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/database.hpp"
#include "store/records.hpp"
#include "util/error.hpp"

namespace leap::store {

/// --resume of a run whose lease another live process holds. The message names the run, the
/// pid and the host; lease() is the holder.
class LeaseHeldError : public StoreError {
 public:
  LeaseHeldError(const std::string& what, RunLease holder) : StoreError(what), holder_(std::move(holder)) {}
  /// The process holding the lease.
  const RunLease& lease() const { return holder_; }

 private:
  RunLease holder_;
};

/// A writer found that its lease was taken over by another process (it was thought gone): it
/// must stop writing the run.
class LeaseLostError : public StoreError {
 public:
  explicit LeaseLostError(const std::string& what) : StoreError(what) {}
};

/// A connection to a leap store file (usually results/leap.db) with typed writers and readers.
/// Every multi-row write is one transaction: it is all there or not at all, and readers on
/// other connections (other threads or processes) only ever see whole writes.
/// A Store is used by one thread at a time; a concurrent reader opens its own Store.
/// Every failure throws leap::StoreError naming the file.
class Store {
 public:
  /// Opens (creating and migrating if needed) the store at `path`; see Database.
  explicit Store(const std::filesystem::path& path, const OpenOptions& options = {});

  /// The underlying connection, for ad-hoc queries (reports) and custom transactions.
  Database& db() { return db_; }
  /// The file this store opened.
  const std::string& path() const { return db_.path(); }

  // ---- writers -------------------------------------------------------------------------

  /// Inserts a run with status 'running' and returns its id (info.id, or a generated
  /// "YYYYMMDD-HHMMSS-xxxx" when empty). Throws if a given id already exists.
  std::string create_run(const RunInfo& info);
  /// Sets a run's final status and ended_at (Unix seconds; empty: now) and releases its lease.
  /// Throws on an unknown run.
  void finish_run(const std::string& run_id, RunStatus status,
                  std::optional<double> ended_at = std::nullopt);
  /// Returns the id of the task row (task_set, name, hash), inserting it if new.
  std::int64_t ensure_task(const TaskInfo& task);
  /// Writes a whole step (step row, groups, rollouts, turns, metrics, events) in one
  /// transaction. On any failure nothing of the step is kept and StoreError is thrown
  /// (message names the file, run and step). A step number may be written once per run.
  void write_step(const StepRecord& step);
  /// Marks a run `running` again (ended_at cleared), for `leap train --resume`. Throws
  /// leap::StoreError for an unknown run.
  void reopen_run(const std::string& run_id);
  /// Takes the lease of `run_id` for `me`, in one transaction. A lease held by `me`, or none (a
  /// run of a store before schema v3), is simply taken. A lease held by another process is taken
  /// over when `stale_reason(holder)` returns a reason (the holder is gone): an event of kind
  /// `lease` naming the old holder and the reason is written in the same transaction, and the
  /// old holder is returned. Otherwise LeaseHeldError is thrown and nothing is changed.
  std::optional<RunLease> acquire_lease(
      const std::string& run_id, const RunLease& me,
      const std::function<std::optional<std::string>(const RunLease&)>& stale_reason);
  /// Releases the lease of `run_id` if `me` holds it (status unchanged): a --resume whose set-up
  /// failed before the run was reopened leaves it as it found it. Nothing when another holds it.
  void release_lease(const std::string& run_id, const RunLease& me);
  /// Sets the lease's refreshed_at to now (or `at`). Throws LeaseLostError when `me` no longer
  /// holds the lease (another process took the run over), StoreError for an unknown run.
  void refresh_lease(const std::string& run_id, const RunLease& me, std::optional<double> at = std::nullopt);
  /// The lease of a run, or nullopt when none is held (or the run is unknown).
  std::optional<RunLease> get_lease(const std::string& run_id);
  /// Appends one metric point (value NaN is stored as NULL; wall_time Unix seconds, empty: now).
  void add_metric(const std::string& run_id, std::int64_t step, std::string_view name,
                  double value, std::optional<double> wall_time = std::nullopt);
  /// Appends one event (time Unix seconds, empty: now).
  void add_event(const std::string& run_id, std::optional<std::int64_t> step,
                 std::string_view kind, std::string_view message,
                 std::optional<double> time = std::nullopt);
  /// Records a checkpoint written at `step` under `path`; returns its row id.
  std::int64_t add_checkpoint(const std::string& run_id, std::int64_t step,
                              std::string_view path,
                              std::optional<double> created_at = std::nullopt);
  /// Creates an evaluation row and returns its id.
  std::int64_t create_evaluation(const EvaluationInfo& info);
  /// Writes a whole evaluation in one transaction: the evaluations row, its results and
  /// `metrics` (stored under info.run_id at info.step; needs a run). Returns the row id. A reader
  /// (and a resume) sees the evaluation whole or not at all.
  std::int64_t write_evaluation(const EvaluationInfo& info, const std::vector<EvalResultRecord>& results,
                                const std::vector<MetricRecord>& metrics = {});
  /// Appends results to an evaluation in one transaction (all or nothing).
  void add_eval_results(std::int64_t evaluation_id, const std::vector<EvalResultRecord>& results);
  /// For resuming from a checkpoint at `step`: deletes, in one transaction, everything the run
  /// recorded for later steps (steps and their groups/rollouts/turns, metrics, events,
  /// checkpoints and evaluations with a larger step number).
  void truncate_run_after(const std::string& run_id, std::int64_t step);

  // ---- readers -------------------------------------------------------------------------

  /// All runs, newest start first.
  std::vector<RunRow> list_runs();
  /// One run, or nullopt.
  std::optional<RunRow> get_run(const std::string& run_id);
  /// A run's metric `name`, ordered by step then insertion.
  std::vector<MetricPoint> metric_series(const std::string& run_id, std::string_view name);
  /// Number of rows in `table` (one of table_names(); anything else throws).
  std::int64_t count_rows(std::string_view table);
  /// count_rows for every table, read in one snapshot.
  std::map<std::string, std::int64_t> row_counts();
  /// Highest step number written by write_step for the run, or nullopt if none.
  std::optional<std::int64_t> last_completed_step(const std::string& run_id);
  /// True when the run has an evaluation at `step`.
  bool has_evaluation(const std::string& run_id, std::int64_t step);
  /// The value of metric `name` of the run at `step` (the last one written), or nullopt.
  std::optional<double> metric_at(const std::string& run_id, std::string_view name, std::int64_t step);
  /// The checkpoint with the highest step of the run (latest written on ties), or nullopt.
  std::optional<CheckpointRow> latest_checkpoint(const std::string& run_id);

  /// The tables of the current schema, in creation order.
  static const std::vector<std::string>& table_names();

 private:
  void require_run(const std::string& run_id);
  Database db_;
};

}  // namespace leap::store
