#include "crc/worker.hpp"

#include "os/process.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <exception>
#include <utility>

namespace hdsm::crc {

namespace detail {
namespace {
constexpr std::uintptr_t kNeverTags[4] = {kNoPage, kNoPage, kNoPage, kNoPage};
// initial-exec: one load from the thread pointer on every slow path (libhdsm is linked, not
// dlopened), not a call to __tls_get_addr.
constinit thread_local Worker* current_worker __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace

// Outside a task every lookup misses (offset mask 0: only 1-byte accesses even try), so the slow
// path reports the misuse.
const Lookup kOutsideTask{.read_tags = kNeverTags,
                          .write_tags = kNeverTags,
                          .frames = nullptr,
                          .offset_mask = 0,
                          .page_shift = 0,
                          .set_mask = 0,
                          .set_shift = 0};
constinit thread_local std::atomic<const Lookup*> current{&kOutsideTask};

Worker* Worker::current() { return current_worker; }

Worker::Worker(int id, int count, std::size_t local_store, WorkerLink& link, Space space)
    : id_(id),
      made_count_(count),
      count_(count),
      link_(link),
      space_(space),
      buffer_(local_store, fmt::format("crc worker {}", id)) {}

void Worker::begin(const Geometry& g, int count) {
  count_ = count > 0 ? count : made_count_;
  buffer_.configure(g);
  // All zeros between regions (every release clears the bits it set): only the size follows the
  // page size. Zero tables committed as they are written: a large space's bitmaps cost nothing
  // until its pages are.
  if (const std::size_t words = ((space_.bytes >> g.page_shift) + 63) / 64; words > single_listed_.size()) {
    single_listed_ =
        os::ZeroedTable<std::uint64_t>(words, fmt::format("crc worker {}'s single-writer bitmap", id_));
    in_place_listed_ =
        os::ZeroedTable<std::uint64_t>(words, fmt::format("crc worker {}'s in-place bitmap", id_));
  }
  barriers_ = 0;
  aborted_ = false;
  // A task of another runtime's region may run this one's region on its thread (run_with_home makes
  // the caller this runtime's home worker): its worker is that thread's again afterwards.
  outer_worker_ = current_worker;
  outer_lookup_ = detail::current.load(std::memory_order_relaxed);
  current_worker = this;
  detail::current.store(&buffer_.lookup(), std::memory_order_relaxed);
  // Against interrupt(), which may come before this (another worker failed at once): each stores its
  // side, then loads the other's, all sequentially consistent, so one of the two sees the other.
  current_slot_.store(&detail::current, std::memory_order_seq_cst);
  if (interrupted_.load(std::memory_order_seq_cst))
    detail::current.store(&kOutsideTask, std::memory_order_relaxed);
}

// From the home's thread, once the region failed: the worker's next access takes the slow path
// (its lookup never hits), which throws RegionAborted, so a worker that only hits its buffer (one
// spinning on a flag without an acquire, which a data-race-free program never does) still ends its
// task. The worker asked nothing: nothing is sent to it.
void Worker::interrupt() {
  interrupted_.store(true, std::memory_order_seq_cst);
  if (std::atomic<const Lookup*>* slot = current_slot_.load(std::memory_order_seq_cst))
    slot->store(&kOutsideTask, std::memory_order_relaxed);  // after the task's end: the same lookup
}

void Worker::end() {
  release();
  Request r{.op = Op::done, .worker = id_};
  link_.post(r);
  buffer_.clear();
  leave_thread();
}

Request Worker::failure(const std::exception_ptr& error) const noexcept {
  Request r{.op = Op::failed, .worker = id_};
  try {
    if (!describe_failure(error, r)) r.op = Op::done;  // the home ended the region; nothing to report
  } catch (...) {
    // No memory to describe it: the home still learns that this worker failed, without the words.
    r.message = std::string();
    r.errc = 0;
    r.exact = false;
  }
  r.error = error;
  return r;
}

void Worker::leave_thread() {
  current_worker = std::exchange(outer_worker_, nullptr);
  current_slot_.store(nullptr, std::memory_order_relaxed);
  // The outer task goes on where it was, unless its region failed meanwhile (its interrupt() stored
  // the outside marker, which the inner region overwrote).
  const bool outer_runs =
      current_worker != nullptr && !current_worker->interrupted_.load(std::memory_order_seq_cst);
  detail::current.store(outer_runs ? std::exchange(outer_lookup_, nullptr) : &kOutsideTask,
                        std::memory_order_relaxed);
  outer_lookup_ = nullptr;
}

void Worker::failed(const std::exception_ptr& error) {
  Request r = failure(error);
  // What was modified is lost with the region: the buffer empties without write-backs.
  clear_single_writes();
  link_.post(r);
  buffer_.clear();
  leave_thread();
}

std::exception_ptr Worker::run(const std::function<void()>& task, const Geometry& g, int count) {
  try {
    begin(g, count);
  } catch (...) {
    // The buffer's tables could not be laid out (out of memory): the task never ran, and the home
    // waits for this worker's word like any other's. begin() points the task's accesses at the
    // buffer only once everything is in place, so there is nothing to undo here.
    std::exception_ptr error;
    try {  // named as the worker's, the original nested
      error = nested_failure(
          fmt::format("crc worker {}: its page buffer for {} B pages could not be set up", id_, g.page_size));
    } catch (...) {  // out of memory for the words too
      error = std::current_exception();
    }
    Request r = failure(error);
    link_.post(r);
    return error;
  }
  // On the threads transport's workers and on an MPI rank's main thread alike: a task's stack
  // overflow is reported, not a silent death.
  os::prepare_thread_for_faults();
  try {
    {
      const os::RunningUserCode user_code;
      task();
    }
    end();
    return nullptr;
  } catch (abi::__forced_unwind&) {
    os::user_code_ended_its_thread("a crc task");
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    failed(error);
    return error;
  }
}

std::uintptr_t Worker::check_range(const void* address, std::size_t size, const char* what) const {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (a < space_.base || a - space_.base > space_.bytes || space_.bytes - (a - space_.base) < size)
    throw InvalidPointer(
        fmt::format("crc worker {}: {} of {} B at {} (page {:#x}) is outside the shared space "
                    "[{:#x}, {:#x})",
                    id_, what, size, address, a & ~buffer_.lookup().offset_mask, space_.base,
                    space_.base + space_.bytes));
  return a;
}

void Worker::refuse_unallocated(std::uintptr_t a, std::size_t size, const char* what,
                                std::uintptr_t at) const {
  const std::uintptr_t bad = at != 0 ? at : a;
  throw InvalidPointer(
      fmt::format("crc worker {}: {} of {} B at {:#x}{} (page {:#x}) is in shared memory that is not "
                  "allocated (freed, or never allocated)",
                  id_, what, size, a, bad != a ? fmt::format(": its bytes from {:#x}", bad) : std::string(),
                  bad & ~buffer_.lookup().offset_mask));
}

void Worker::check(const Reply& reply, const char* what, std::uintptr_t page) {
  if (reply.status == Status::ok) return;
  if (reply.status == Status::aborted) abort_task();
  throw InvalidArgument(fmt::format("crc worker {}: {}{}: {}", id_, what,
                                    page != 0 ? fmt::format(" (page {:#x})", page) : std::string(),
                                    reply.message));
}

int Worker::miss(std::uintptr_t page, bool write) {
  PageBuffer::Place p = buffer_.place(page);
  std::byte* frame = buffer_.frame_bytes(p.frame);
  // A failed miss (the region ended, the home refused) gives its frame back: a task that goes on after
  // the error would otherwise lose a frame a miss, and a capacity miss would then evict no way.
  try {
    Request r{.op = write ? Op::fetch_write : Op::fetch_read,
              .worker = id_,
              .write = write,
              .page = page_number(page),
              .frame = frame};
    if (p.victim.page != kNoPage && p.victim.dirty) {
      if (p.victim.single) {
        evict_direct(p.victim, frame);
      } else {
        // The combined handshake: the victim's bytes go home and the new page comes in one exchange.
        r.op = Op::flush_fetch;
        r.victim = page_number(p.victim.page);
        r.written = frame;
        ++stats_.flush_fetches;
        ++stats_.write_backs;
      }
    }
    const std::atomic<std::uint32_t>* versions = r.op == Op::fetch_read ? link_.versions() : nullptr;
    if (versions == nullptr) {
      check(link_.call(r), write ? "write fault" : "read miss", page);
    } else {
      // Shared memory: the worker copies the page while its request goes home, and the home only
      // counts it as a reader. The copy holds every change the home made before that if the page's
      // version did not move between the copy's start and the count; a change after the count puts
      // the page on this worker's invalidation list, like any reader's. Otherwise it copies again.
      r.copying = true;
      struct Copy {
        Worker* self;
        std::uintptr_t page;
        std::byte* frame;
        const std::atomic<std::uint32_t>* version;
        std::uint32_t seen;
      } copy{this, page, frame, versions + r.page, 0};
      const Reply reply = link_.call(
          r,
          [](void* c) {
            auto& k = *static_cast<Copy*>(c);
            k.seen = k.version->load(std::memory_order_acquire);
            k.self->copy_in(k.page, k.frame);
          },
          &copy);
      check(reply, "read miss", page);
      if (reply.version != copy.seen) copy_in(page, frame);
    }
  } catch (...) {
    buffer_.unplace(p);
    throw;
  }
  buffer_.install(p, page, write, /*registered=*/true, /*single=*/false);
  ++(write ? stats_.write_faults : stats_.read_misses);
  return p.way;
}

inline void Worker::evict_direct(const PageBuffer::Victim& victim, std::byte* bytes) {
  const std::size_t size = buffer_.geometry().page_size;
  if (victim.single) {
    link_.put(victim.page - space_.base, bytes, size);
    ++stats_.direct_puts;
    note_single(victim.page);
    return;
  }
  Request r{.op = Op::write_back, .worker = id_, .page = page_number(victim.page), .written = bytes};
  check(link_.call(r), "write-back", victim.page);
  ++stats_.write_backs;
}

inline int Worker::miss_direct(std::uintptr_t page, bool single, bool fetch, std::size_t kept) {
  PageBuffer::Place p = buffer_.place(page);
  std::byte* frame = buffer_.frame_bytes(p.frame);
  // The bookkeeping first, while place() left its lines in the cache: the copies after it move twice
  // the page size through the core's first-level cache, which at 8 KiB pages is all of it. The
  // frame keeps the victim's bytes until the page comes in.
  buffer_.install(p, page, /*write=*/single, /*registered=*/false, single);
  try {
    if (p.victim.page != kNoPage && p.victim.dirty) evict_direct(p.victim, frame);
    if (fetch) {
      copy_in(page, frame);
      ++stats_.direct_gets;
    } else if (kept != 0) {
      // An overwrite from the middle of the page: the bytes before it are the shared page's (the
      // whole page goes back at the release).
      link_.get(page - space_.base, frame, kept);
    }
  } catch (...) {
    buffer_.drop(p.way);  // never a tag for bytes that did not come
    throw;
  }
  return p.way;
}

int Worker::ensure(std::uintptr_t page, Access access, bool missed, std::size_t kept) {
  switch (access) {
    case Access::read:
    case Access::read_only:
      if (!missed)
        if (const int way = buffer_.find_read(page); way >= 0) return way;
      return access == Access::read ? miss(page, false) : miss_direct(page, false, true);
    case Access::write: {
      if (!missed)
        if (const int way = buffer_.find_write(page); way >= 0) return way;
      if (const int way = buffer_.find_read(page); way >= 0) {
        if (buffer_.registered(way)) {
          // An upgrade is a write fault: permission from the home, and the page again if the copy
          // went stale (another writer's update reached the home since it came).
          Request r{.op = Op::upgrade,
                    .worker = id_,
                    .write = true,
                    .page = page_number(page),
                    .frame = buffer_.way_bytes(way)};
          const Reply reply = link_.call(r);
          check(reply, "write fault", page);
          ++stats_.write_faults;
          if (reply.data) ++stats_.upgrades_with_data;
          buffer_.grant_write(way, false);
          return way;
        }
        buffer_.drop(way);  // a read-only copy: the home must count this writer
      }
      return miss(page, true);
    }
    case Access::write_single:
    case Access::overwrite:
      if (!missed)
        if (const int way = buffer_.find_write(page); way >= 0) return way;
      if (const int way = buffer_.find_read(page); way >= 0) {
        buffer_.grant_write(way, true);
        return way;
      }
      return miss_direct(page, true, /*fetch=*/access == Access::write_single, kept);
  }
  return -1;
}

namespace {
// The element an access moves: a call to memcpy costs more than the byte itself.
inline void copy_element(std::byte* to, const std::byte* from, std::size_t size) {
  switch (size) {
    case 1:
      *to = *from;
      return;
    case 2:
      std::memcpy(to, from, 2);
      return;
    case 4:
      std::memcpy(to, from, 4);
      return;
    case 8:
      std::memcpy(to, from, 8);
      return;
    default:
      std::memcpy(to, from, size);
  }
}
}  // namespace

void Worker::access(Access access, const void* address, void* bytes, std::size_t size) {
  if (interrupted_.load(std::memory_order_relaxed)) [[unlikely]]
    abort_task();
  // A miss, most of the time: one page, inside the space, whose tags the inline access just
  // looked up. (Anything else goes the general way, which also says what is wrong.)
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  const std::uintptr_t mask = buffer_.lookup().offset_mask;
  if (a - space_.base < space_.bytes && size != 0 && (a & mask) + size <= mask + 1) [[likely]] {
    if (written_in_place(a & ~mask)) [[unlikely]] {
      access_in_place(access, a, static_cast<std::byte*>(bytes), size);
      return;
    }
    const bool reading = access == Access::read || access == Access::read_only;
    check_allocated(a, size, reading ? "read" : "write");
    assert((reading ? buffer_.find_read(a & ~mask) : buffer_.find_write(a & ~mask)) < 0);
    std::byte* local = buffer_.way_bytes(ensure(a & ~mask, access, /*missed=*/true)) + (a & mask);
    auto* out = static_cast<std::byte*>(bytes);
    if (reading)
      copy_element(out, local, size);
    else
      copy_element(local, out, size);
    return;
  }
  const char* what = access == Access::read || access == Access::read_only ? "read" : "write";
  std::uintptr_t at = check_range(address, size, what);
  // Every page before any is touched: an access that runs into memory not allocated fails whole, and
  // its error names the access the task made, not the piece of it on that page.
  if (space_.granules != nullptr)
    for (std::uintptr_t piece = at; piece < at + size; piece = (piece & ~mask) + mask + 1)
      if (!space_.granules->allocated(piece - space_.base)) [[unlikely]]
        refuse_unallocated(at, size, what, piece);
  auto* out = static_cast<std::byte*>(bytes);
  // Page by page: an access that straddles two pages takes two.
  while (size != 0) {
    const std::uintptr_t page = at & ~mask;
    const std::size_t offset = at & mask;
    const std::size_t piece = std::min(size, mask + 1 - offset);
    if (written_in_place(page)) {
      access_in_place(access, at, out, piece);
    } else {
      std::byte* local = buffer_.way_bytes(ensure(page, access)) + offset;
      if (access == Access::read || access == Access::read_only)
        std::memcpy(out, local, piece);
      else
        std::memcpy(local, out, piece);
    }
    at += piece;
    out += piece;
    size -= piece;
  }
}

std::pair<std::byte*, std::size_t> Worker::localize(Access access, const void* address, std::size_t element) {
  if (interrupted_.load(std::memory_order_relaxed)) [[unlikely]]
    abort_task();
  const std::uintptr_t a = check_range(address, element, "localized access");
  const std::uintptr_t mask = buffer_.lookup().offset_mask;
  const std::size_t offset = a & mask;
  if (offset + element > mask + 1)
    throw InvalidArgument(
        fmt::format("crc worker {}: the element of {} B at {} straddles pages {:#x} and {:#x}; "
                    "localized access needs whole elements (use read or write)",
                    id_, element, address, a & ~mask, (a & ~mask) + mask + 1));
  const std::uintptr_t page = a & ~mask;
  check_allocated(a, element, "localized access");
  const std::size_t count = (mask + 1 - offset) / element;
  if (written_in_place(page) ||
      (in_place_ && access != Access::read && access != Access::write && buffer_.find_read(page) < 0)) {
    // Zero copy: the page is not in the buffer (a buffered copy may hold this worker's own writes,
    // so it is used as it is), and the variant's promise makes the shared page itself safe to use.
    if (access != Access::read_only) {
      note_single(page);
      if (set_bit(in_place_listed_, page_number(page))) ++in_place_pages_;
    }
    ++stats_.in_place;
    return {reinterpret_cast<std::byte*>(a), count};
  }
  const int way = ensure(page, access, false, access == Access::overwrite ? offset : 0);
  buffer_.keep(way);  // also on a hit: the run must outlive the next three pages to come in
  return {buffer_.way_bytes(way) + offset, count};
}

void Worker::write_back(int way, std::uintptr_t page, bool single) {
  std::byte* bytes = buffer_.way_bytes(way);
  PageBuffer::Victim v{.page = page, .dirty = true, .single = single};
  evict_direct(v, bytes);
  buffer_.clean(way);
}

void Worker::release() {
  buffer_.for_each_modified(
      [&](int way, std::uintptr_t page, bool single) { write_back(way, page, single); });
  buffer_.modified_done();
  note_single_writes();
}

void Worker::clear_single_writes() {
  for (const std::uint64_t p : single_written_) {
    single_listed_[p / 64] &= ~(std::uint64_t{1} << (p % 64));
    in_place_listed_[p / 64] &= ~(std::uint64_t{1} << (p % 64));
  }
  single_written_.clear();
  in_place_pages_ = 0;
}

void Worker::access_in_place(Access access, std::uintptr_t a, std::byte* bytes, std::size_t size) {
  auto* shared = reinterpret_cast<std::byte*>(a);
  if (access == Access::read || access == Access::read_only)
    std::memcpy(bytes, shared, size);
  else
    std::memcpy(shared, bytes, size);
}

void Worker::note_single_writes() {
  if (single_written_.empty()) return;
  // One note for them all.
  Request note{.op = Op::single_put, .worker = id_};
  note.pages = single_written_;
  link_.post(note);
  clear_single_writes();
}

void Worker::acquire() {
  for (const std::uint64_t p : invalidations_) {
    const std::uintptr_t page = space_.base + (p << buffer_.geometry().page_shift);
    const int way = buffer_.find_read(page);
    if (way < 0) continue;
    // Still modified (a lock taken before this worker released): its writes go home first.
    if (buffer_.find_write(page) == way) write_back(way, page, buffer_.single(way));
    buffer_.drop(way);
    ++stats_.invalidations;
  }
  invalidations_.clear();
  // Read-only and single-writer copies are unknown to the home: none survives an acquire. A single
  // writer's page still modified goes back first.
  buffer_.for_each_modified([&](int way, std::uintptr_t page, bool single) {
    if (single) write_back(way, page, true);
  });
  note_single_writes();
  stats_.invalidations += buffer_.drop_unregistered();
}

void Worker::lock(int number) {
  invalidations_.clear();  // the reply adds to it only what is new (none left from a failed acquire)
  Request r{.op = Op::lock, .worker = id_, .number = number, .invalidations = &invalidations_};
  check(link_.call(r), fmt::format("lock {}", number).c_str(), 0);
  acquire();
  ++stats_.locks;
}

void Worker::unlock(int number) {
  // Once the region has failed, its locks end with it: an unlock then does nothing. Lock guards
  // unlock in their destructors while the failure unwinds the task, and a second exception thrown
  // from there would end the process (std::terminate).
  if (aborted_) return;
  const bool unwinding = std::uncaught_exceptions() > 0;
  try {
    release();
    Request r{.op = Op::unlock, .worker = id_, .number = number};
    check(link_.call(r), fmt::format("unlock {}", number).c_str(), 0);
  } catch (const RegionAborted&) {
    if (!unwinding) throw;
  }
}

void Worker::barrier() {
  release();
  invalidations_.clear();
  Request r{.op = Op::barrier, .worker = id_, .sequence = barriers_++, .invalidations = &invalidations_};
  check(link_.call(r), "barrier", 0);
  acquire();
  ++stats_.barriers;
}

namespace {
Worker& in_task(const char* what) {
  Worker* w = Worker::current();
  if (w == nullptr)
    throw InvalidArgument(
        fmt::format("crc::{} outside a task: shared data is reached inside Runtime::run", what));
  return *w;
}
}  // namespace

// Reached only from the inline load and store, after their tag lookup missed (or did not fit).
void access(Access access, const void* address, void* bytes, std::size_t size) {
  if (Worker* w = Worker::current()) [[likely]] {
    w->access(access, address, bytes, size);
    return;
  }
  in_task(access == Access::read || access == Access::read_only ? "read" : "write");
}

std::pair<std::byte*, std::size_t> localize(Access access, const void* address, std::size_t element) {
  return in_task("read_local or write_local").localize(access, address, element);
}

}  // namespace detail

void lock(int id) { detail::in_task("lock").lock(id); }
void unlock(int id) { detail::in_task("unlock").unlock(id); }
void barrier() { detail::in_task("barrier").barrier(); }
void flush() { detail::in_task("flush").release(); }

int worker_id() {
  const detail::Worker* w = detail::Worker::current();
  return w != nullptr ? w->id() : -1;
}

int worker_count() {
  const detail::Worker* w = detail::Worker::current();
  return w != nullptr ? w->count() : 0;
}

std::pair<std::size_t, std::size_t> share(std::size_t n) {
  const detail::Worker& w = detail::in_task("share");
  const auto count = static_cast<std::size_t>(w.count());
  const auto id = static_cast<std::size_t>(w.id());
  const std::size_t base = n / count;
  const std::size_t extra = n % count;
  const std::size_t first = id * base + std::min(id, extra);
  return {first, first + base + (id < extra ? 1 : 0)};
}

std::pair<std::size_t, std::size_t> share(std::size_t n, std::size_t granule) {
  if (granule == 0) throw InvalidArgument("crc::share(n, 0): the granule must be at least one item");
  const detail::Worker& w = detail::in_task("share");
  const auto count = static_cast<std::size_t>(w.count());
  const auto id = static_cast<std::size_t>(w.id());
  const std::size_t granules = (n + granule - 1) / granule;
  const std::size_t base = granules / count;
  const std::size_t extra = granules % count;
  const std::size_t first = std::min(n, (id * base + std::min(id, extra)) * granule);
  const std::size_t last = std::min(n, first + (base + (id < extra ? 1 : 0)) * granule);
  return {first, last};
}

}  // namespace hdsm::crc
