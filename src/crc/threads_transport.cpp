#include "crc/threads_transport.hpp"

#include "os/spin_wait.hpp"

#include <cstring>

namespace hdsm::crc::detail {

namespace {
constexpr std::size_t kSlots = 16;  // requests in flight per worker: one call and the posts before it
// In a batch, a reply is a release store, and one fence orders the batch's replies before the home
// looks for sleepers. ThreadSanitizer does not model fences: there each such reply is a sequentially
// consistent store instead (the same guarantee, one locked instruction per reply).
#if defined(__SANITIZE_THREAD__)
constexpr std::memory_order kReplyOrder = std::memory_order_seq_cst;
#else
constexpr std::memory_order kReplyOrder = std::memory_order_release;
#endif
}  // namespace

// A request as it crosses between the cores: one cache line that carries its own "written" mark,
// so a worker's request reaches the home in one line transfer (a whole Request, with its vector,
// string and exception, spans three lines and a separate tail a fourth). The rare requests with
// more (a single writer's page list, a task's error) leave that part in the mailbox's `heavy` slot.
struct alignas(64) Packet {
  std::atomic<std::uint64_t> ready{0};  // the request's position + 1 once the fields are written
  Op op = Op::done;
  bool write = false;
  bool heavy = false;       // the rest of the request is in Mailbox::heavy at the same position
  bool copying = false;     // fetch_read: the worker copies the page itself
  std::uint64_t page = 0;   // page number (offset for direct_get and direct_put)
  std::uint64_t extra = 0;  // flush_fetch: the victim; lock, unlock: the number; barrier: the sequence
  std::byte* frame = nullptr;
  const std::byte* written = nullptr;
  std::vector<std::uint64_t>* invalidations = nullptr;
};
static_assert(sizeof(Packet) == 64, "a request packet is one cache line");

struct ThreadsTransport::Mailbox {
  // Worker -> home: single producer (the worker), single consumer (the home). The home finds the
  // next request by its packet's `ready`, the worker checks `head` only when the ring looks full.
  alignas(64) std::atomic<std::uint64_t> head{0};  // written by the home
  std::array<Packet, kSlots> packets;
  std::array<Request, kSlots> heavy;
  // Home -> worker: the reply to the one call in flight.
  alignas(64) std::atomic<std::uint32_t> replies{0};
  Reply reply;
};

/// The home's wake-up: workers ring it after a push when the home sleeps.
struct ThreadsTransport::Doorbell {
  std::atomic<bool> sleeping{false};
  std::mutex mutex;
  std::condition_variable cv;
};

class ThreadsTransport::Home final : public HomeLink {
 public:
  Home(std::vector<std::unique_ptr<Mailbox>>& boxes, Doorbell& bell, std::uint64_t spin_ns,
       std::uint64_t quiet_ns)
      : boxes_(boxes), bell_(bell), spin_ns_(spin_ns), quiet_ns_(quiet_ns) {}

  bool receive(Request& request, std::chrono::steady_clock::time_point deadline) override {
    for (;;) {
      if (take(request)) return true;
      if (os::spin_until_for(
              spin_ns_, [&] { return any(); }, quiet_ns_))
        continue;
      std::unique_lock lock(bell_.mutex);
      bell_.sleeping.store(true, std::memory_order_seq_cst);
      // Pairs with the worker's push (a packet's ready, then sleeping, both seq_cst): one of the two
      // sees the other.
      bool ready = true;
      if (deadline == std::chrono::steady_clock::time_point::max())
        bell_.cv.wait(lock, [&] { return any(); });
      else
        ready = bell_.cv.wait_until(lock, deadline, [&] { return any(); });
      bell_.sleeping.store(false, std::memory_order_relaxed);
      if (!ready) return false;
    }
  }

  std::span<const std::byte> written(const Request& request) override {
    return {request.written, page_size_};
  }

  void reply(const Caller& to, const Reply& reply, std::span<const std::byte> page,
             std::span<const std::uint64_t> invalidations) override {
    if (!page.empty()) std::memcpy(to.frame, page.data(), page.size());
    // The worker's list is empty when it asks (it took the last one at its acquire): left alone
    // when there is nothing to add, it stays in the worker's cache.
    if (to.invalidations != nullptr && !invalidations.empty())
      to.invalidations->assign(invalidations.begin(), invalidations.end());
    Mailbox& box = *boxes_[static_cast<std::size_t>(to.worker)];
    box.reply.status = reply.status;
    box.reply.data = reply.data;
    box.reply.version = reply.version;
    if (!reply.message.empty() || !box.reply.message.empty()) box.reply.message = reply.message;
    if (!batch_) {
      box.replies.fetch_add(1, std::memory_order_release);
      box.replies.notify_one();
      return;
    }
    // In a batch, a plain store (the home alone writes `replies`), not a locked add: the replies to
    // every worker at a barrier leave together instead of one cache-line round trip after another.
    // The workers that went to sleep are woken at the batch's end, after one fence for them all.
    box.replies.store(box.replies.load(std::memory_order_relaxed) + 1, kReplyOrder);
    to_wake_.push_back(&box);
  }

