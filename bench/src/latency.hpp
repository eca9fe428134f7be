#pragma once
/// @file
/// tandem-bench --sweep latency: closed-loop clients, each keeping one batch
/// in flight, timed from submit to answer. For every number of clients K
/// (--latency-clients) and batch size B (--latency-batches), K threads each
/// submit batches of B ops of the workload's mix (C: gets; A, B: gets and
/// puts of loaded keys) one after another for --latency-seconds, through
/// tandem::index::submit (future.get() waits) and then, for the same
/// batches from the same threads, through the absl baseline answering on the
/// client's own thread. Every batch is one sample; p50, p99, p99.9 and max
/// come from all samples of a point (nearest rank, not averaged), beside the
/// point's throughput (ops answered / wall seconds). Batches are built
/// before a point starts (16 per client, cycled), outside the timed region;
/// a short untimed warm-up precedes each point.

#include "baselines.hpp"
#include "cli.hpp"
#include "report.hpp"
#include "workload.hpp"

#include <tandem/tandem.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace tandem_bench {

/// @brief Runs the sweep on a loaded `idx` and, when not null, a loaded
///        `absl`; prints its table and returns its rows (for --csv/--json and
///        the plot): system, clients, batch, batches, p50_us, p99_us,
///        p999_us, max_us, ops_per_s.
/// @throws std::invalid_argument when the workload is not C, A or B, or a
///         list is malformed
[[nodiscard]] std::vector<json> run_latency_sweep(tandem::index& idx, baseline* absl, const dataset& ds,
                                                  const workload_spec& spec, const options& opt);

}  // namespace tandem_bench
