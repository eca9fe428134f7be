#pragma once
/// @file
/// `tandem-bench -w save`: snapshots against the disk and the bulk load.
/// `--keys` random pairs are loaded; then, timed, in one run and on one
/// disk (the folder of `--snapshot-path`):
///
/// - `index::save` of the index, beside a plain sequential write of the
///   same number of bytes (write(2) of 16 MiB pieces, then fsync);
/// - both files evicted from the page cache (fsync, then
///   posix_fadvise(DONTNEED)), then `index::open` of the snapshot into a new
///   index, beside a plain sequential read of the plain file (read(2) of
///   16 MiB pieces);
/// - a bulk load of the same pairs, sorted, from memory;
/// - what waits for a save: a batch of gets and a batch of puts submitted
///   while a second save runs, and how long each took to be answered.

#include "cli.hpp"
#include "report.hpp"

#include <tandem/tandem.hpp>

#include <string>
#include <vector>

namespace tandem_bench {

/// Writes `bytes` bytes of `data` to a new file at `path` in 16 MiB
/// write(2)s, then fsync (the file stays).
void plain_write(const std::string& path, const unsigned char* data, std::size_t bytes);

/// Runs the save/open measurement on `idx` (empty, configured) and prints it.
/// @return one row per measured step for --csv
std::vector<json> run_save(const options& opt, const tandem::config& cfg, tandem::index& idx);

}  // namespace tandem_bench