  void begin_batch() override {
    // Room for one reply to every worker (each has one call in flight at most): a reply that only
    // says the region failed must not be the one that runs out of memory (HomeLink::reply).
    to_wake_.reserve(boxes_.size());
    batch_ = true;
  }

  void end_batch() override {
    batch_ = false;
    if (to_wake_.empty()) return;
#if !defined(__SANITIZE_THREAD__)
    // Pairs with the sleeper's announcement inside atomic::wait (a read-modify-write): either the
    // home sees it here, or the sleeper sees the reply before it sleeps.
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    for (Mailbox* box : to_wake_) box->replies.notify_one();
    to_wake_.clear();
  }

  void set_page_size(std::size_t bytes) { page_size_ = bytes; }

 private:
  bool any() const {
    for (const auto& box : boxes_) {
      const std::uint64_t head = box->head.load(std::memory_order_relaxed);
      if (box->packets[head % kSlots].ready.load(std::memory_order_seq_cst) == head + 1) return true;
    }
    return false;
  }
  // Round-robin: the worker after the one served last goes first.
  bool take(Request& request) {
    const std::size_t n = boxes_.size();
    std::size_t w = last_;
    for (std::size_t k = 1; k <= n; ++k) {
      if (++w == n) w = 0;  // no division: the home takes every request through here
      Mailbox& box = *boxes_[w];
      const std::uint64_t head = box.head.load(std::memory_order_relaxed);
      const Packet& p = box.packets[head % kSlots];
      if (p.ready.load(std::memory_order_acquire) != head + 1) continue;
      if (p.heavy) {
        request = std::move(box.heavy[head % kSlots]);
        took_heavy_ = true;
      } else if (took_heavy_) {
        request = Request{};  // nothing of the last heavy request stays
        took_heavy_ = false;
      }
      request.op = p.op;
      request.worker = static_cast<int>(w);
      request.write = p.write;
      request.copying = p.copying;
      request.page = p.page;
      request.victim = p.op == Op::flush_fetch ? p.extra : 0;
      request.number = p.op == Op::lock || p.op == Op::unlock ? static_cast<std::int64_t>(p.extra) : 0;
      request.sequence = p.op == Op::barrier ? p.extra : 0;
      request.frame = p.frame;
      request.written = p.written;
      request.invalidations = p.invalidations;
      box.head.store(head + 1, std::memory_order_release);
      last_ = w;
      return true;
    }
    return false;
  }

  std::vector<std::unique_ptr<Mailbox>>& boxes_;
  Doorbell& bell_;
  std::uint64_t spin_ns_;
  std::uint64_t quiet_ns_;
  bool batch_ = false;
  std::vector<Mailbox*> to_wake_;  // answered in this batch
  std::size_t last_ = 0;
  std::size_t page_size_ = 0;
  bool took_heavy_ = false;  // the last request taken had a heavy part

  friend class ThreadsTransport;
};

class ThreadsTransport::Worker final : public WorkerLink {
 public:
  Worker(Mailbox& box, Doorbell& bell, std::byte* base, std::uint64_t spin_ns, std::uint64_t quiet_ns)
      : box_(box), bell_(bell), base_(base), spin_ns_(spin_ns), quiet_ns_(quiet_ns) {}

  Reply call(Request& request) override { return call(request, nullptr, nullptr); }

  Reply call(Request& request, void (*meanwhile)(void*), void* context) override {
    const std::uint32_t before = box_.replies.load(std::memory_order_relaxed);
    push(request);
    if (meanwhile != nullptr) meanwhile(context);
    if (!os::spin_until_for(
            spin_ns_, [&] { return box_.replies.load(std::memory_order_acquire) != before; }, quiet_ns_))
      while (box_.replies.load(std::memory_order_acquire) == before)
        box_.replies.wait(before, std::memory_order_acquire);
    return box_.reply;
  }

  void post(Request& request) override { push(request); }

  const std::atomic<std::uint32_t>* versions() const override { return versions_; }
  void set_versions(const std::atomic<std::uint32_t>* versions) { versions_ = versions; }

