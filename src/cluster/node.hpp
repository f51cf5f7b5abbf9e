// One rank of the cluster runtime: its global memory (an arena whose user view the kernels use and
// whose shadow view the protocol writes), the page table, the write-fault handler, the executor that
// runs the rank's blocks, and the kernel-boundary protocol over a Transport.
#pragma once

#include "cluster/transport.hpp"
#include "exec/executor.hpp"
#include "os/arena.hpp"
#include "os/fault.hpp"
#include "os/fault_mutex.hpp"
#include "os/fault_service.hpp"
#include "os/mapping.hpp"
#include "os/offset_heap.hpp"
#include "os/process.hpp"
#include "os/protection.hpp"

#include <hdsm/export.h>
#include <hdsm/cluster.hpp>
#include <hdsm/error.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::cluster::detail {

/// A page's state on this rank (the seed's page table: its number is the index, its address
/// base + index * page, "written" is kWritten, and the twin sits at twins + index * page).
enum class PageState : std::uint8_t {
  unused,           // not allocated: no access
  untouched,        // allocated, the same on every rank, and no rank has touched it: no access, so the
                    // first touch is seen (a page only one rank touches becomes private to it)
  valid,            // current: read-only (writes fault and make a twin)
  twinning,         // a thread is opening the page (making its twin, or its first read access): others wait
  written,          // twin made, writable until the kernel's end
  ahead,            // opened with a write fault on a page before it (predicted from the last kernel, or a
                    // sequential writer's next): twin made, writable; the boundary compares it with its twin
                    // to know if it was written
  private_page,     // only this rank has touched it: writable, no twin, nothing sent (read-only when the
                    // race check watches private pages: a kernel's first write makes a twin)
  private_written,  // a watched private page a kernel of this rank wrote: twin made, writable; its changes
                    // feed the race check if the page stops being private at this boundary
  invalid,          // stale here: no access, fetched from its holder (rank 0, or the rank it is private
                    // to) on a fault
};

/// Split of `blocks` into `ranks` intervals: the first block of every rank and the end.
std::vector<std::uint64_t> equal_split(std::uint64_t blocks, int ranks);
std::vector<std::uint64_t> weighted_split(std::uint64_t blocks, std::span<const double> speeds);

class Node final : public PageServer {
 public:
  Node(Transport& transport, Options options);
  ~Node() override;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  int rank() const { return transport_.rank(); }
  /// Where and when it was made: a child of fork() may not use the node.
  const os::Origin& origin() const { return origin_; }
  int ranks() const { return transport_.ranks(); }
  bool lazy_available() const { return lazy_available_; }
  std::size_t page_size() const { return page_; }
  std::byte* base() const { return base_; }
  const Options& options() const { return options_; }

  void* alloc(std::size_t bytes);
  void free(void* p);
  bool contains(const void* p) const {
    return static_cast<std::size_t>(static_cast<const std::byte*>(p) - base_) < space_;
  }
  /// cluster::memcpy: into global memory or out of it, as `dst` and `src` say.
  void copy(void* dst, const void* src, std::size_t bytes, Deliver deliver);
  void replicate(void* data, std::size_t bytes);
  /// cluster::sync: the agreement alone, which no rank leaves before every rank came.
  void barrier() {
    const HostCall call = enter("cluster::sync");
    agree_all(Call::sync, {});
  }
  /// `kinds`: which arguments are scalars and pointers (a typed launch); none for an untyped one.
  void launch(const Kernel& kernel, const Launch& launch, const ArgPack& args,
              std::optional<ArgKinds> kinds = std::nullopt);

  Stats stats() const;
  void reset_stats();
  /// Whether a host thread is in a collective call of this rank (tests wait for one).
  bool in_host_call() const { return host_caller_.load(std::memory_order_acquire) != std::thread::id{}; }
  PageState state(const void* p) const;
  /// Pages per protection group: 1 unless the mapping budget made the protection map merge them.
  std::size_t protection_granularity() const;
  /// Tests: the next `count` mprotect calls of the protection map fail as when the process is out
  /// of mappings.
  void refuse_mprotects(std::size_t count);
  /// Pages up to the end of the last allocation.
  std::uint64_t pages_in_use() const { return used_pages_; }
  /// The boundaries completed.
  std::uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  /// Tests: the writeVector goes in two steps from `from_pages` pages in use on (default 16384), in
  /// blocks of `block_pages` (default 64). Collective, between launches: the ranks agree on both.
  void set_write_vector_steps(std::uint64_t from_pages, std::uint64_t block_pages);

