#pragma once
/// @file
/// `redo_log`: the index's write-ahead log of batches, for recovery after the
/// last snapshot.
///
/// What. When the index has a log folder, it appends the write ops (put,
/// insert, erase, in batch order) of every batch that has any as one
/// *record* tagged with the batch's sequence number, and makes the record as
/// durable as its `config.log_sync_policy` says before it releases the batch's
/// answer. On open it loads the snapshot (consistent at some sequence s) and
/// calls `replay(s, f)`, which hands `f` every later record in order. After a
/// new snapshot at s', `truncate_through(s')` drops the records it covers.
///
/// Files in the folder:
/// - `redo.log`: the records, back to back from offset 0 (layout in
///   redo_log.cpp).
/// - `redo.lock`: held with flock(LOCK_EX) while a `redo_log` is open, so a
///   second opener (another process, or another object of this one) is
///   refused.
/// - `redo.log.new`: the next log while `truncate_through` writes it; renamed
///   over `redo.log` once synced. A leftover one (a crash) is removed on open.
///
/// Crashes. A record counts only if its header checksum and its payload
/// checksum (XXH3-64) match and it lies within the file. A crash while
/// appending leaves a *torn tail*: the file ends inside a record, or its last
/// bytes are garbage or zeros (the file grew before the data reached the
/// disk). `replay` cuts the file at the last whole record, so appends go on
/// from a clean log. A damaged record followed by whole records is a torn
/// tail too when it was never synced (writeback may reach the disk out of
/// order), and corruption when it was: every record carries the sequence
/// through which the log had been fdatasync'ed when it was appended, and a
/// later record that vouches for the damaged one makes `replay` throw
/// (synced data must not vanish silently). So damage to records that no
/// later record vouches for (the last sync group before the log was closed)
/// looks like a torn tail.
///
/// Durability. `append` only queues; `flush` hands the queued records to the
/// OS with pwritev, one call per IOV_MAX (1024) pieces, a large record being
/// four: they survive a crash of the process, not of the machine. `sync`
/// flushes and fdatasyncs: they survive a power loss. When to call which is
/// the caller's policy (tandem::log_sync).
///
/// Copies. `append` borrows the caller's key, arg and type arrays of records
/// of 64 KiB and more and writes them straight from there (no copy); smaller
/// records are copied into the log's buffer. The arrays must stay valid and
/// unchanged until the next `flush`, `sync`, `replay`,
/// `truncate_through` or the destructor returns.
///
/// Failures. Every system call that fails throws `tandem::error` naming the
/// file and the reason (strerror). A failed write drops all queued records
/// and cuts the file back to its last whole record, so the log goes on as if
/// they had never been appended; a failed fdatasync, or a failed cut, marks
/// the log failed (the kernel may have dropped the unsynced pages, so a
/// later sync would lie), and every later call throws: reopen the log.
///
/// Threads: one thread at a time, except `sync_written`, which one other
/// thread may call while `append` or `flush` run (it fdatasyncs what
/// earlier flushes wrote); nothing else may run beside it.

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/storage/detail/posix_file.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem::host {

/// Receives one replayed record: its sequence number and its `n` write ops
/// (types, keys, args). The arrays are valid during the call only.
using replay_fn = std::function<void(std::uint64_t sequence, const op_type* types, const key_type* keys,
                                     const value_type* args, std::size_t n)>;

class redo_log {
 public:
  /// @brief Opens the log of folder `dir`, creating the folder (its parent
  ///        is synced) and an empty `redo.log` if missing. Existing records
  ///        are kept; call `replay` before appending.
  /// @throws tandem::error when a file cannot be made or opened, or when
  ///         another `redo_log` holds the folder's lock
  explicit redo_log(const std::string& dir);

  /// @brief Writes the queued records (see `flush`); errors are ignored, so
  ///        call `flush` or `sync` first to see them. Does not fdatasync.
  ~redo_log();

  redo_log(const redo_log&) = delete;
  redo_log& operator=(const redo_log&) = delete;

  /// @brief Reads the log: calls `f` for every whole record with sequence >
  ///        `after`, in file order, and stops at the first damaged one. A
  ///        torn tail is cut off; then the file is fdatasync'ed. Flushes
  ///        queued records first. Appends may follow. An empty `f` only
  ///        finds the end.
  /// @return the last sequence above `after` (passed to `f`), or `after`
  ///         when there is none
  /// @throws tandem::error on a read, truncate or sync error, and on
  ///         corruption (a damaged record that a later record shows was
  ///         synced; the message names the file and the offset). `f` may
  ///         have run for the records before the damage. An exception from
  ///         `f` propagates, with the file unchanged.
  std::uint64_t replay(std::uint64_t after, const replay_fn& f);

  /// @brief Queues one batch's write ops as one record; writes nothing (see
  ///        "Copies" for how long the arrays are borrowed). `n` may be 0.
  /// @throws tandem::error before `replay`, on a failed log, or when
  ///         `sequence` is not above `last_sequence()`
  void append(std::uint64_t sequence, const op_type* types, const key_type* keys, const value_type* args,
              std::size_t n);

  /// @brief Writes the queued records to the file with pwritev, one call per
  ///        IOV_MAX pieces (no fdatasync).
  /// @throws tandem::error on a write error (the queued records are dropped)
  void flush();

  /// @brief `flush`, then fdatasync (skipped when nothing was written since
  ///        the last one): every record appended so far survives a power loss.
  /// @throws tandem::error as `flush` does, and on a sync error (the log is
  ///         then failed)
  void sync();

  /// @brief fdatasyncs what `flush` has written so far (nothing when that is
  ///        synced already); may run on a second thread beside `append`
  ///        and `flush`.
  /// @throws tandem::error on a sync error. The log is not marked failed
  ///         (the other thread may be using it): the caller must stop
  ///         trusting it and reopen it.
  void sync_written();

  /// @brief Drops the records with sequence <= `sequence` (a snapshot now
  ///        covers them): empties the file when that is all of them, else
  ///        writes the later records to `redo.log.new`, syncs it and renames
  ///        it over `redo.log` (then syncs the folder). Flushes first.
  /// @throws tandem::error on an I/O error; the log is unchanged unless the
  ///         error came after the rename (then it is failed)
  void truncate_through(std::uint64_t sequence);

  /// @brief Checks that `redo.log` holds whole records only, with increasing
  ///        sequences, and ends where this object thinks it does. Flushes.
  /// @throws tandem::invariant_error naming the first broken invariant
  void verify();

  /// @return bytes of the log: the file and the queued records
  [[nodiscard]] std::uint64_t bytes() const noexcept { return end_ + queued_bytes_; }
  /// @return the last appended or replayed sequence (0 for an empty log;
  ///         truncation does not lower it)
  [[nodiscard]] std::uint64_t last_sequence() const noexcept { return last_sequence_; }
  /// @return the path of `redo.log`
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  /// Bytes queued for the next flush: the caller's array (`data`) or
  /// `staged_[offset, offset + bytes)` when `data` is null.
  struct piece {
    const void* data;
    std::size_t offset;
    std::size_t bytes;
  };

  void check_usable(const char* call, bool need_replay) const;
  [[noreturn]] void fail(const std::string& what, int err);
  void datasync();
  void stage(const void* p, std::size_t bytes);
  void borrow(const void* p, std::size_t bytes);
  void drop_queue() noexcept;
  [[noreturn]] void write_failed(int err);
  [[nodiscard]] std::uint64_t file_size() const;

  std::string dir_;
  std::string path_;  ///< dir_/redo.log
  detail::unique_fd dir_fd_;
  detail::unique_fd lock_fd_;
  detail::unique_fd fd_;
  bool replayed_ = false;
  std::string failure_;  ///< why the log failed; empty while usable

  std::uint64_t end_ = 0;            ///< file size: whole records only
  /// Sequence of the file's last record (0: empty file); read by sync_written.
  std::atomic<std::uint64_t> file_last_{0};
  /// Records up to this sequence are fdatasync'ed (0 or a record of the
  /// file); written by sync_written.
  std::atomic<std::uint64_t> durable_{0};
  std::uint64_t last_sequence_ = 0;  ///< file_last_ or the last queued record's
  /// Writes to the file so far (flushes, cuts), and how many of them the
  /// last fdatasync covered: equal when nothing is left to sync.
  std::atomic<std::uint64_t> written_{0}, synced_{0};

  std::vector<unsigned char> staged_;
  std::vector<piece> queue_;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t queued_from_ = 0;  ///< last_sequence_ before the queue (restored when a write fails)
};

}  // namespace tandem::host
