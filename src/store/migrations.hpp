#pragma once
// Schema versioning: PRAGMA user_version plus an ordered list of migration steps.
#include <string_view>
#include <vector>

namespace leap::store {

class Database;

/// The schema version this binary writes and understands.
inline constexpr int kSchemaVersion = 4;

/// PRAGMA application_id stamped into every leap store ('LEAP' in ASCII), so a foreign
/// SQLite file is refused instead of being migrated.
inline constexpr int kApplicationId = 0x4C454150;

/// One schema step: running `sql` on a database at version `version - 1` brings it to `version`.
struct Migration {
  int version;                   ///< version after this step (1, 2, ...; consecutive)
  std::string_view description;  ///< one line, for error messages
  std::string_view sql;          ///< DDL/DML, possibly several statements
};

/// The migrations of this binary, in order; the last one's version is kSchemaVersion.
const std::vector<Migration>& migrations();

/// The SQL of schema version 1 (all tables and indices; see docs/schema.md).
std::string_view schema_v1_sql();

/// Brings `db` up to the last version in `steps`: each pending step runs in its own
/// transaction together with its PRAGMA user_version bump, so a failed step leaves the file at
/// the previous version. Safe against a concurrent opener (the version is re-read under the
/// write lock). Throws StoreError if the file's version is newer than the last step, if the
/// steps are not consecutive, or if a step fails.
void migrate(Database& db, const std::vector<Migration>& steps);

/// Throws StoreError if the file's version is newer than the last of `steps` (no writes).
void check_version(Database& db, const std::vector<Migration>& steps);

/// Throws StoreError if the file carries another application's PRAGMA application_id, or has
/// tables but neither a leap application_id nor a schema version (not a leap store).
void check_application_id(Database& db);

}  // namespace leap::store
