// The dispatcher thread (index_impl.hpp): runs the queue's jobs strictly in
// queue order. While one batch runs its leaf phase on the dispatcher, the
// next queued batch is validated and routed on the look-ahead thread
// (DESIGN, pipelining), on the layout version of that moment, which stays
// correct after the first batch's splits because ops follow right links.
// Batches found waiting together (each below config.group_commit_ops) are
// folded into one job whose ops are theirs back to back: one run, then each
// gets a window of its answers (group commit, delivery.cpp). A batch of gets
// answered directly may go to a reader task on the arena, which answers and
// delivers it while the dispatcher takes up the next; readers run beside
// each other, and a batch that may write waits for them.
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <algorithm>
#include <array>
#include <new>
#include <utility>

namespace tandem {

thread_local bool index::impl::serial_stage_ = false;

prepared* index::impl::take_slot(job* j) {
  prepared* p = &slots_[next_slot_];
  p->reset(j, &spaces_[next_slot_]);
  next_slot_ = (next_slot_ + 1) % pipeline_depth;
  // Batches are taken up in queue order: their sequence numbers are given
  // here, since a reader task may deliver before an earlier batch.
  p->sequence = sequence_;
  sequence_ += j->members.empty() ? 1 : j->members.size();
  return p;
}

job* index::impl::gather(job* first) {
  if (!foldable(*first)) return first;
  std::array<job*, max_group_members> taken;
  std::size_t count = 0;
  std::size_t total = first->ops.size();
  std::uint64_t output = scan_output_bound(*first);
  const std::uint64_t cap = fold_output_cap();
  taken[count++] = first;
  while (count < max_group_members) {
    job* j = take_next();
    if (!j) break;
    const std::uint64_t more = foldable(*j) ? scan_output_bound(*j) : 0;
    if (!foldable(*j) || total + j->ops.size() > cfg_.group_commit_ops || more > cap - output) {
      held_.push_front(j);  // runs next, after the batches folded so far
      break;
    }
    taken[count++] = j;
    total += j->ops.size();
    output += more;
  }
  if (count == 1) return first;
  try {
    // The members keep their own ops (their key columns become their
    // results' keys); the combined job gets a copy.
    auto combined = std::make_unique<job>();
    combined->submitted = first->submitted;
    combined->members.assign(taken.begin(), taken.begin() + static_cast<std::ptrdiff_t>(count));
    combined->member_begin.reserve(count + 1);
    combined->ops.reserve(total);
    for (std::size_t m = 0; m < count; ++m) {
      combined->member_begin.push_back(combined->ops.size());
      combined->ops.append(taken[m]->ops);
      combined->writes += taken[m]->writes;
    }
    combined->member_begin.push_back(total);
    return combined.release();
  } catch (const std::bad_alloc&) {
    // No memory to fold them: they run one by one, in queue order.
    for (std::size_t m = count; m-- > 1;) held_.push_front(taken[m]);
    return first;
  }
}

void index::impl::dispatch() {
  prepared* ready = nullptr;  // routed, its leaf phase next
  // Leaf phase done; its answers on their way back on the GPU, or its redo
  // log record being written (the tasks keep their failures in the batch).
  prepared* pending = nullptr;
  auto pending_done = [&] {
    return (!pending->scattering || scatter_->idle()) && (!pending->logging || logger_->idle()) &&
           (pending->log_sequence == 0 || durable(*pending));
  };
  // The logger is free for the next record once the pending one's is written.
  auto logger_free = [&] {
    if (!pending || !pending->logging) return;
    logger_->wait();
    pending->logging = false;
  };
  auto deliver_pending = [&] {
    if (!pending) return;
    if (pending->scattering) scatter_->wait();
    logger_free();
    wait_durable(*pending);
    deliver(*pending);
    pending = nullptr;
  };
  // A slot is reused every pipeline_depth batches; batches handed to reader
  // tasks go on past a pending one, whose slot must not be taken while it
  // waits.
  auto take = [&](job* j) {
    if (pending == &slots_[next_slot_]) deliver_pending();
    return take_slot(j);
  };
  // A large batch queued behind the one being routed is validated on this
  // thread while it waits for that route: validation then stays off the
  // look-ahead thread, which routes batch after batch when their leaf
  // phases take no time (gets answered from leaf copies).
  prepared* early = nullptr;
  auto validate_early = [&]() -> prepared* {
    job* j = take_next();
    if (!j) return nullptr;
    if (j->type != job::kind::batch || foldable(*j) || is_small(*j)) {
      held_.push_front(j);  // taken up in its turn, the usual way
      return nullptr;
    }
    prepared* p = take(j);
    try {
      run_in_arena([&] { validate(*p); });
    } catch (...) {
      p->failure = std::current_exception();
    }
    p->validated = true;
    return p;
  };
  for (;;) {
    if (!ready && early) {
      ready = std::exchange(early, nullptr);
      prepare(*ready);
    }
    if (!ready) {
      job* j = take_next();
      if (!j) {
        deliver_pending();  // nothing else to overlap it with
        j = pop_or_wait();
      }
      if (!j) {
        wait_for_answers();
        return;
      }
      if (j->type == job::kind::save) {
        // It reads the leaves beside later readers; writes wait for it.
        try {
          start_save(j);
        } catch (...) {
          j->finished.set_exception(std::current_exception());
          delete j;
        }
        continue;
      }
      if (j->type != job::kind::batch) {
        deliver_pending();  // loads and barriers come after every earlier batch
        wait_for_answers();
        gate_.begin_write();
        run(j);
        // Counted (and numbered) before readers may enter again: a reader
        // that sees the job's effect gets a number after it.
        gate_.writes_done(j->writes, sequence_);
        gate_.end_write();
        delete j;
        continue;
      }
      j = gather(j);
      ready = take(j);
      const serial_scope serial(is_small(*j));
      prepare(*ready);
    }
    // What readers on callers see once its writes are done: its writes,
    // and the number of the batch after it.
    const std::uint32_t writes = ready->j->writes;
    const std::uint64_t after = ready->sequence + (ready->j->members.empty() ? 1 : ready->j->members.size());
    // A batch answered directly reads beside the readers on callers, but
    // not beside one-key writes there (reader_gate): it sees each wholly
    // or not at all. A reader task ends the batch read itself.
    if (ready->direct) ready->batch_read = gate_.begin_batch_read();
    if (ready->direct && launch_reader(*ready)) {
      gate_.writes_done(writes, after);  // it only reads
      ready = nullptr;  // it runs beside the dispatcher, which takes up the next
      continue;
    }
    // The next batch is validated and routed on the look-ahead thread while
    // this one runs its leaf phase; a small one on this thread afterwards.
    prepared* next = nullptr;
    bool next_small = false;
    if (early) {
      next = std::exchange(early, nullptr);
      lookahead_->start([this, next] { prepare(*next); });
    } else if (job* j2 = take_next()) {
      if (j2->type == job::kind::batch) {
        j2 = gather(j2);
        next = take(j2);
        next_small = is_small(*j2);
        if (!next_small) lookahead_->start([this, next] { prepare(*next); });
      } else {
        held_.push_front(j2);
      }
    }
    // It may write (verify_each_batch: the check after it may rebuild the
    // leaf table).
    const bool exclusive = !ready->direct || cfg_.verify_each_batch;
    if (exclusive) {
      wait_for_readers();
      gate_.begin_write();
      reroute_after_writes(*ready);
    }
    if (pending && pending_done()) deliver_pending();  // no need to keep it waiting
    const bool small = is_small(*ready->j);
    {
      const serial_scope serial(small);
      leaf_stage(*ready);
    }
    if (ready->failure && ready->patched_copies) {  // the copies hold puts the leaves do not
      if (next && !next_small) lookahead_->wait();
      forget_patches(next_small ? nullptr : next);
    }
    gate_.writes_done(writes, after);  // before readers may enter again (see above)
    if (exclusive) gate_.end_write();
    if (ready->direct) gate_.end_batch_read(ready->batch_read);
    if (needs_log(*ready)) {
      // Records go in queue order: the previous one is written first (its
      // sync may still run beside this one's write).
      logger_free();
      if (small) {
        write_log(*ready);  // a hand-over would cost more than the write
      } else {
        ready->logging = true;
        logger_->start([this, p = ready] { write_log(*p); });
      }
    }
    deliver_pending();  // the previous batch, in order
    if (ready->gpu_scatter) {
      ready->scattering = true;
      scatter_->start([this, p = ready] { scatter_on_gpu(*p); });
    }
    if (ready->scattering || ready->logging || ready->log_sequence != 0) {
      pending = ready;
    } else {
      deliver(*ready);
    }
    ready = nullptr;
    if (next) {
      if (next_small) {
        const serial_scope serial(true);
        prepare(*next);
      } else {
        early = validate_early();
        lookahead_->wait();  // prepare() keeps its exceptions in next->failure
      }
      ready = next;
    }
  }
}

void index::impl::run(job* j) {
  try {
    if (j->type == job::kind::load) {
      run_in_arena([&] { load(j->pairs); });
      publish_stats(nullptr, false, 0);  // keys, leaves and bytes of the new contents
      if (!cfg_.storage_dir.empty() && !recovering_.load()) checkpoint_after_load();
    } else if (j->type == job::kind::barrier) {
      run_in_arena([&] { j->barrier_work(); });
    }
    j->finished.set_value();
  } catch (...) {
    j->finished.set_exception(std::current_exception());
  }
}

void index::impl::prepare(prepared& p) {
  if (p.failure) return;  // validate_early (dispatch) failed
  try {
    p.version = layout_snapshot();
    run_in_arena([&] {
      if (!p.validated) validate(p);
      gather_log_ops(p);
    });
    p.direct = p.gets_only && p.n != 0 && p.n <= cfg_.direct_get_ops &&
               (p.n <= cfg_.small_batch_ops || p.n <= direct_gets_per_leaf * p.version->leaf_count()) &&
               !copies_take_gets(p) && !keys_on_gpu(*p.j);
    if (p.n != 0 && !p.direct) {
      // Not inside the arena: the GPU side waits for the GPU on this thread,
      // never on a TBB worker; the CPU parts enter the arena themselves.
      route_and_claim(p);
    }
  } catch (...) {
    p.failure = std::current_exception();
  }
}

void index::impl::route_and_claim(prepared& p) {
  const auto t0 = clock_type::now();
  route(p);
  p.times.route = seconds_since(t0);
  if (!p.from_copies) {
    p.routed = p.n;
    note_heat(p);
  }
  claim_writes(p);  // before any later batch is routed
}

void index::impl::leaf_stage(prepared& p) {
  if (p.failure || refuse_if_log_failed(p)) return;
  try {
    run_in_arena([&] { run_leaves(p, p.splits); });
  } catch (...) {
    p.failure = std::current_exception();
    p.gpu_scatter = false;
    if (p.direct) return;  // it only read (and may run beside other readers)
    // The batch may have split leaves before failing: bring the leaf table
    // and inner layout back in line with the leaves so the index stays
    // consistent for the next batch.
    try {
      run_in_arena([&] { rebuild_table_from_store({}); });
    } catch (...) {
    }
  }
}

bool index::impl::launch_reader(prepared& p) {
  // Readers run on the arena's workers, not on the dispatcher: with few
  // threads the dispatcher's share of the work outweighs the overlap, and
  // more readers at once than a quarter of the threads stretch each one's
  // latency. Callbacks run on the dispatcher in queue order; small batches
  // are cheaper there than handed over; verify_each_batch may rebuild the
  // leaf table.
  const std::size_t most = std::min(max_readers, threads_ / 4);
  if (most < 2 || cfg_.verify_each_batch || p.failure || is_small(*p.j) || p.j->done) return false;
  for (const job* m : p.j->members) {
    if (m->done) return false;
  }
  for (;;) {
    for (std::size_t i = 0; i < most; ++i) {
      reader_slot& r = readers_[i];
      if (r.busy.load(std::memory_order_acquire)) continue;
      r.p = std::move(p);
      r.busy.store(true, std::memory_order_relaxed);
      readers_running_.fetch_add(1, std::memory_order_acq_rel);
      try {
        // The task touches nothing of the index after its count drops: the
        // index may be destroyed as soon as it reads 0.
        arena_.enqueue([this, slot = &r] {
          leaf_stage(slot->p);
          gate_.end_batch_read(slot->p.batch_read);  // begun by the dispatcher
          deliver(slot->p, true);
          slot->busy.store(false, std::memory_order_release);
          readers_running_.fetch_sub(1, std::memory_order_acq_rel);
        });
      } catch (...) {  // no memory for the task: it runs on the dispatcher
        p = std::move(r.p);
        r.busy.store(false, std::memory_order_relaxed);
        readers_running_.fetch_sub(1, std::memory_order_acq_rel);
        return false;
      }
      return true;
    }
    std::this_thread::yield();  // all slots busy: one frees within a batch's time
  }
}

void index::impl::wait_for_readers() const {
  while (readers_running_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

}  // namespace tandem
