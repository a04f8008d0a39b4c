#include "store/statement.hpp"

#include <sqlite3.h>

#include <utility>

#include "util/error.hpp"

namespace leap::store {

Statement::Statement(sqlite3* db, std::string_view sql, std::string db_path)
    : db_(db), db_path_(std::move(db_path)), sql_(sql) {
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql_.data(), static_cast<int>(sql_.size()), &stmt_, &tail);
  if (rc != SQLITE_OK) fail("prepare", rc);
  if (stmt_ == nullptr) throw StoreError("store " + db_path_ + ": empty SQL statement");
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      stmt_(std::exchange(other.stmt_, nullptr)),
      db_path_(std::move(other.db_path_)),
      sql_(std::move(other.sql_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = std::exchange(other.db_, nullptr);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_path_ = std::move(other.db_path_);
    sql_ = std::move(other.sql_);
  }
  return *this;
}

void Statement::fail(const char* what, int rc) const {
  std::string msg = "store " + db_path_ + ": " + what + " failed: ";
  msg += (db_ != nullptr) ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  msg += " (sqlite code " + std::to_string(rc) + ") in SQL: ";
  msg.append(sql_, 0, 200);
  if (sql_.size() > 200) msg += "...";
  throw StoreError(msg);
}

void Statement::check_bind(int rc, int index) {
  if (rc != SQLITE_OK) fail(("bind of parameter " + std::to_string(index)).c_str(), rc);
}

Statement& Statement::bind_int64(int index, std::int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}
Statement& Statement::bind_double(int index, double value) {
  check_bind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}
Statement& Statement::bind_text(int index, std::string_view value) {
  check_bind(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                 SQLITE_UTF8),
             index);
  return *this;
}
Statement& Statement::bind_null(int index) {
  check_bind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}
Statement& Statement::bind_blob(int index, const void* data, std::size_t size) {
  // A zero-length blob with a null pointer would bind NULL; bind an empty blob explicitly.
  int rc = (size == 0) ? sqlite3_bind_zeroblob(stmt_, index, 0)
                       : sqlite3_bind_blob64(stmt_, index, data, size, SQLITE_TRANSIENT);
  check_bind(rc, index);
  return *this;
}
Statement& Statement::bind_opt_int64(int index, const std::optional<std::int64_t>& value) {
  return value ? bind_int64(index, *value) : bind_null(index);
}
Statement& Statement::bind_opt_double(int index, const std::optional<double>& value) {
  return value ? bind_double(index, *value) : bind_null(index);
}
Statement& Statement::bind_opt_text(int index, const std::optional<std::string>& value) {
  return value ? bind_text(index, *value) : bind_null(index);
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // Reset so the statement (and any implicit transaction it holds) is released; keep the error.
  sqlite3_reset(stmt_);
  fail("step", rc);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
std::string Statement::column_name(int col) const {
  const char* n = sqlite3_column_name(stmt_, col);
  return n ? n : "";
}
bool Statement::column_is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}
std::int64_t Statement::column_int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::column_double(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Statement::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)) : "";
}
std::vector<std::uint8_t> Statement::column_blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  if (p == nullptr || n == 0) return {};
  auto b = static_cast<const std::uint8_t*>(p);
  return std::vector<std::uint8_t>(b, b + n);
}
std::optional<std::int64_t> Statement::column_opt_int64(int col) const {
  if (column_is_null(col)) return std::nullopt;
  return column_int64(col);
}
std::optional<double> Statement::column_opt_double(int col) const {
  if (column_is_null(col)) return std::nullopt;
  return column_double(col);
}
std::optional<std::string> Statement::column_opt_text(int col) const {
  if (column_is_null(col)) return std::nullopt;
  return column_text(col);
}

}  // namespace leap::store
