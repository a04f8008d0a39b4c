#include "store/transaction.hpp"

#include <sqlite3.h>

#include "store/database.hpp"
#include "util/error.hpp"

namespace leap::store {

Transaction::Transaction(Database& db) : db_(db) {
  if (db_.in_transaction()) {
    throw StoreError("store " + db_.path() + ": nested transaction (one is already open)");
  }
  db_.exec("BEGIN IMMEDIATE");
  active_ = true;
}

Transaction::~Transaction() { rollback(); }

void Transaction::commit() {
  if (!active_) {
    throw StoreError("store " + db_.path() + ": commit of a transaction that is not open");
  }
  db_.exec("COMMIT");
  active_ = false;
}

void Transaction::rollback() noexcept {
  if (!active_) return;
  active_ = false;
  // SQLite may already have rolled back on its own (e.g. after SQLITE_FULL); only roll back
  // a transaction that is still open.
  if (db_.in_transaction()) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace leap::store
