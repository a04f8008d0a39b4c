// Schema version 1 of the leap store. docs/schema.md explains every table and column; a test
// checks that the doc names every column of this schema.
#include "store/migrations.hpp"

namespace leap::store {

std::string_view schema_v1_sql() {
  return R"SQL(
CREATE TABLE runs (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  kind        TEXT NOT NULL CHECK (kind IN ('train', 'eval')),
  status      TEXT NOT NULL DEFAULT 'running'
              CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
  config_yaml TEXT NOT NULL,
  config_hash TEXT NOT NULL,
  seed        INTEGER NOT NULL,
  git_commit  TEXT NOT NULL,
  hostname    TEXT NOT NULL,
  started_at  REAL NOT NULL,
  ended_at    REAL
);
CREATE INDEX idx_runs_started ON runs (started_at);
CREATE INDEX idx_runs_name ON runs (name);

CREATE TABLE tasks (
  id       INTEGER PRIMARY KEY,
  task_set TEXT NOT NULL,
  name     TEXT NOT NULL,
  level    INTEGER,
  category TEXT,
  hash     TEXT NOT NULL,
  UNIQUE (task_set, name, hash)
);
CREATE INDEX idx_tasks_name ON tasks (name);

CREATE TABLE steps (
  run_id             TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step               INTEGER NOT NULL,
  started_at         REAL NOT NULL,
  ended_at           REAL NOT NULL,
  generation_seconds REAL NOT NULL,
  env_seconds        REAL NOT NULL,
  update_seconds     REAL NOT NULL,
  PRIMARY KEY (run_id, step)
);

CREATE TABLE groups (
  id               INTEGER PRIMARY KEY,
  run_id           TEXT NOT NULL,
  step             INTEGER NOT NULL,
  task_id          INTEGER NOT NULL REFERENCES tasks (id),
  group_index      INTEGER NOT NULL,
  dcp_activated    INTEGER NOT NULL CHECK (dcp_activated IN (0, 1)),
  fail_ratio_turn1 REAL NOT NULL,
  recovered        INTEGER NOT NULL,
  UNIQUE (run_id, step, group_index),
  FOREIGN KEY (run_id, step) REFERENCES steps (run_id, step) ON DELETE CASCADE
);
CREATE INDEX idx_groups_task ON groups (task_id);

CREATE TABLE rollouts (
  id                 INTEGER PRIMARY KEY,
  group_id           INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
  rollout_index      INTEGER NOT NULL,
  final_verdict      TEXT NOT NULL,
  first_success_turn INTEGER,
  reward             REAL NOT NULL,
  advantage          REAL,
  reward_rank        REAL,
  reward_binary      REAL,
  reward_speedup     REAL,
  reward_kernelgym   REAL,
  UNIQUE (group_id, rollout_index)
);

CREATE TABLE turns (
  id                INTEGER PRIMARY KEY,
  rollout_id        INTEGER NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
  turn_index        INTEGER NOT NULL CHECK (turn_index >= 1),
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
  UNIQUE (rollout_id, turn_index)
);
CREATE INDEX idx_turns_verdict ON turns (verdict);

CREATE TABLE evaluations (
  id            INTEGER PRIMARY KEY,
  run_id        TEXT REFERENCES runs (id) ON DELETE CASCADE,
  step          INTEGER,
  bench         TEXT NOT NULL,
  created_at    REAL NOT NULL,
  settings_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_evaluations_run ON evaluations (run_id, step);

CREATE TABLE eval_results (
  id            INTEGER PRIMARY KEY,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations (id) ON DELETE CASCADE,
  task_id       INTEGER NOT NULL REFERENCES tasks (id),
  sample        INTEGER NOT NULL,
  turn          INTEGER NOT NULL CHECK (turn >= 1),
  verdict       TEXT NOT NULL,
  speedup       REAL,
  candidate_ms  REAL,
  reference_ms  REAL,
  file          TEXT,
  UNIQUE (evaluation_id, task_id, sample, turn)
);
CREATE INDEX idx_eval_results_task ON eval_results (task_id);

CREATE TABLE metrics (
  id        INTEGER PRIMARY KEY,
  run_id    TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step      INTEGER NOT NULL,
  name      TEXT NOT NULL,
  value     REAL,
  wall_time REAL NOT NULL
);
CREATE INDEX idx_metrics_run_name_step ON metrics (run_id, name, step);

CREATE TABLE checkpoints (
  id         INTEGER PRIMARY KEY,
  run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  path       TEXT NOT NULL,
  created_at REAL NOT NULL
);
CREATE INDEX idx_checkpoints_run_step ON checkpoints (run_id, step);

CREATE TABLE events (
  id      INTEGER PRIMARY KEY,
  run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step    INTEGER,
  time    REAL NOT NULL,
  kind    TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX idx_events_run_time ON events (run_id, time);
)SQL";
}

}  // namespace leap::store
