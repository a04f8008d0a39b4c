#include "store/database.hpp"

#include <sqlite3.h>

#include <cctype>
#include <system_error>
#include <utility>

#include "store/migrations.hpp"
#include "util/error.hpp"

namespace leap::store {

namespace {

std::string pragma_text(Database& db, std::string_view sql) {
  Statement st = db.prepare(sql);
  return st.step() ? st.column_text(0) : std::string();
}

// True when a first read works (a read-only open can fail only then, e.g. SQLITE_CANTOPEN).
bool readable(sqlite3* db) {
  return sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr) == SQLITE_OK;
}

// "file:PATH?immutable=1" with PATH percent-encoded where a URI needs it.
std::string immutable_uri(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += hex[c >> 4];
      uri += hex[c & 15];
    }
  }
  return uri + "?immutable=1";
}

}  // namespace

Database::Database(const std::filesystem::path& path, const OpenOptions& options)
    : path_(path.string()) {
  const bool in_memory = path_ == ":memory:";
  if (options.read_only && !in_memory && !std::filesystem::exists(path))
    throw StoreError("store " + path_ + ": no such file");
  if (!in_memory && std::filesystem::is_directory(path))
    throw StoreError("store " + path_ + ": is a folder; give the path of the database file (e.g. " +
                     (path / "leap.db").string() + ")");
  if (!options.read_only && !in_memory && path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      throw StoreError("store " + path_ + ": cannot create directory " +
                       path.parent_path().string() + ": " + ec.message());
    }
  }
  auto open = [&](const std::string& name, int flags) {
    int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = "store " + path_ + ": cannot open: " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
      close();
      throw StoreError(msg);
    }
  };
  open(path_, options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (options.read_only && !in_memory && !readable(db_)) {
    // A WAL store on read-only media (a read-only mount, a folder this user cannot write): SQLite
    // cannot create the -shm file. Nothing can write it there either, so it is opened immutable.
    close();
    open(immutable_uri(path_), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
  }
  try {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, options.busy_timeout_ms);
    if (options.read_only) {  // a WAL file stays WAL; nothing may be written
      if (!in_memory) {
        check_application_id(*this);
        if (user_version() == 0)  // an empty file, or a SQLite file leap never wrote
          throw StoreError("store " + path_ + ": not a leap store (no leap schema; `leap train` or `leap eval` creates one)", 2);
      }
      check_version(*this, migrations());
      return;
    }
    if (!in_memory) {
      std::string mode = pragma_text(*this, "PRAGMA journal_mode=WAL");
      if (mode != "wal") {
        throw StoreError("store " + path_ + ": cannot switch to WAL journaling (journal_mode is '" +
                         mode + "'); is the file on a filesystem without shared memory?");
      }
    }
    // NORMAL is durable against process crashes in WAL mode; only an OS crash or power loss can
    // drop the last transactions, never corrupt the file.
    exec("PRAGMA synchronous=NORMAL");
    exec("PRAGMA foreign_keys=ON");
    if (pragma_text(*this, "PRAGMA foreign_keys") != "1") {
      throw StoreError("store " + path_ + ": this SQLite build cannot enforce foreign keys");
    }
    check_application_id(*this);
    if (options.migrate) {
      migrate(*this, migrations());
    } else {
      check_version(*this, migrations());
    }
  } catch (...) {
    close();
    throw;
  }
}

Database::~Database() { close(); }

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    close();
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void Database::close() noexcept {
  if (db_ != nullptr) {
    // sqlite3_close_v2 defers the close until outstanding statements are finalized.
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
}

Statement Database::prepare(std::string_view sql) { return Statement(db_, sql, path_); }

void Database::exec(std::string_view sql) {
  std::string owned(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, owned.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = "store " + path_ + ": ";
    msg += err ? err : sqlite3_errstr(rc);
    msg += " (sqlite code " + std::to_string(rc) + ") in SQL: ";
    msg.append(owned, 0, 200);
    if (owned.size() > 200) msg += "...";
    sqlite3_free(err);
    throw StoreError(msg);
  }
}

int Database::user_version() {
  Statement st = prepare("PRAGMA user_version");
  st.step();
  return static_cast<int>(st.column_int64(0));
}

bool Database::has_column(const std::string& table, const std::string& column) {
  Statement st = prepare("SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2");
  st.bind_text(1, table).bind_text(2, column);
  return st.step() && st.column_int64(0) > 0;
}

std::int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
std::int64_t Database::changes() const { return sqlite3_changes64(db_); }
bool Database::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

}  // namespace leap::store
