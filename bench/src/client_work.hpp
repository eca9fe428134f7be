#pragma once
/// @file
/// --client-work: tandem as a program that holds its keys in arrays uses it.
/// Each client thread takes its share of the workload's batches (batch i
/// to client i mod K); inside the timed loop it hands each batch's key
/// array to the index (gets: index::submit(columns), read and written in
/// place; mixed ops: a tandem::batch built from the arrays, as a user of
/// the batch API builds it) and, once answered, reads every answer. Up to
/// --inflight batches per client are in flight. Timed from the first
/// submit to the last answer read, beside the index-only run of the same
/// invocation (batches prebuilt, answers counted by the index's thread).
#include "baselines.hpp"

#include <tandem/tandem.hpp>

#include <cstddef>
#include <vector>

namespace tandem_bench {

struct client_work_figures {
  run_figures run;  ///< ops, seconds, hits (found answers)
  /// Seconds the clients spent (summed over them) handing batches over,
  /// waiting for answers and reading them.
  double submitting = 0, waiting = 0, reading = 0;
  tandem::stage_times stages;  ///< the index's stage seconds over the run
};

client_work_figures run_client_work(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                                    std::size_t clients, std::size_t inflight);

}  // namespace tandem_bench