  void get(std::uint64_t offset, std::byte* into, std::size_t bytes) override {
#if defined(__SANITIZE_THREAD__)
    // Under ThreadSanitizer through the home, as every copy of a shared page is there (see
    // set_versions): a single writer's put may overlap the home's copy of the page for another
    // worker, which reads other bytes of it, the race it formally is.
    if (bytes == page_size_) {
      Request r{.op = Op::direct_get, .page = offset, .frame = into};
      check_direct(call(r));
      return;
    }
#endif
    std::memcpy(into, base_ + offset, bytes);
  }
  void put(std::uint64_t offset, const std::byte* from, std::size_t bytes) override {
#if defined(__SANITIZE_THREAD__)
    if (bytes == page_size_) {
      // A call, not a post (`write` asks the home to answer): the bytes stay where they are until
      // the home has copied them.
      Request r{.op = Op::direct_put, .write = true, .page = offset, .written = from};
      check_direct(call(r));
      return;
    }
#endif
    std::memcpy(base_ + offset, from, bytes);
  }
  void set_page_size(std::size_t bytes) { page_size_ = bytes; }

 private:
  void push(Request& request) {
    const std::uint64_t tail = tail_;
    // Full (posts the home has not read yet): wait for it to catch up. The home's position is read
    // only when the last one read says the box is full, so the worker does not pull the home's line
    // on every push.
    if (tail - head_seen_ >= kSlots) {
      head_seen_ = box_.head.load(std::memory_order_acquire);
      if (tail - head_seen_ >= kSlots)
        while (!os::spin_until_for(
            spin_ns_,
            [&] {
              head_seen_ = box_.head.load(std::memory_order_acquire);
              return tail - head_seen_ < kSlots;
            },
            quiet_ns_)) {
          ring();
        }
    }
    Packet& p = box_.packets[tail % kSlots];
    p.op = request.op;
    p.write = request.write;
    p.copying = request.copying;
    p.heavy = !request.pages.empty() || request.error || !request.message.empty() || request.errc != 0;
    p.page = request.page;
    p.extra = request.op == Op::flush_fetch ? request.victim
              : request.op == Op::lock || request.op == Op::unlock
                  ? static_cast<std::uint64_t>(request.number)
              : request.op == Op::barrier ? request.sequence
                                          : 0;
    p.frame = request.frame;
    p.written = request.written;
    p.invalidations = request.invalidations;
    if (p.heavy) box_.heavy[tail % kSlots] = std::move(request);
    // Pairs with the home's announcement that it sleeps (both sequentially consistent): either the
    // home sees this request before it sleeps, or ring() sees it asleep.
    p.ready.store(tail + 1, std::memory_order_seq_cst);
    tail_ = tail + 1;
    ring();
  }
  void ring() {
    if (bell_.sleeping.load(std::memory_order_seq_cst)) {
      { std::lock_guard lock(bell_.mutex); }
      bell_.cv.notify_one();
    }
  }

  Mailbox& box_;
  Doorbell& bell_;
  std::byte* base_;
  std::uint64_t spin_ns_;
  std::uint64_t quiet_ns_;
  const std::atomic<std::uint32_t>* versions_ = nullptr;
  std::size_t page_size_ = 0;
  std::uint64_t tail_ = 0;       // this worker's next position (it alone writes the ring)
  std::uint64_t head_seen_ = 0;  // the home's position as last read: it only grows
};

ThreadsTransport::ThreadsTransport(int workers, std::byte* base, Spin spin) {
  const auto [spin_ns, quiet_ns] = spin;
  bell_ = std::make_unique<Doorbell>();
  for (int w = 0; w < workers; ++w) boxes_.push_back(std::make_unique<Mailbox>());
  home_ = std::make_unique<Home>(boxes_, *bell_, spin_ns, quiet_ns);
  for (int w = 0; w < workers; ++w)
    workers_.push_back(
        std::make_unique<Worker>(*boxes_[static_cast<std::size_t>(w)], *bell_, base, spin_ns, quiet_ns));
}

ThreadsTransport::~ThreadsTransport() = default;

HomeLink& ThreadsTransport::home() { return *home_; }
WorkerLink& ThreadsTransport::worker(int w) { return *workers_[static_cast<std::size_t>(w)]; }

void ThreadsTransport::set_page_size(std::size_t bytes) {
  home_->set_page_size(bytes);
  for (auto& w : workers_) w->set_page_size(bytes);
}

void ThreadsTransport::set_versions(const std::atomic<std::uint32_t>* versions) {
#if defined(__SANITIZE_THREAD__)
  // A worker's copy may overlap a merge of bytes it does not read (the version check decides what
  // the copy is worth afterwards), which ThreadSanitizer reports as the race it formally is: there
  // the home copies every page, as under MPI.
  versions = nullptr;
#endif
  for (auto& w : workers_) w->set_versions(versions);
}

}  // namespace hdsm::crc::detail
