#pragma once
/// @file
/// --shards N: what more GPUs give one host. N tandem indexes hold N equal
/// ranges of the key space (shard_cut.hpp), shard i on GPU i mod (GPUs
/// found), each loaded with its range's keys: --keys is the keys a shard
/// holds, so the workload loads N times --keys keys. One client thread holds
/// each batch of the workload as arrays (keys; args and types unless every
/// op is a get), cuts it by range, submits every shard's part at once (gets:
/// index::submit(columns), read and answered in place; other ops: a
/// tandem::batch built from the part's arrays) and, once the parts are
/// answered, puts every answer back in batch order and counts the found
/// ones; up to --inflight batches are in flight. Timed from the first cut
/// to the last answer put back: host input to host output. The client's
/// key and answer arrays are pinned (pinned_vector.hpp) in both runs, so an
/// index on a GPU copies them directly and neither run pays the staging of
/// pageable arrays. With --threads 0 each of the N shards gets
/// max(1, hardware threads / N) threads, so that N arenas do not
/// oversubscribe the host; the one shard keeps them all.
///
/// In the same invocation, and first, one shard on one GPU (the first GPU
/// found) holds --keys keys of its own and runs the same number of ops in
/// batches of the same size, as one index's client does: its arrays handed
/// over as they are, answers read in batch order. The ratio of the two is
/// what N GPUs give this host for N times the keys. Both runs get
/// --warmup untimed batches first. Workloads of point ops only (C, A, B,
/// load); --verify (C only) checks every get's answer inside the run.

#include "cli.hpp"
#include "workload.hpp"

#include <tandem/config.hpp>

#include <cstdint>

namespace tandem_bench {

/// @brief Runs --shards: both runs, their table and the ratio; --csv and
///        --json rows (one a run).
/// @param spec the workload with spec.keys the keys of one shard
/// @param cfg  each index's configuration (gpu_device is set per shard)
/// @return the exit status: 0, 1 when a run or an output file failed or
///         --verify found a wrong answer, 2 when an index cannot be made
[[nodiscard]] int run_shards(const options& opt, const workload_spec& spec, const tandem::config& cfg,
                             std::uint64_t warmup);

}  // namespace tandem_bench
