#pragma once
// A linearizability check of one key's history (Wing and Gong's search,
// with Lowe's memo of visited states): ops on one key, each with the times
// its call began and returned and what it answered, are linearizable when
// some order of them, consistent with real time (an op that returned
// before another began comes first), replays on a register (the key
// absent, or holding a value) to exactly those answers. Single-key ops
// compose (linearizability is local), so a history of many keys is checked
// key by key.
#include <tandem/batch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

/// One call on one key: get, put, insert or erase, with what it answered
/// (found, and the value: a get's value, a put's or erase's previous one,
/// an insert's present one; an insert found nothing when it inserted).
struct key_call {
  std::chrono::steady_clock::time_point begin, end;
  op_type type = op_type::get;
  value_type arg = 0;  // the value a put or insert writes
  bool found = false;
  value_type value = 0;
  bool any_value = false;  // found, whatever the value (index::insert says only "present")
};

/// What `c` answers on a register holding `state`, and the state after it.
inline bool replays(const key_call& c, std::optional<value_type>& state) {
  const bool match = c.found == state.has_value() && (!c.found || c.any_value || c.value == *state);
  if (!match) return false;
  if (c.type == op_type::put) state = c.arg;
  if (c.type == op_type::insert && !state) state = c.arg;
  if (c.type == op_type::erase) state.reset();
  return true;
}

/// @return whether `calls` (one key's, any order) are linearizable from
///         `initial`; `why` says what could not be placed when not.
inline bool linearizable(std::vector<key_call> calls, std::optional<value_type> initial, std::string* why = nullptr) {
  std::sort(calls.begin(), calls.end(), [](const key_call& a, const key_call& b) { return a.begin < b.begin; });
  const std::size_t n = calls.size();
  const std::size_t words = (n + 63) / 64;
  // Depth-first over orders: each step places one call not yet placed that
  // began before every unplaced call returned (a minimal call).
  struct frame {
    std::vector<std::uint64_t> placed;
    std::optional<value_type> state;
    std::size_t next = 0;  // the next candidate to try
  };
  std::set<std::pair<std::vector<std::uint64_t>, std::optional<value_type>>> seen;
  std::vector<frame> stack;
  stack.push_back({std::vector<std::uint64_t>(words, 0), initial, 0});
  std::size_t deepest = 0;
  while (!stack.empty()) {
    frame& f = stack.back();
    std::size_t count = 0;
    for (std::uint64_t w : f.placed) count += static_cast<std::size_t>(__builtin_popcountll(w));
    deepest = std::max(deepest, count);
    if (count == n) return true;
    // The earliest return among unplaced calls bounds the candidates.
    auto earliest = std::chrono::steady_clock::time_point::max();
    for (std::size_t i = 0; i < n; ++i) {
      if (!(f.placed[i / 64] >> (i % 64) & 1)) earliest = std::min(earliest, calls[i].end);
    }
    bool pushed = false;
    for (; f.next < n && calls[f.next].begin <= earliest; ++f.next) {
      const std::size_t i = f.next;
      if (f.placed[i / 64] >> (i % 64) & 1) continue;
      std::optional<value_type> state = f.state;
      if (!replays(calls[i], state)) continue;
      std::vector<std::uint64_t> placed = f.placed;
      placed[i / 64] |= std::uint64_t{1} << (i % 64);
      if (!seen.insert({placed, state}).second) continue;
      ++f.next;
      stack.push_back({std::move(placed), state, 0});
      pushed = true;
      break;
    }
    if (!pushed) stack.pop_back();
  }
  if (why != nullptr) {
    *why = std::to_string(n) + " calls, at most " + std::to_string(deepest) + " of them placed in any order";
  }
  return false;
}

}  // namespace tandem::test
