#pragma once
/// @file
/// `tandem-bench -w churn`: a sliding window of keys. The index is loaded
/// with the window (`--keys` W keys); each round is one batch that inserts
/// the next W/16 keys at the window's right end, erases the W/16 oldest,
/// and reads among them (W/16 gets of keys in the window, W/256
/// lower_bounds, one count over the window). Keys are time-ordered with
/// `--dist sequential` (the default for churn: key i is i) and random
/// otherwise (key i is a hash of i: the same churn over random keys).
/// Reported per round: M ops/s (host input to host output), leaves, dead
/// leaves, leaf bytes and the process's resident memory; then a fresh load
/// of the last window beside it (leaves and leaf bytes), absl's rounds in
/// the same run, and the window erased whole: leaves, leaf bytes and
/// resident memory before and after index::compact, beside an empty index's.

#include "cli.hpp"
#include "report.hpp"

#include <tandem/tandem.hpp>

#include <vector>

namespace tandem_bench {

/// Runs the churn rounds on `idx` (empty, configured) and prints them.
/// @return the rows (one per round, then the summary rows) for --csv/--plot
std::vector<json> run_churn(const options& opt, const tandem::config& cfg, tandem::index& idx,
                                      std::size_t rss_empty);

/// Resident memory of this process, bytes (/proc/self/statm; 0 where absent).
[[nodiscard]] std::size_t resident_bytes();
/// Of it, anonymous memory in transparent huge pages (/proc/self/smaps_rollup).
[[nodiscard]] std::size_t huge_page_bytes();

}  // namespace tandem_bench
