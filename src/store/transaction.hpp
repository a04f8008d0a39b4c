#pragma once
// RAII transaction: commit explicitly, roll back in the destructor otherwise.

namespace leap::store {

class Database;

/// A write transaction on one Database. Begins with BEGIN IMMEDIATE, so the write lock is
/// taken up front (waiting up to the busy timeout) and a later statement cannot fail with a
/// lock upgrade. Call commit() on success; if the object is destroyed without a commit (an
/// exception unwound past it), everything written inside is rolled back. Not nestable.
class Transaction {
 public:
  /// Begins the transaction; throws StoreError if one is already open or the lock times out.
  explicit Transaction(Database& db);
  /// Rolls back unless commit() succeeded. Never throws.
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  /// Commits; throws StoreError on failure (the destructor then rolls back).
  void commit();
  /// Rolls back now (idempotent); a later commit() throws.
  void rollback() noexcept;
  /// True until commit() or rollback().
  bool active() const { return active_; }

 private:
  Database& db_;
  bool active_ = false;
};

}  // namespace leap::store
