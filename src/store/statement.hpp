#pragma once
// RAII wrapper over one prepared SQLite statement (sqlite3_stmt).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace leap::store {

/// One prepared statement on a connection. Parameters and columns are indexed as SQLite does:
/// bind indices start at 1, column indices at 0. Move-only; finalized in the destructor.
/// Every failure throws leap::StoreError naming the database file and the SQL.
/// A statement must be used from one thread at a time (like its connection).
class Statement {
 public:
  /// Prepares `sql` (one statement) on `db`; `db_path` is only used in error messages.
  Statement(sqlite3* db, std::string_view sql, std::string db_path);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  /// Binds a 64-bit integer to parameter `index` (1-based).
  Statement& bind_int64(int index, std::int64_t value);
  /// Binds a double to parameter `index`. SQLite stores NaN as NULL, so a NaN fails a
  /// NOT NULL column.
  Statement& bind_double(int index, double value);
  /// Binds UTF-8 text (copied) to parameter `index`.
  Statement& bind_text(int index, std::string_view value);
  /// Binds SQL NULL to parameter `index`.
  Statement& bind_null(int index);
  /// Binds `size` bytes (copied) as a BLOB to parameter `index`.
  Statement& bind_blob(int index, const void* data, std::size_t size);
  /// Binds the value or NULL when empty.
  Statement& bind_opt_int64(int index, const std::optional<std::int64_t>& value);
  /// Binds the value or NULL when empty.
  Statement& bind_opt_double(int index, const std::optional<double>& value);
  /// Binds the value or NULL when empty.
  Statement& bind_opt_text(int index, const std::optional<std::string>& value);

  /// Advances the statement: true when a row is available, false when done. Throws on error.
  bool step();
  /// Steps a statement that returns no rows (INSERT/UPDATE/DELETE/DDL) to completion.
  void run();
  /// Resets the statement for re-execution and clears its bindings.
  void reset();

  /// Number of columns in the result set.
  int column_count() const;
  /// Name of result column `col` (0-based).
  std::string column_name(int col) const;
  /// True when column `col` of the current row is NULL.
  bool column_is_null(int col) const;
  /// Column `col` as a 64-bit integer (NULL reads as 0).
  std::int64_t column_int64(int col) const;
  /// Column `col` as a double (NULL reads as 0.0).
  double column_double(int col) const;
  /// Column `col` as UTF-8 text (NULL reads as "").
  std::string column_text(int col) const;
  /// Column `col` as bytes (NULL reads as empty).
  std::vector<std::uint8_t> column_blob(int col) const;
  /// Column `col` as an integer, or nullopt when NULL.
  std::optional<std::int64_t> column_opt_int64(int col) const;
  /// Column `col` as a double, or nullopt when NULL.
  std::optional<double> column_opt_double(int col) const;
  /// Column `col` as text, or nullopt when NULL.
  std::optional<std::string> column_opt_text(int col) const;

  /// The SQL text the statement was prepared from.
  const std::string& sql() const { return sql_; }

 private:
  [[noreturn]] void fail(const char* what, int rc) const;
  void check_bind(int rc, int index);

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string db_path_;
  std::string sql_;
};

}  // namespace leap::store