  void serve(std::uint64_t page, std::uint64_t epoch, std::span<std::byte> out) override;
  std::size_t page_bytes() const override { return page_; }

 private:
  struct Record;
  static bool on_fault(void* self, void* address, os::FaultAccess access);
  static bool on_slow_fault(void* self, void* address, os::FaultAccess access);
  bool resolve(void* address, os::FaultAccess access) noexcept;
  std::uint64_t open_ahead(std::uint64_t first, bool sequential) noexcept;
  bool predicted(std::uint64_t page) const { return ((predicted_[page >> 6] >> (page & 63)) & 1) != 0; }
  bool resolve_slow(void* address, os::FaultAccess access);
  bool refuse(const char* why, void* address) const noexcept;
  /// A collective call of host code in progress on this rank, from its enter() to its end; calls it
  /// makes itself nest.
  class HostCall {
   public:
    explicit HostCall(Node& node) : node_(node) {}
    HostCall(const HostCall&) = delete;
    HostCall& operator=(const HostCall&) = delete;
    ~HostCall();

   private:
    Node& node_;
  };
  /// Starts collective call `call`: InvalidArgument naming it while a kernel (or the distribution
  /// policy) runs on this rank, or while another host thread of the rank is in a call (the ranks'
  /// calls would pair up in whatever order the threads reach MPI: a kernel's writes were taken for
  /// the host's, or arguments compared against another call's).
  [[nodiscard]] HostCall enter(const char* call);
  /// A fault on a page whose state already allows `access`: another thread opened it meanwhile, or
  /// a degraded protection map closed it with its group. The page gets its own protection back
  /// where the mappings allow (true), or the access is refused (false), never retried unchanged.
  bool reopen(std::uint64_t page, os::FaultAccess access, void* address) noexcept;
  /// Whether the page's protection now lets nothing through (a merged group closed it).
  bool closed(std::uint64_t page) const noexcept;
  void place_space();
  std::vector<std::uint64_t> split(std::uint64_t blocks) const;
  /// split(), with a program's policy agreed over the ranks: the same intervals, or an error everywhere.
  std::vector<std::uint64_t> agreed_split(const std::string& kernel, std::uint64_t blocks);
  void measure_speed();
  void boundary(const std::string& kernel, const std::exception_ptr& error);
  /// What a boundary did, for the stats, and the failures of the kernel's blocks on all ranks.
  struct Exchanged {
    std::uint64_t written = 0, modified = 0, multi = 0, promoted = 0, modified_bytes = 0, vector_bytes = 0,
                  invalidated = 0;
    std::uint32_t failed = 0;  // ranks whose blocks failed
    int failed_rank = -1;      // the one, where failed == 1 (else a sum of no meaning)
    bool lazy = false;
  };
  /// The boundary's collectives and the new states; `moved` turns true once rank 0 applied what it
  /// gathered.
  Exchanged exchange(const std::string& kernel, const std::exception_ptr& error, bool& moved);
  /// This rank failed alone in a boundary: the job ends (Transport::abandon); returns only
  /// in-process, where the caller throws.
  void fail_alone(const std::string& kernel, const char* what) noexcept;
  /// The same in `call`, after the ranks agreed on it.
  void fail_alone_in(const char* call, const char* what) noexcept;
  /// `work`, the part of `call` a rank does alone once the ranks agreed on the call: a failure there
  /// (out of memory, a system call refused, an MPI error on this rank only) leaves this rank's global
  /// memory apart from the others', which wait in their next collective, so the job ends. Refusals
  /// every rank makes alike (Unsupported: MPI's int counts) are thrown as they are.
  template <class F>
  auto alone(const char* call, F&& work) -> decltype(work()) {
    try {
      return work();
    } catch (const Unsupported&) {
      throw;
    } catch (const std::exception& e) {
      if (ranks() > 1) fail_alone_in(call, e.what());
      throw;
    }
  }
  struct Allocation {
    std::size_t rounded;  // what the heap gave: whole pages
    std::size_t bytes;    // what cluster::alloc asked for: copies stay inside
  };
  void* open_allocation(std::size_t offset, std::size_t rounded, std::size_t bytes);
  void close_allocation(std::map<std::size_t, Allocation>::iterator it);
  void copy_pages_in(void* dst, const void* src, std::size_t bytes, std::uint64_t first, std::uint64_t end);
  void copy_pages_out(void* dst, const void* src, std::size_t bytes, Deliver deliver, std::uint64_t first,
                      std::uint64_t end);
  /// Sums the writeVector (the pages' words, then two) over the ranks; returns the bytes this rank
  /// sent for it.
  std::uint64_t sum_write_vector(std::vector<std::uint32_t>& words);
  void set_protection(std::vector<std::pair<std::uint64_t, os::Protection>>& changes);
  /// The session's collectives between launches. Each begins with agree_all naming itself, so that
  /// ranks that diverged (one in alloc, another in launch) are refused on every rank instead of
  /// their reductions mismatching or a barrier waiting for good.
  enum class Call : std::uint64_t {
    alloc = 1,
    free,
    memcpy,
    constant,
    launch,
    sync,
    write_vector_steps,
    end
  };
  /// agree_all's vector: the call, up to 9 values, then the complements of all.
  static constexpr std::size_t kAgreedSlots = 10;
  using Agreement = std::array<std::uint64_t, 2 * kAgreedSlots>;
  static Agreement agreement(Call call, std::initializer_list<std::pair<std::uint64_t, const char*>> values);
  static const char* name_of(std::uint64_t call);
  std::uint64_t agree(Call call, std::uint64_t value, const char* what);
  /// agree_within() of up to 9 values in one collective of a fixed size (every call reduces as many).
  void agree_all(Call call, std::initializer_list<std::pair<std::uint64_t, const char*>> values);
  std::uint64_t arguments_hash(const ArgPack& args, std::optional<ArgKinds> kinds) const;
  /// What the argument hash compares for argument i alone: a scalar of up to 8 bytes as its value, a
  /// longer one hashed, a pointer's place in global memory + 1 (0: elsewhere), nothing otherwise.
  std::uint64_t argument_key(const ArgPack& args, std::optional<ArgKinds> kinds, std::size_t i) const;
  /// Which argument the ranks' hashes differ on, in words: collective, on the path of a mismatch
  /// every rank found in the same agreement.
  std::string argument_difference(const ArgPack& args, std::optional<ArgKinds> kinds);
  void copy_in(void* dst, const void* src, std::size_t bytes);
  void copy_out(void* dst, const void* src, std::size_t bytes, Deliver deliver);
  std::uint64_t page_of(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_) >> page_shift_;
  }
  std::byte* shadow(std::uint64_t page) const { return shadow_ + (page << page_shift_); }
  std::byte* twin(std::uint64_t page) const { return twins_ + (page << page_shift_); }
  std::atomic<PageState>& state_of(std::uint64_t page) const { return states_[page]; }
  /// Waits until `st` leaves twinning (another thread is opening the page). Async-signal-safe.
  void await_opened(std::atomic<PageState>& st) const noexcept;
  /// Ends a twinning: the page's new state, and a wake-up only where a thread waits for one.
  void opened(std::atomic<PageState>& st, PageState now) const noexcept;
  bool twin_and_open(std::uint64_t page, std::atomic<PageState>& st, PageState back, PageState now) noexcept;
  std::uint64_t allocated_pages(const void* p, std::size_t bytes, const char* call) const;
  /// Collective: the pages of [first, end) private to ranks other than 0 go whole to rank 0; rank 0
  /// applies them at `into` (the span's first page at into[0]); false (nothing moved) when none is.
  bool gather_private(std::uint64_t first, std::uint64_t end, std::byte* into);
  /// Once per page between two boundaries, however often host code allocates, touches and frees it:
  /// touched_ has a slot per page. (A touch of a page freed since is stale; a new one makes it
  /// current again, without a second slot.)
  static constexpr std::uint8_t kTouchNoted = 1, kTouchStale = 2;
  void record_touch(std::uint64_t page) noexcept {
    if (touch_noted_[page].exchange(kTouchNoted, std::memory_order_acq_rel) != 0) return;
    touched_[touched_count_.fetch_add(1, std::memory_order_acq_rel)] = page;
  }
  int holder_of(std::uint64_t page) const {
    const std::int32_t h = holder_[page].load(std::memory_order_relaxed);
    return h >= 0 ? h : 0;
  }

  static constexpr std::int32_t kShared = -1, kUntouched = -2;
  // writeVector words with private pages: writers in bits 0-9, touchers in 10-19, the sum of the
  // touchers' ranks + 1 in 20-31 (so at most 1023 ranks).
  static constexpr std::uint32_t kCountMask = 1023, kTouchShift = 10, kWhoShift = 20;
  static constexpr std::uint32_t kToucher = 1u << kTouchShift;

  Transport& transport_;
  Options options_;
  std::size_t page_;
  unsigned page_shift_;
  std::size_t space_;
  std::uint64_t pages_;
  bool lazy_available_;
  bool check_races_;
  std::uint64_t vector_steps_from_ = 16384, vector_block_ = 64;  // see set_write_vector_steps

  std::unique_ptr<os::Arena> arena_;
  std::byte* base_ = nullptr;
  std::byte* shadow_ = nullptr;
  os::Mapping twin_memory_;
  std::byte* twins_ = nullptr;
  std::unique_ptr<std::atomic<PageState>[]> states_;
  // Threads in await_opened. Every write fault ends a twinning, so the opener wakes anyone only when
  // this count says someone waits.
  mutable std::atomic<std::uint32_t> twin_waiters_{0};
  // What await_opened sleeps on (a futex word, through std::atomic_ref): bumped when a twinning ends
  // with waiters. A page's state is a byte, which a futex cannot wait on, and std::atomic::wait is
  // not promised safe in the fault handler.
  alignas(4) mutable std::uint32_t twins_opened_ = 0;
  std::unique_ptr<std::uint64_t[]> written_;  // pages written in the current kernel, in fault order
  std::atomic<std::uint64_t> written_count_{0};
  std::unique_ptr<std::uint64_t[]> touched_;  // untouched and invalid pages touched since the last boundary
  std::atomic<std::uint64_t> touched_count_{0};
  std::unique_ptr<std::atomic<std::uint8_t>[]>
      touch_noted_;  // the page is in touched_: kTouchNoted or kTouchStale
  // Open-ahead: one bit a page (zero until used) for the pages this rank wrote, or opened ahead, in
  // the last kernel that stayed valid; set and cleared at boundaries, read by the fault handler.
  os::Mapping predicted_memory_;
  std::uint64_t* predicted_ = nullptr;
  std::vector<std::uint64_t> predicted_pages_;
  std::atomic<std::uint64_t> opened_ahead_{0};
  // The page a sequential writer would fault on next: the one after the last fault, or after the
  // run it opened ahead. A fault there opens the next pages ahead even where no kernel wrote them.
  static constexpr std::uint64_t kNoPageExpected = ~std::uint64_t{0};
  std::atomic<std::uint64_t> next_fault_{kNoPageExpected};
  /// Per page, the same on every rank: kShared, kUntouched, or the rank the page is private to.
  std::unique_ptr<std::atomic<std::int32_t>[]> holder_;
  bool private_pages_;
  // The race check with private pages: each rank's private pages are read-only at kernel start, so
  // that a rank's changes to a page another rank touches in the same kernel can be compared with
  // that rank's (the holder otherwise sends the page whole, its changes unknown). A host write to
  // such a page faults, and is refused as on a shared page.
  bool watch_private_;
  os::Origin origin_;
  mutable os::FaultMutex protection_mutex_;
  std::unique_ptr<os::ProtectionMap> protection_;
  os::OffsetHeap heap_;
  std::map<std::size_t, Allocation> allocations_;  // by offset
  std::atomic<std::uint64_t> used_pages_{0};       // pages below the highest allocation's end

  exec::Executor executor_;
  std::atomic<bool> in_kernel_{false};
  std::atomic<std::thread::id> host_caller_{};     // the thread in a collective call (HostCall)
  std::atomic<const char*> host_call_{nullptr};    // and which call, for the message
  unsigned host_depth_ = 0;                        // its nested calls; only that thread touches it
  std::atomic<const char*> kernel_name_{nullptr};  // the running kernel's, while its blocks run
  Agreement ending_{};  // the session's last agreement (~Node), kept while it is pending
  // The program's distribution policy runs (agreed_split): no collective from it.
  std::atomic<bool> in_policy_{false};
  std::atomic<std::uint64_t> epoch_{0};
  std::mutex serve_mutex_;  // rank 0: host copies into global memory against the page server
  std::vector<double> speeds_;
  std::unique_ptr<os::FaultService> fault_service_;
  int fault_range_ = -1;

  Stats stats_;
  std::atomic<std::uint64_t> write_faults_{0}, fetches_{0};
  std::uint64_t opened_unwritten_ = 0;
  std::uint64_t mapping_closes_base_ = 0;  // the protection map's count at reset_stats()
};

/// Binds `node` to the calling thread for the free functions of <hdsm/cluster.hpp> (the in-process
/// ranks of the tests); nullptr unbinds. Without a binding they use the session's node.
void bind_thread(Node* node);
/// The session's node (nullptr when no session is open): set by Session.
void set_session_node(Node* node);

}  // namespace hdsm::cluster::detail

HDSM_VISIBLE_END
