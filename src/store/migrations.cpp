#include "store/migrations.hpp"

#include <string>

#include "store/database.hpp"
#include "store/transaction.hpp"
#include "util/error.hpp"

namespace leap::store {

namespace {

// SQLite cannot drop a UNIQUE constraint in place: the table is rebuilt (the documented
// "create, copy, drop, rename" procedure), each chain's turn t becoming node t - 1 whose parent
// is node t - 2.
constexpr const char* kTurnsAsTreeNodes = R"SQL(
CREATE TABLE turns_v4 (
  id                INTEGER PRIMARY KEY,
  rollout_id        INTEGER NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
  turn_index        INTEGER NOT NULL CHECK (turn_index >= 1),
  node_index        INTEGER NOT NULL CHECK (node_index >= 0),
  parent_index      INTEGER CHECK (parent_index IS NULL OR (parent_index >= 0 AND parent_index < node_index)),
  segment_index     INTEGER NOT NULL CHECK (segment_index >= 0),
  prompt            TEXT NOT NULL,
  completion        TEXT NOT NULL,
  prompt_tokens     INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  verdict           TEXT NOT NULL,
  feedback          TEXT NOT NULL,
  candidate_ms      REAL,
  reference_ms      REAL,
  speedup           REAL,
  suspicious        INTEGER NOT NULL DEFAULT 0 CHECK (suspicious IN (0, 1)),
  reward            REAL NOT NULL,
  discounted_return REAL NOT NULL,
  advantage         REAL NOT NULL,
  old_logprob_mean  REAL,
  new_logprob_mean  REAL,
  env_seconds       REAL NOT NULL,
  compacted         INTEGER NOT NULL CHECK (compacted IN (0, 1)),
  kb_snippets       TEXT NOT NULL DEFAULT '',
  UNIQUE (rollout_id, node_index)
);
INSERT INTO turns_v4 (id, rollout_id, turn_index, node_index, parent_index, segment_index, prompt, completion,
                      prompt_tokens, completion_tokens, verdict, feedback, candidate_ms, reference_ms, speedup,
                      suspicious, reward, discounted_return, advantage, old_logprob_mean, new_logprob_mean,
                      env_seconds, compacted)
  SELECT id, rollout_id, turn_index, turn_index - 1, CASE WHEN turn_index > 1 THEN turn_index - 2 END,
         segment_index, prompt, completion, prompt_tokens, completion_tokens, verdict, feedback, candidate_ms,
         reference_ms, speedup, suspicious, reward, discounted_return, advantage, old_logprob_mean,
         new_logprob_mean, env_seconds, compacted
  FROM turns;
DROP TABLE turns;
ALTER TABLE turns_v4 RENAME TO turns;
CREATE INDEX idx_turns_verdict ON turns (verdict);
CREATE INDEX idx_turns_rollout ON turns (rollout_id, turn_index);
)SQL";

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> steps = {
      {1, "initial schema: runs, tasks, steps, groups, rollouts, turns, evaluations, "
          "eval_results, metrics, checkpoints, events",
       schema_v1_sql()},
      {2, "eval_results.suspicious: the verifier's suspicious-speedup flag of each evaluated attempt",
       "ALTER TABLE eval_results ADD COLUMN suspicious INTEGER NOT NULL DEFAULT 0 CHECK (suspicious IN (0, 1));"},
      {3, "runs.lease_*: the host, pid, process start time and last refresh of the process writing a run",
       "ALTER TABLE runs ADD COLUMN lease_host TEXT;"
       "ALTER TABLE runs ADD COLUMN lease_pid INTEGER;"
       "ALTER TABLE runs ADD COLUMN lease_process_started_at REAL;"
       "ALTER TABLE runs ADD COLUMN lease_refreshed_at REAL;"},
      {4, "turns.node_index, turns.parent_index: every graded turn is a node of its rollout's debugging tree "
          "(turns.branch); several turns of one rollout may share a turn_index; turns.kb_snippets: the "
          "knowledge-base snippets a turn's prompt added (kb.dir)",
       kTurnsAsTreeNodes},
  };
  return steps;
}

namespace {

int latest(const std::vector<Migration>& steps) { return steps.empty() ? 0 : steps.back().version; }

void refuse_newer(Database& db, int found, int known) {
  if (found > known) {
    throw StoreError("store " + db.path() + ": schema version " + std::to_string(found) +
                     " is newer than this leap binary understands (up to " +
                     std::to_string(known) + "); use a newer leap to open it");
  }
}

}  // namespace

void check_version(Database& db, const std::vector<Migration>& steps) {
  refuse_newer(db, db.user_version(), latest(steps));
}

void check_application_id(Database& db) {
  Statement app = db.prepare("PRAGMA application_id");
  app.step();
  const auto id = app.column_int64(0);
  if (id == kApplicationId) return;
  if (id != 0) {
    throw StoreError("store " + db.path() + ": not a leap database (application_id " +
                     std::to_string(id) + ")", 2);
  }
  Statement tables = db.prepare("SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
  tables.step();
  if (tables.column_int64(0) > 0 && db.user_version() == 0) {
    throw StoreError("store " + db.path() +
                     ": not a leap database (it has tables but no leap schema version)", 2);
  }
}

void migrate(Database& db, const std::vector<Migration>& steps) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].version != static_cast<int>(i) + 1) {
      throw StoreError("store " + db.path() + ": migration list is not consecutive at step " +
                       std::to_string(i + 1));
    }
  }
  const int known = latest(steps);
  if (db.user_version() == known) return;  // fast path: nothing to do, no write lock
  refuse_newer(db, db.user_version(), known);
  for (const Migration& m : steps) {
    Transaction tx(db);
    // Re-read under the write lock: another process may have migrated in the meantime.
    const int current = db.user_version();
    refuse_newer(db, current, known);
    if (current >= m.version) continue;  // the transaction rolls back (nothing written)
    try {
      db.exec(m.sql);
      db.exec("PRAGMA application_id=" + std::to_string(kApplicationId));
      db.exec("PRAGMA user_version=" + std::to_string(m.version));
      tx.commit();
    } catch (const StoreError& e) {
      throw StoreError("store " + db.path() + ": migration to schema version " +
                       std::to_string(m.version) + " (" + std::string(m.description) +
                       ") failed: " + e.what());
    }
  }
}

}  // namespace leap::store
