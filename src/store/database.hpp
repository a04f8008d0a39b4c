#pragma once
// RAII SQLite connection to a leap store file: WAL, foreign keys, busy timeout, migrations.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "store/statement.hpp"

struct sqlite3;

namespace leap::store {

/// How Database opens its file.
struct OpenOptions {
  /// How long (milliseconds) a statement waits for a lock held by another connection before
  /// failing with "database is locked". Readers in WAL mode rarely wait; writers queue up.
  int busy_timeout_ms = 10000;
  /// Apply pending schema migrations on open (the normal case). When false the file is only
  /// checked: a version newer than this binary's is still refused.
  bool migrate = true;
  /// Open an existing file read-only (reports on a store a live run is writing): nothing is
  /// created, migrated or written; a missing file or an unknown schema version is an error.
  /// A store SQLite cannot open so (on a read-only mount: no -shm file can be created) is opened
  /// immutable (URI parameter immutable=1): what is in the main file is read; a -wal file left
  /// by a writer that did not close cleanly is then not seen.
  bool read_only = false;
};

/// One connection to a leap SQLite file. Opening creates the file and its parent directories,
/// switches to WAL journaling (readers see the last committed state while a writer works),
/// turns foreign keys on, sets the busy timeout and migrates the schema to
/// kSchemaVersion (see migrations.hpp). Move-only; closed in the destructor.
/// A connection is used by one thread at a time; open one per thread.
/// Every failure throws leap::StoreError naming the file.
class Database {
 public:
  /// Opens (creating if needed) the database at `path`. ":memory:" opens a private in-memory db.
  explicit Database(const std::filesystem::path& path, const OpenOptions& options = {});
  ~Database();
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  /// Prepares one SQL statement.
  Statement prepare(std::string_view sql);
  /// Executes one or more ';'-separated statements that return no rows needed by the caller.
  void exec(std::string_view sql);
  /// PRAGMA user_version: the schema version stored in the file.
  int user_version();
  /// Whether `table` has `column` (a store of an older schema, opened read-only, may lack it).
  bool has_column(const std::string& table, const std::string& column);
  /// Rowid of the last successful INSERT on this connection.
  std::int64_t last_insert_rowid() const;
  /// Rows changed by the last INSERT/UPDATE/DELETE on this connection.
  std::int64_t changes() const;
  /// True while an explicit transaction is open on this connection.
  bool in_transaction() const;
  /// The file this connection opened (as given).
  const std::string& path() const { return path_; }
  /// The raw handle, for the rare call this wrapper does not cover.
  sqlite3* handle() const { return db_; }

 private:
  void close() noexcept;
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace leap::store
