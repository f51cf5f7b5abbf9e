#include "cluster/node.hpp"

#include "cluster/records.hpp"
#include "os/exception_text.hpp"
#include "os/fault_path.hpp"
#include "os/futex.hpp"
#include "os/mapping.hpp"
#include "os/process.hpp"
#include "os/signal_safe_io.hpp"
#include "os/spin_wait.hpp"
#include "runtime/knobs.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <stdexcept>

namespace hdsm::cluster::detail {
namespace {

constexpr int kPlacementAttempts = 8;
// Freed global memory kept for the next allocations, as malloc keeps freed heap: a new page of the
// arena's memfd faults once in each view that touches it, which costs more than zeroing a kept one.
constexpr std::size_t kKeepBytes = std::size_t{1} << 30;

std::size_t checked_page(std::size_t page) {
  if (!std::has_single_bit(page) || page < os::page_size() || page > (std::size_t{1} << 20))
    throw InvalidArgument(
        fmt::format("cluster page size {} (page_size, HDSM_CLUSTER_PAGE_SIZE) must be a power of two from "
                    "the system page ({}) to 1 MiB",
                    page, os::page_size()));
  return page;
}

std::size_t checked_space(std::size_t space, std::size_t page) {
  if (!std::has_single_bit(space) || space < (std::size_t{16} << 20) || space > (std::size_t{1} << 40) ||
      space < page)
    throw InvalidArgument(
        fmt::format("cluster space of {} B ({}; space_bytes, HDSM_CLUSTER_SPACE) must be a power of two from "
                    "16 MiB to 1 TiB",
                    space, format_bytes(space)));
  return space;
}

// The options every rank must share, the layout of global memory and the protocol's choices, are
// checked in the session's first collective: a bad or different value on one rank stops every rank
// with a message, instead of that rank alone while the others wait for it in the next collective.
Options agreed(Transport& transport, Options o) {
  std::string error;
  try {
    checked_space(o.space_bytes, checked_page(o.page_size));
    // Options set in code get the ranges their knobs have (mappings' lower bound is checked where it
    // is used, with what it must hold).
    check_option("cluster::Options::threads", Knob::cluster_threads, o.threads, fmt::to_string(o.threads));
    check_option("cluster::Options::lazy_pages", Knob::cluster_lazy_pages, static_cast<double>(o.lazy_pages),
                 fmt::to_string(o.lazy_pages));
    check_option("cluster::Options::open_ahead", Knob::cluster_open_ahead, o.open_ahead,
                 fmt::to_string(o.open_ahead));
    if (o.mappings > std::size_t{1} << 31)
      check_option("cluster::Options::mappings", Knob::cluster_mappings, static_cast<double>(o.mappings),
                   fmt::to_string(o.mappings));
    check_option("cluster::Options::timeout", Knob::cluster_timeout_ms,
                 static_cast<double>(o.timeout.count()), fmt::format("{} ms", o.timeout.count()));
    if (o.distribution != Distribution::equal && o.distribution != Distribution::weighted)
      throw InvalidArgument(
          fmt::format("cluster::Options::distribution = {} is no Distribution (equal or weighted)",
                      static_cast<int>(o.distribution)));
    check_wait_policy(o.wait, "cluster::Options::wait");
    // The executor's own check, before it is made; a rank's own resource, like its threads, so not
    // compared between ranks. At most the knob's 16 MiB.
    if (o.fiber_stack < exec::kMinFiberStack || o.fiber_stack > (std::size_t{16} << 20))
      throw InvalidArgument(
          fmt::format("cluster fiber_stack (HDSM_FIBER_STACK) of {} is outside {} .. 16 MiB",
                      format_bytes(o.fiber_stack), format_bytes(exec::kMinFiberStack)));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (transport.ranks() > 1) {
    constexpr std::size_t kShared = 7;
    const std::uint64_t mine[kShared + 1] = {
        o.page_size,
        o.space_bytes,
        o.lazy_pages,
        o.private_pages ? 1u : 0u,
        static_cast<std::uint64_t>(o.distribution),
        o.policy ? 1u : 0u,
        o.check_races ? 1u : 0u,  // the check compares every writer's diffs: on one rank, it sees none
        error.empty() ? 0 : static_cast<std::uint64_t>(transport.rank()) + 1};
    std::uint64_t v[2 * (kShared + 1)];
    for (std::size_t i = 0; i <= kShared; ++i) {
      v[i] = mine[i];
      v[kShared + 1 + i] = ~mine[i];
    }
    transport.allreduce(v, ReduceOp::max);
    if (error.empty() && v[kShared] != 0)
      throw InvalidArgument(fmt::format(
          "cluster: rank {} refused its options (its message is in its output), so no rank starts",
          v[kShared] - 1));
    static constexpr const char* kNames[kShared] = {"page_size (HDSM_CLUSTER_PAGE_SIZE)",
                                                    "space_bytes (HDSM_CLUSTER_SPACE)",
                                                    "lazy_pages (HDSM_CLUSTER_LAZY_PAGES)",
                                                    "private_pages (HDSM_CLUSTER_PRIVATE_PAGES)",
                                                    "distribution",
                                                    "policy (set or not)",
                                                    "check_races (HDSM_CLUSTER_CHECK_RACES)"};
    for (std::size_t i = 0; error.empty() && i < kShared; ++i)
      if (v[i] != ~v[kShared + 1 + i])
        throw InvalidArgument(
            fmt::format("cluster: the ranks' Options::{} differ (from {} to {}; rank {} has {}): every rank "
                        "must use the same",
                        kNames[i], ~v[kShared + 1 + i], v[i], transport.rank(), mine[i]));
  }
  if (!error.empty()) throw InvalidArgument(error);
  // Before the executor's workers and the page servers start waiting. A rank's own (its cores), so
  // not compared between ranks.
  apply_wait_policy(o.wait);
  return o;
}

void check_split(const std::vector<std::uint64_t>& bounds, std::uint64_t blocks, int ranks) {
  bool ok =
      bounds.size() == static_cast<std::size_t>(ranks) + 1 && bounds.front() == 0 && bounds.back() == blocks;
  for (std::size_t i = 1; ok && i < bounds.size(); ++i) ok = bounds[i - 1] <= bounds[i];
  if (!ok)
    throw InvalidArgument(
        fmt::format("the cluster's distribution policy split {} blocks over {} ranks as [{}]: it must "
                    "give ranks + 1 non-decreasing numbers from 0 to the block count",
                    blocks, ranks, fmt::join(bounds, ", ")));
}

// Ends the job (Transport::abandon) with the text `say()` builds, or `fallback` where building it
// fails: the caller may be out of memory, and abandon allocates nothing.
template <class Say>
void abandon_saying(Transport& transport, const char* fallback, Say&& say) noexcept {
  std::string why;
  try {
    why = say();
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory to say more; the fallback
  }
  transport.abandon(why.empty() ? fallback : why.c_str());
}

thread_local Node* tl_node = nullptr;
std::atomic<Node*> session_node{nullptr};

// What a launch throws when blocks failed on `failed` ranks (`error` is this rank's failure;
// `first_text` the failure of rank `failed_rank`, the first that failed, as it sent it).
[[noreturn]] void throw_failure(const std::string& kernel, const std::exception_ptr& error, int failed,
                                int failed_rank, std::string_view first_text) {
  // A rank whose blocks threw reports its own error, whole; the others the first failing rank's.
  if (error && failed > 1)
    throw KernelFailure(fmt::format("kernel '{}' failed on {} ranks; on rank {} (this one): {}", kernel,
                                    failed, failed_rank, os::exception_text(error)));
  if (error)
    throw KernelFailure(
        fmt::format("kernel '{}' failed on rank {}: {}", kernel, failed_rank, os::exception_text(error)));
  if (failed == 1)
    throw KernelFailure(fmt::format("kernel '{}' failed on rank {}: {}", kernel, failed_rank, first_text));
  throw KernelFailure(
      fmt::format("kernel '{}' failed on {} ranks; on rank {}: {}", kernel, failed, failed_rank, first_text));
}

}  // namespace

std::vector<std::uint64_t> equal_split(std::uint64_t blocks, int ranks) {
  std::vector<std::uint64_t> bounds(static_cast<std::size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r)
    // blocks * r / ranks without overflow: blocks < 2^63 and r <= ranks.
    bounds[static_cast<std::size_t>(r)] =
        blocks / static_cast<unsigned>(ranks) * static_cast<unsigned>(r) +
        blocks % static_cast<unsigned>(ranks) * static_cast<unsigned>(r) / static_cast<unsigned>(ranks);
  return bounds;
}

std::vector<std::uint64_t> weighted_split(std::uint64_t blocks, std::span<const double> speeds) {
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  if (!(total > 0)) return equal_split(blocks, static_cast<int>(speeds.size()));
  std::vector<std::uint64_t> bounds(speeds.size() + 1, 0);
  double prefix = 0;
  for (std::size_t r = 0; r < speeds.size(); ++r) {
    prefix += std::max(0.0, speeds[r]);
    bounds[r + 1] = std::min(
        blocks, static_cast<std::uint64_t>(std::llround(static_cast<double>(blocks) * (prefix / total))));
    bounds[r + 1] = std::max(bounds[r + 1], bounds[r]);
  }
  bounds.back() = blocks;
  return bounds;
}

void bind_thread(Node* node) { tl_node = node; }
void set_session_node(Node* node) { session_node.store(node, std::memory_order_release); }

// The fewest runs of one protection a rank may be given (Options::mappings).
constexpr std::size_t kMinMappings = 5;

Node& current() {
  Node* n = tl_node;
  if (n == nullptr) n = session_node.load(std::memory_order_acquire);
  if (n == nullptr)
    throw InvalidArgument("no cluster session: create an hdsm::cluster::Session on every rank first");
  // A child of fork() has the rank's memory map but neither its threads nor its place in MPI: its
  // collectives would wait for ranks that never come.
  if (!n->origin().same_process()) [[unlikely]]
    throw Unsupported(
        "the cluster session was opened before this process was forked: a child of fork() is no rank (use "
        "the session in the parent, or exec)");
  return *n;
}

Node::Node(Transport& transport, Options options)
    : transport_(transport),
      options_(agreed(transport, std::move(options))),
      page_(checked_page(options_.page_size)),
      page_shift_(static_cast<unsigned>(std::countr_zero(page_))),
      space_(checked_space(options_.space_bytes, page_)),
      pages_(space_ / page_),
      lazy_available_(transport.concurrent_requests() && transport.ranks() > 1),
      check_races_(options_.check_races),
      private_pages_(options_.private_pages && transport.concurrent_requests() && transport.ranks() > 1 &&
                     transport.ranks() <= static_cast<int>(kCountMask)),
      watch_private_(private_pages_ && check_races_),
      heap_(space_, page_),
      executor_(exec::ExecutorOptions{options_.threads, options_.fiber_stack}) {
  place_space();
  base_ = reinterpret_cast<std::byte*>(arena_->user_begin());
  shadow_ = arena_->shadow(0, 0);
  // What each rank sets up alone may fail on one rank only (its memory, its options): the ranks
  // agree on the outcome before any collective that follows, so all of them throw together instead
  // of one throwing while the others wait for it.
  std::exception_ptr error;
  try {
    twin_memory_ = os::Mapping(space_, "twins of the cluster's global memory");
    twins_ = twin_memory_.data();
    predicted_memory_ = os::Mapping((pages_ + 63) / 64 * sizeof(std::uint64_t),
                                    "the open-ahead bits of the cluster's global memory");
    predicted_ = reinterpret_cast<std::uint64_t*>(predicted_memory_.data());
    states_ = std::make_unique<std::atomic<PageState>[]>(pages_);
    written_ = std::make_unique_for_overwrite<std::uint64_t[]>(pages_);
    touched_ = std::make_unique_for_overwrite<std::uint64_t[]>(pages_);
    touch_noted_ = std::make_unique<std::atomic<std::uint8_t>[]>(pages_);
    holder_ = std::make_unique<std::atomic<std::int32_t>[]>(pages_);
    if (options_.mappings != 0 && options_.mappings < kMinMappings)
      throw InvalidArgument(fmt::format(
          "cluster Options::mappings (HDSM_CLUSTER_MAPPINGS) = {}: at least {} (an allocation in the middle "
          "of global memory and one page opened in it take 5), or 0 for the default",
          options_.mappings, kMinMappings));
    protection_ = std::make_unique<os::ProtectionMap>(
        base_, pages_, page_, "the cluster's global memory", os::Protection::none,
        options_.mappings != 0 ? options_.mappings : std::max(kMinMappings, os::default_run_budget()));
    fault_service_ = std::make_unique<os::FaultService>(&Node::on_slow_fault, this);
    fault_range_ = os::register_fault_range(base_, space_, &Node::on_fault, this);
    // Rank 0 serves the pages lazy boundaries invalidated; with private pages every rank serves its
    // own. Started here, where a failure is agreed on below, and stopped if any rank failed.
    if (private_pages_ || (lazy_available_ && rank() == 0)) transport_.serve_pages(this);
  } catch (...) {
    error = std::current_exception();
  }
  try {
    std::uint64_t failed[1] = {error ? static_cast<std::uint64_t>(rank()) + 1 : 0};
    if (ranks() > 1) transport_.allreduce(failed, ReduceOp::max);
    if (error) std::rethrow_exception(error);
    if (failed[0] != 0)
      throw Error(
          Errc::system,
          fmt::format("cluster: rank {} could not set up its part of global memory (its error is in its "
                      "output), so no rank starts",
                      failed[0] - 1));
    if (options_.distribution == Distribution::weighted || options_.policy) measure_speed();
  } catch (...) {
    if (private_pages_ || (lazy_available_ && rank() == 0)) transport_.stop_serving();
    if (fault_range_ >= 0) os::unregister_fault_range(fault_range_);
    throw;
  }
}

Node::~Node() {
  // No rank may still ask rank 0 for a page once its server stops. A rank that ends its session
  // alone (an exception only it threw, caught outside the session) meets ranks that wait in another
  // collective, which would wait forever: while an exception is in flight it waits the timeout, then
  // ends the job. Otherwise it waits as long as the others take (they may have host work left).
  const bool unwinding = std::uncaught_exceptions() > 0;
  bool met = true;
  try {
    // The end is an agreement too: a rank still in another call gets InvalidArgument there (it made a
    // call this rank did not), and this rank agrees again, until every rank is at its end.
    for (;;) {
      ending_ = agreement(Call::end, {});
      met = transport_.agree_within(ending_, options_.timeout);
      if (!met && !unwinding) {
        std::fprintf(
            stderr,
            "hdsm cluster: rank %d has waited %lld ms (HDSM_CLUSTER_TIMEOUT) at the end of its session for "
            "the other ranks to end theirs, and goes on waiting (if they wait in another call, one rank "
            "left that call alone)\n",
            rank(), static_cast<long long>(options_.timeout.count()));
        met = transport_.agree_within(ending_, std::chrono::milliseconds::max());
      }
      if (!met || ending_[0] == ~ending_[kAgreedSlots]) break;
      std::fprintf(stderr,
                   "hdsm cluster: rank %d ended its cluster session while another rank was in cluster::%s, "
                   "which fails there; rank %d waits for the others to end theirs\n",
                   rank(), name_of(~ending_[kAgreedSlots]), rank());
    }
  } catch (const Unsupported& e) {  // the session ends on a thread that may not call MPI
    std::fprintf(stderr, "hdsm cluster: %s\n", e.what());
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed transport has nothing to wait for
  }
  if (!met) {
    abandon_saying(transport_, "a rank ended its cluster session alone", [&] {
      return fmt::format(
          "rank {} ended its cluster session with an exception in flight and waited {} ms "
          "(HDSM_CLUSTER_TIMEOUT) for the other ranks to end theirs; they are elsewhere (did a call throw "
          "on this rank only?)",
          rank(), options_.timeout.count());
    });
  }
  if (private_pages_ || (lazy_available_ && rank() == 0)) transport_.stop_serving();
  os::unregister_fault_range(fault_range_);
  fault_service_.reset();
}

// The ranks place their global memory together: each lists the ranges of its address space in
// which nothing is mapped, rank 0 intersects the lists and chooses the highest aligned range free on
// all of them, and every rank maps it there (never over a mapping). Another thread of a rank may
// map something into the range meanwhile: then all give it back and choose again from fresh lists.
void Node::place_space() {
  if (transport_.shared_address_space()) {
    arena_ = std::make_unique<os::Arena>(1, space_, kKeepBytes);
    return;
  }
  std::string last_error;
  for (int attempt = 0; attempt < kPlacementAttempts; ++attempt) {
    std::vector<os::AddressRange> free;
    try {
      free = os::unmapped_ranges();
    } catch (const std::exception& e) {  // this rank offers nothing; the others wait in the gather
      last_error = e.what();
    }
    std::vector<std::byte> all;
    std::vector<std::uint64_t> sizes;
    transport_.gather(std::as_bytes(std::span(free)), all, sizes);
    std::array<std::uint64_t, 1> at{0};
    if (rank() == 0) {  // `all` holds rank 0's own list first
      std::vector<os::AddressRange> common = free;
      std::size_t offset = sizes.empty() ? 0 : sizes[0];
      for (std::size_t r = 1; r < sizes.size(); ++r) {
        std::vector<os::AddressRange> theirs(sizes[r] / sizeof(os::AddressRange));
        std::memcpy(theirs.data(), all.data() + offset, theirs.size() * sizeof(os::AddressRange));
        offset += sizes[r];
        common = os::common_ranges(common, theirs);
      }
      at[0] = os::highest_fit(common, space_, space_);
    }
    transport_.broadcast(0, std::as_writable_bytes(std::span(at)));
    if (at[0] == 0) {
      const std::string why = last_error.empty() ? "" : fmt::format(" (rank {}: {})", rank(), last_error);
      throw SystemError("mmap",
                        fmt::format("cluster global memory: no range of {} is free at one address on all {} "
                                    "ranks{}; lower HDSM_CLUSTER_SPACE",
                                    format_bytes(space_), ranks(), why),
                        ENOMEM);
    }
    // Each rank's outcome: 0 mapped, 1 something was mapped in the way meanwhile (choose again), 2
    // the mapping failed otherwise (the address-space limit, the kernel's memory): no retry helps.
    std::uint64_t outcome = 0;
    try {
      arena_ = std::make_unique<os::Arena>(1, space_, kKeepBytes, at[0]);
    } catch (const SystemError& e) {
      outcome = e.error_number() == EEXIST ? 1 : 2;
      last_error = e.what();
    } catch (const std::exception& e) {
      outcome = 2;
      last_error = e.what();
    }
    // The worst outcome, and the lowest rank that failed (as ranks - rank, under max).
    std::array<std::uint64_t, 2> worst{outcome,
                                       outcome == 2 ? static_cast<std::uint64_t>(ranks() - rank()) : 0};
    transport_.allreduce(worst, ReduceOp::max);
    if (worst[0] == 0) return;
    arena_.reset();
    if (worst[0] == 2) {
      const int failed = ranks() - static_cast<int>(worst[1]);
      const std::string why = failed == rank() ? ": " + last_error : "";
      throw SystemError("mmap",
                        fmt::format("cluster global memory: no range of {} is free at one address on all {} "
                                    "ranks (rank {} could not map it at {:#x}{}); lower HDSM_CLUSTER_SPACE",
                                    format_bytes(space_), ranks(), failed, at[0], why),
                        ENOMEM);
    }
  }
  throw SystemError(
      "mmap",
      fmt::format(
          "cluster global memory: {} at one address on all {} ranks was taken on some rank each of {} "
          "times (rank {}: {}); lower HDSM_CLUSTER_SPACE",
          format_bytes(space_), ranks(), kPlacementAttempts, rank(),
          last_error.empty() ? "it mapped the range every time" : last_error),
      EEXIST);
}

// The calibration of the weighted distribution: the same arithmetic loop on every rank's executor.
void Node::measure_speed() {
  constexpr std::uint32_t kBlocks = 256;
  std::vector<double> sink(kBlocks);
  const auto start = std::chrono::steady_clock::now();
  const Launch shape{Dim3{kBlocks}, Dim3{1}, 0};
  executor_.for_each_block(shape, [&](const BlockRun& run) {
    double x = run.block.x;
    for (int i = 0; i < 20000; ++i) x = x * 1.0000001 + 0.5;
    sink[run.block.x] = x;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double speed = kBlocks / std::max(seconds, 1e-9);
  const std::vector<std::uint64_t> all = transport_.allgather(std::bit_cast<std::uint64_t>(speed));
  speeds_.clear();
  for (const std::uint64_t v : all) speeds_.push_back(std::bit_cast<double>(v));
}

std::vector<std::uint64_t> Node::split(std::uint64_t blocks) const {
  std::vector<std::uint64_t> bounds;
  if (options_.policy) {
    bounds = options_.policy(blocks, speeds_);
  } else if (options_.distribution == Distribution::weighted) {
    bounds = weighted_split(blocks, speeds_);
  } else {
    bounds = equal_split(blocks, ranks());
  }
  check_split(bounds, blocks, ranks());
  return bounds;
}

// The equal and weighted splits are the same on every rank (the speeds were gathered). A policy of
// the program's may not be: it throws on one rank only, or its intervals differ (it read the rank, a
// clock), and the ranks would leave the launch apart or run blocks twice or never. So its outcome is
// agreed (one more collective a launch, with a policy only): the same intervals everywhere, or an
// error on every rank naming the rank where it failed (that rank's nests its own exception).
std::vector<std::uint64_t> Node::agreed_split(const std::string& kernel, std::uint64_t blocks) {
  if (!options_.policy || ranks() == 1) return split(blocks);
  std::vector<std::uint64_t> bounds;
  std::exception_ptr error;
  in_policy_.store(true, std::memory_order_relaxed);
  try {
    bounds = split(blocks);
  } catch (...) {
    error = std::current_exception();
  }
  in_policy_.store(false, std::memory_order_relaxed);
  // FNV-1a over the intervals' ends.
  std::uint64_t hash = 0xcbf29ce484222325;
  for (const std::uint64_t b : bounds)
    for (int i = 0; i < 8; ++i) hash = (hash ^ ((b >> (8 * i)) & 0xff)) * 0x100000001b3;
  // One collective: the highest rank whose policy threw (plus one), and the hash beside its
  // complement (every rank learns the largest and the smallest).
  std::array<std::uint64_t, 3> v = {error ? static_cast<std::uint64_t>(rank()) + 1 : 0, error ? 0 : hash,
                                    error ? 0 : ~hash};
  transport_.allreduce(v, ReduceOp::max);
  if (v[0] != 0) {
    // Every rank throws an hdsm error naming the rank; the one whose policy threw nests its exception.
    if (!error)
      throw InvalidArgument(
          fmt::format("cluster::launch of kernel '{}': the distribution policy failed on rank {} (it threw, "
                      "or split the blocks wrongly; that rank's exception says why); no block ran",
                      kernel, v[0] - 1));
    const std::string what = os::exception_text(error);
    try {
      std::rethrow_exception(error);
    } catch (...) {
      std::throw_with_nested(InvalidArgument(fmt::format(
          "cluster::launch of kernel '{}': the distribution policy failed on rank {}: {}; no block ran",
          kernel, rank(), what)));
    }
  }
  if (v[1] != ~v[2])
    throw InvalidArgument(
        fmt::format("cluster::launch of kernel '{}': the distribution policy returned different block "
                    "intervals on different ranks (it must return the same on every rank); no block ran",
                    kernel));
  return bounds;
}

// The same value on every rank, or InvalidArgument on every rank.
std::uint64_t Node::agree(Call call, std::uint64_t value, const char* what) {
  agree_all(call, {{value, what}});
  return value;
}

// Allocation and free change the states and protections a kernel's faults rely on (a fault that is
// opening a page would store its state over a free's), and every call of the session is collective:
// one made from a block, which runs on one rank, would leave the others in the kernel's boundary
// while it waits for them in its own collective. Between launches only, from host code.
Node::HostCall Node::enter(const char* call) {
  // From the distribution policy, which runs on the launching thread; another host thread meanwhile
  // is refused below, as during any call.
  if (in_policy_.load(std::memory_order_relaxed) &&
      host_caller_.load(std::memory_order_acquire) == std::this_thread::get_id())
    throw InvalidArgument(
        fmt::format("{} from the distribution policy on rank {}: the cluster's calls are collective, made "
                    "between launches from host code",
                    call, rank()));
  const std::thread::id me = std::this_thread::get_id();
  // From a block (which runs as user code on the executor's threads, the launching one included);
  // another host thread during a kernel is refused below, as during any call.
  if (in_kernel_.load(std::memory_order_acquire) &&
      (os::running_user_code() || host_caller_.load(std::memory_order_acquire) == me))
    throw InvalidArgument(
        fmt::format("{} while a kernel runs on rank {}: the cluster's calls (alloc, free, memcpy, constant, "
                    "launch, sync) are collective, made between launches from host code",
                    call, rank()));
  if (host_caller_.load(std::memory_order_acquire) != me) {
    std::thread::id none{};
    if (!host_caller_.compare_exchange_strong(none, me, std::memory_order_acq_rel)) {
      const char* other = host_call_.load(std::memory_order_acquire);
      throw InvalidArgument(
          fmt::format("{} on rank {} while another host thread of the rank is in {}: the cluster's calls are "
                      "collective, and a rank makes them one at a time, from one thread at a time",
                      call, rank(), other != nullptr ? other : "a cluster call"));
    }
    host_call_.store(call, std::memory_order_release);
  }
  ++host_depth_;
  return HostCall(*this);
}

Node::HostCall::~HostCall() {
  if (--node_.host_depth_ != 0) return;
  node_.host_call_.store(nullptr, std::memory_order_release);
  node_.host_caller_.store(std::thread::id{}, std::memory_order_release);
}

void* Node::alloc(std::size_t bytes) {
  const HostCall host_call = enter("cluster::alloc");
  agree(Call::alloc, bytes, "allocation sizes");
  if (bytes == 0) throw InvalidArgument("cluster::alloc of 0 bytes");
  const std::size_t rounded = bytes > space_ ? 0 : heap_.rounded(bytes);
  // The heap's answer is the same on every rank; only its own bookkeeping's memory may fail on one.
  const auto offset =
      rounded == 0 ? std::nullopt : alone("cluster::alloc", [&] { return heap_.allocate(rounded); });
  if (!offset)
    throw OutOfDeviceMemory("cluster's global memory" + heap_.scattered_note(rounded), bytes, heap_.used(),
                            space_, "HDSM_CLUSTER_SPACE");
  // Every rank has the same heap, so the checks above fail on all alike. What follows may fail on
  // one rank alone (its memory, its mappings), which would then differ from the others: see alone().
  return alone("cluster::alloc", [&] { return open_allocation(*offset, rounded, bytes); });
}

void* Node::open_allocation(std::size_t offset, std::size_t rounded, std::size_t bytes) {
  arena_->reuse(0, offset, rounded);
  allocations_.emplace(offset, Allocation{rounded, bytes});
  const std::uint64_t first = offset >> page_shift_, count = rounded >> page_shift_;
  // With one rank there is nothing to keep coherent: every page is private to it, writable, and never
  // faults. With private pages a new page is untouched: its first touch faults, so the boundary knows
  // whether one rank or several hold it.
  const PageState initial = private_pages_ ? PageState::untouched : PageState::valid;
  for (std::uint64_t p = first; p < first + count; ++p) {
    state_of(p).store(initial, std::memory_order_relaxed);
    holder_[p].store(private_pages_ ? kUntouched : kShared, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(protection_mutex_);
    protection_->set(first, count,
                     ranks() == 1     ? os::Protection::read_write
                     : private_pages_ ? os::Protection::none
                                      : os::Protection::read);
  }
  used_pages_.store(std::max(used_pages_.load(std::memory_order_relaxed), first + count),
                    std::memory_order_release);
  return base_ + offset;
}

void Node::free(void* p) {
  const HostCall host_call = enter("cluster::free");
  // Null (nothing to free, as with cudaFree and std::free) and host pointers agree as values of their
  // own, past the offsets of global memory.
  const std::size_t offset = p == nullptr  ? space_ + 1
                             : contains(p) ? static_cast<std::size_t>(static_cast<std::byte*>(p) - base_)
                                           : space_;
  agree(Call::free, offset, "pointers to free (as offsets in global memory)");
  if (p == nullptr) return;
  const auto it = allocations_.find(offset);
  if (it == allocations_.end())
    throw InvalidPointer(fmt::format("cluster::free({}): not an allocation of cluster::alloc", p));
  alone("cluster::free", [&] { close_allocation(it); });
}

void Node::close_allocation(std::map<std::size_t, Allocation>::iterator it) {
  const std::size_t offset = it->first;
  const std::uint64_t first = offset >> page_shift_, count = it->second.rounded >> page_shift_;
  {
    // Closed before the pages count as unused: a protection map that cannot close them (it throws)
    // leaves the allocation whole, not unused pages still open.
    std::lock_guard lock(protection_mutex_);
    protection_->set(first, count, os::Protection::none);
    for (std::uint64_t q = first; q < first + count; ++q) {
      state_of(q).store(PageState::unused, std::memory_order_relaxed);
      std::uint8_t noted = kTouchNoted;  // a touch of the freed page: stale at the next boundary
      touch_noted_[q].compare_exchange_strong(noted, kTouchStale, std::memory_order_relaxed);
    }
  }
  // Closed once, above: the protection map keeps count of the mappings it splits.
  arena_->release(0, offset, it->second.rounded, os::Arena::Closing::caller);
  heap_.release(offset, it->second.rounded);
  allocations_.erase(it);
  std::uint64_t used = 0;
  if (!allocations_.empty())
    used = (allocations_.rbegin()->first + allocations_.rbegin()->second.rounded) >> page_shift_;
  used_pages_.store(used, std::memory_order_release);
}

std::uint64_t Node::allocated_pages(const void* p, std::size_t bytes, const char* call) const {
  const auto* b = static_cast<const std::byte*>(p);
  if (!contains(p) || bytes > space_ - static_cast<std::size_t>(b - base_))
    throw InvalidPointer(fmt::format("{}: [{}, +{}) is not in the cluster's global memory", call, p, bytes));
  // Inside one allocation, as cudaMemcpy's range must be (which cannot tell): a copy that runs on into
  // the next allocation, or into the page's slack past the bytes asked for, is a bug of the caller.
  const auto offset = static_cast<std::size_t>(b - base_);
  auto it = allocations_.upper_bound(offset);
  if (it == allocations_.begin() || offset >= std::prev(it)->first + std::prev(it)->second.bytes)
    throw InvalidPointer(
        fmt::format("{}: [{}, +{}) reaches global memory that is not allocated", call, p, bytes));
  --it;
  if (bytes > it->first + it->second.bytes - offset)
    throw InvalidPointer(fmt::format("{}: [{}, +{}) runs past the end of its allocation [{}, +{})", call, p,
                                     bytes, static_cast<const void*>(base_ + it->first), it->second.bytes));
  return page_of(p);
}

// Every check a rank makes alone feeds the values the ranks agree on first, so that a call one rank
// gets wrong ends with an error on every rank, never with that rank gone ahead to its next collective.
void Node::copy(void* dst, const void* src, std::size_t bytes, Deliver deliver) {
  const HostCall host_call = enter("cluster::memcpy");
  const bool to = contains(dst), from = contains(src);
  // A null host buffer where this rank uses it (rank 0's source of a copy in, every destination of a
  // copy out that delivers to it) is agreed as a direction of its own: every rank refuses the copy
  // before any reads it. Ranks that never touch the buffer may pass null.
  const bool uses_host = to ? rank() == 0 : (deliver == Deliver::all_ranks || rank() == 0);
  const bool null_host = bytes != 0 && (to != from) && uses_host && (to ? src : dst) == nullptr;
  const std::uint64_t kind = null_host ? 4 : to && from ? 2 : to ? 0 : from ? 1 : 3;
  const std::uint64_t offset = to     ? static_cast<std::uint64_t>(static_cast<std::byte*>(dst) - base_)
                               : from ? static_cast<std::uint64_t>(static_cast<const std::byte*>(src) - base_)
                                      : 0;
  agree_all(Call::memcpy,
            {{kind,
              "copies: directions or host buffers (0: into global memory, 1: out of it, 2: both global, "
              "3: neither, 4: a null host buffer where the rank reads or writes one)"},
             {offset, "offsets in global memory"},
             {bytes, "copy sizes"},
             {to ? 0 : static_cast<std::uint64_t>(deliver), "delivery modes"}});
  if (kind == 2)
    throw InvalidArgument(fmt::format(
        "cluster::memcpy({}, {}, {}): both are global memory; copy inside global memory with a kernel", dst,
        src, bytes));
  if (kind == 3)
    throw InvalidArgument(fmt::format(
        "cluster::memcpy({}, {}, {}): neither is global memory; use std::memcpy", dst, src, bytes));
  if (kind == 4)
    throw InvalidArgument(
        fmt::format("cluster::memcpy({}, {}, {}): the host buffer is null", dst, src, bytes));
  if (to)
    copy_in(dst, src, bytes);
  else
    copy_out(dst, src, bytes, deliver);
}

// Nothing to allocate before the collective: a rank that ran out of memory here would leave the others
// in it. The call, then its values (0 past the last), then the complements of all.
Node::Agreement Node::agreement(Call call,
                                std::initializer_list<std::pair<std::uint64_t, const char*>> values) {
  if (values.size() > kAgreedSlots - 1) throw std::logic_error("cluster: an agreement of more than 9 values");
  Agreement v{};
  v[0] = static_cast<std::uint64_t>(call);
  std::size_t at = 1;
  for (const auto& [value, what] : values) v[at++] = value;
  for (std::size_t s = 0; s < kAgreedSlots; ++s) v[kAgreedSlots + s] = ~v[s];
  return v;
}

const char* Node::name_of(std::uint64_t call) {
  static constexpr std::array<const char*, 9> kNames = {"?",
                                                        "alloc",
                                                        "free",
                                                        "memcpy",
                                                        "constant",
                                                        "launch",
                                                        "sync",
                                                        "set_write_vector_steps",
                                                        "the session's end"};
  return call < kNames.size() ? kNames[call] : "?";
}

void Node::agree_all(Call call, std::initializer_list<std::pair<std::uint64_t, const char*>> values) {
  if (ranks() == 1) return;
  constexpr std::size_t kSlots = kAgreedSlots;
  Agreement v = agreement(call, values);
  // Polled with growing pauses (a blocking MPI wait takes a core from the rank for as long as a late
  // rank takes). A rank that waits longer than the timeout says so, once a call, and goes on
  // waiting: another rank may be in long host work, or in a call of its own that this one never
  // makes (the program's own MPI_Barrier, say), which no timeout can tell apart.
  if (!transport_.agree_within(v, options_.timeout)) {
    std::fprintf(
        stderr,
        "hdsm cluster: rank %d has waited %lld ms (HDSM_CLUSTER_TIMEOUT) in cluster::%s for the other "
        "ranks, and goes on waiting (do all ranks make the same cluster calls in the same order?)\n",
        rank(), static_cast<long long>(options_.timeout.count()), name_of(static_cast<std::uint64_t>(call)));
    transport_.agree_within(v, std::chrono::milliseconds::max());
  }
  if (v[0] != ~v[kSlots])
    throw InvalidArgument(fmt::format(
        "cluster: the ranks called different collectives (some {}, some {}; rank {} {}): every rank makes "
        "the same calls in the same order",
        name_of(~v[kSlots]), name_of(v[0]), rank(), name_of(static_cast<std::uint64_t>(call))));
  std::size_t i = 1;
  for (const auto& [value, what] : values) {
    const std::uint64_t high = v[i], low = ~v[kSlots + i];
    ++i;
    if (high != low)
      throw InvalidArgument(
          fmt::format("cluster: the ranks passed different {} (from {} to {}; rank {} passed {}); the "
                      "call is collective and every rank must pass the same",
                      what, low, high, rank(), value));
  }
}

void Node::copy_in(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t first = allocated_pages(dst, bytes, "cluster::memcpy"),
                      end = page_of(static_cast<std::byte*>(dst) + bytes - 1) + 1;
  alone("cluster::memcpy into global memory", [&] { copy_pages_in(dst, src, bytes, first, end); });
}

void Node::copy_pages_in(void* dst, const void* src, std::size_t bytes, std::uint64_t first,
                         std::uint64_t end) {
  std::byte* target = shadow_ + (static_cast<std::byte*>(dst) - base_);
  // The pages of the span private to other ranks first come to rank 0 whole: the copy may cover
  // them in part, and the span goes out whole.
  gather_private(first, end, shadow(first));
  if (rank() == 0) {
    std::lock_guard lock(serve_mutex_);
    std::memcpy(target, src, bytes);
  }
  if (ranks() > 1) {
    // Whole pages, so a page this rank had invalidated is current again.
    std::span<std::byte> pages(shadow(first), (end - first) << page_shift_);
    transport_.broadcast(0, pages);
  }
  std::vector<std::pair<std::uint64_t, os::Protection>> changes;
  for (std::uint64_t q = first; q < end; ++q) {
    holder_[q].store(kShared, std::memory_order_relaxed);  // every rank holds it now
    if (ranks() > 1 && state_of(q).exchange(PageState::valid, std::memory_order_acq_rel) != PageState::valid)
      changes.emplace_back(q, os::Protection::read);
  }
  set_protection(changes);
}

void Node::copy_out(void* dst, const void* src, std::size_t bytes, Deliver deliver) {
  if (bytes == 0) return;
  const std::uint64_t first = allocated_pages(src, bytes, "cluster::memcpy"),
                      end = page_of(static_cast<const std::byte*>(src) + bytes - 1) + 1;
  alone("cluster::memcpy out of global memory",
        [&] { copy_pages_out(dst, src, bytes, deliver, first, end); });
}

void Node::copy_pages_out(void* dst, const void* src, std::size_t bytes, Deliver deliver, std::uint64_t first,
                          std::uint64_t end) {
  const std::byte* from = shadow_ + (static_cast<const std::byte*>(src) - base_);
  if (ranks() == 1) {
    std::memcpy(dst, from, bytes);
    return;
  }
  // Rank 0 holds every page but those private to other ranks; those come to its copy whole. They
  // stay private to their ranks and invalid on rank 0, which fetches them again when it touches them
  // (the copy is not served: requests for them go to their holders).
  gather_private(first, end, shadow(first));
  if (deliver == Deliver::rank0) {
    if (rank() == 0) std::memcpy(dst, from, bytes);
    return;
  }
  // Every rank copies its own when all hold the range current; otherwise rank 0's copy is sent.
  std::uint64_t current[1] = {1};
  for (std::uint64_t q = first; q < end && current[0] == 1; ++q) {
    const PageState st = state_of(q).load(std::memory_order_relaxed);
    if (st != PageState::valid && st != PageState::untouched) current[0] = 0;
  }
  transport_.allreduce(current, ReduceOp::min);
  if (current[0] == 1) {
    std::memcpy(dst, from, bytes);
    return;
  }
  if (rank() == 0) std::memcpy(dst, from, bytes);
  transport_.broadcast(0, {static_cast<std::byte*>(dst), bytes});
}

bool Node::gather_private(std::uint64_t first, std::uint64_t end, std::byte* into) {
  if (!private_pages_) return false;
  bool any = false;
  for (std::uint64_t q = first; q < end && !any; ++q) any = holder_[q].load(std::memory_order_relaxed) >= 1;
  if (!any) return false;  // the same answer on every rank: the holders are
  RecordWriter mine;
  if (rank() != 0)
    for (std::uint64_t q = first; q < end; ++q)
      if (holder_[q].load(std::memory_order_relaxed) == rank()) mine.add_whole(q, rank(), {shadow(q), page_});
  std::vector<std::byte> gathered;
  std::vector<std::uint64_t> sizes;
  transport_.gather(mine.bytes(), gathered, sizes);
  stats_.payload_bytes += mine.payload();
  stats_.header_bytes += mine.headers();
  if (rank() == 0)
    for_each_record(gathered, RecordPages{page_, first, end},
                    [&](const RecordView& r) { apply_record(r, into + ((r.page - first) << page_shift_)); });
  return true;
}

void Node::replicate(void* data, std::size_t bytes) {
  const HostCall host_call = enter("cluster::constant");
  const bool none = data == nullptr && bytes != 0;
  agree_all(
      Call::constant,
      {{bytes, "constant sizes"},
       {none ? 1 : 0,
        "buffers for a constant (1: none, a null pointer or one a rank could not allocate; 0: a buffer)"}});
  if (none) throw InvalidArgument(fmt::format("cluster::replicate of {} B into no buffer", bytes));
  if (bytes != 0 && ranks() > 1) transport_.broadcast(0, {static_cast<std::byte*>(data), bytes});
}

// What the ranks compare of a launch's arguments, as one FNV-1a hash: the count and each size; the
// value of each scalar; of each pointer (and, in an untyped launch, of each 8-byte value) whether
// and where it points into global memory.
std::uint64_t Node::arguments_hash(const ArgPack& args, std::optional<ArgKinds> kinds) const {
  std::uint64_t h = 0xcbf29ce484222325;
  const auto fold = [&h](const void* data, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i)
      h = (h ^ static_cast<const unsigned char*>(data)[i]) * 0x100000001b3;
  };
  fold(&args.count, sizeof args.count);
  for (std::size_t i = 0; i < args.count; ++i) {
    fold(&args.sizes[i], sizeof args.sizes[i]);
    const std::uint64_t bit = i < 64 ? std::uint64_t{1} << i : 0;
    if (kinds && (kinds->scalars & bit) != 0) {
      fold(args.values[i], args.sizes[i]);
    } else if ((kinds && (kinds->pointers & bit) != 0) || (!kinds && args.sizes[i] == sizeof(void*))) {
      const void* p = nullptr;
      std::memcpy(&p, args.values[i], sizeof p);
      const std::uint64_t where =
          contains(p) ? static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_) + 1 : 0;
      fold(&where, sizeof where);
    }
  }
  return h;
}

std::uint64_t Node::argument_key(const ArgPack& args, std::optional<ArgKinds> kinds, std::size_t i) const {
  const std::uint64_t bit = i < 64 ? std::uint64_t{1} << i : 0;
  if (kinds && (kinds->scalars & bit) != 0) {
    std::uint64_t key = 0;
    if (args.sizes[i] <= sizeof key) {
      std::memcpy(&key, args.values[i], args.sizes[i]);
      return key;
    }
    key = 0xcbf29ce484222325;
    for (std::size_t b = 0; b < args.sizes[i]; ++b)
      key = (key ^ static_cast<const unsigned char*>(args.values[i])[b]) * 0x100000001b3;
    return key;
  }
  if ((kinds && (kinds->pointers & bit) != 0) || (!kinds && args.sizes[i] == sizeof(void*))) {
    const void* p = nullptr;
    std::memcpy(&p, args.values[i], sizeof p);
    return contains(p) ? static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_) + 1 : 0;
  }
  return 0;
}

std::string Node::argument_difference(const ArgPack& args, std::optional<ArgKinds> kinds) {
  std::array<std::uint64_t, 2> count = {args.count, ~std::uint64_t{args.count}};
  transport_.allreduce(std::span<std::uint64_t>(count), ReduceOp::max);
  if (count[0] != ~count[1])
    return fmt::format("the ranks pass {} to {} arguments (rank {} passes {})", ~count[1], count[0], rank(),
                       args.count);
  // Per argument: its size and its key, each with its complement, so one reduction gives both ends.
  std::vector<std::uint64_t> v(4 * args.count);
  for (std::size_t i = 0; i < args.count; ++i) {
    const std::uint64_t key = argument_key(args, kinds, i);
    v[4 * i] = args.sizes[i];
    v[4 * i + 1] = ~std::uint64_t{args.sizes[i]};
    v[4 * i + 2] = key;
    v[4 * i + 3] = ~key;
  }
  transport_.allreduce(std::span<std::uint64_t>(v), ReduceOp::max);
  for (std::size_t i = 0; i < args.count; ++i) {
    if (v[4 * i] != ~v[4 * i + 1])
      return fmt::format("argument {} has {} to {} bytes (rank {}: {})", i, ~v[4 * i + 1], v[4 * i], rank(),
                         args.sizes[i]);
    if (v[4 * i + 2] == ~v[4 * i + 3]) continue;
    const std::uint64_t low = ~v[4 * i + 3], high = v[4 * i + 2], mine = argument_key(args, kinds, i);
    const std::uint64_t bit = i < 64 ? std::uint64_t{1} << i : 0;
    if (kinds && (kinds->scalars & bit) != 0)
      return args.sizes[i] <= sizeof(std::uint64_t)
                 ? fmt::format(
                       "argument {} (a scalar of {} bytes, read as an unsigned integer) is {} to {} (rank "
                       "{}: {})",
                       i, args.sizes[i], low, high, rank(), mine)
                 : fmt::format("argument {} (a scalar of {} bytes) differs", i, args.sizes[i]);
    const auto where = [&](std::uint64_t key) {
      return key == 0 ? std::string("outside global memory") : fmt::format("global byte {}", key - 1);
    };
    return fmt::format("argument {} (a pointer) points to {} on one rank and {} on another (rank {}: {})", i,
                       where(low), where(high), rank(), where(mine));
  }
  return "an argument differs";
}

void Node::launch(const Kernel& kernel, const Launch& launch, const ArgPack& args,
                  std::optional<ArgKinds> kinds) {
  const HostCall host_call = enter("cluster::launch");
  const Dim3 g = launch.grid;
  const std::uint64_t blocks = std::uint64_t{g.x} * g.y * g.z;
  if (ranks() > 1) {
    // The whole shape: ranks that split the same blocks differently (a grid of 4 x 2 against 2 x 4)
    // would number them differently.
    const Dim3 b = launch.block;
    // Which kernel: an FNV-1a hash of its name, the top bit set where it has no host body (refused
    // below, then on every rank alike). Ranks launching different kernels would each run its own.
    std::uint64_t which = 0xcbf29ce484222325;
    for (const char c : kernel.name) which = (which ^ static_cast<unsigned char>(c)) * 0x100000001b3;
    which = (which >> 1) | (kernel.host ? 0 : std::uint64_t{1} << 63);
    // The kernel's name joins the words only on a mismatch: nothing to allocate before the collective.
    try {
      agree_all(Call::launch,
                {{which, "kernels (a hash of the name; its top bit: no host body)"},
                 {g.x, "grids (their x dimension)"},
                 {g.y, "grids (their y dimension)"},
                 {g.z, "grids (their z dimension)"},
                 {b.x, "blocks (their x dimension)"},
                 {b.y, "blocks (their y dimension)"},
                 {b.z, "blocks (their z dimension)"},
                 {launch.shared_bytes, "dynamic shared memory (bytes a block)"},
                 {arguments_hash(args, kinds),
                  "arguments (a hash of their count and sizes, the values of scalars, and where pointers "
                  "point into global memory)"}});
    } catch (const InvalidArgument& e) {
      // Every rank found the same mismatch: where it is the arguments, they find which one together.
      std::string which_argument;
      const std::string_view what = e.what();
      if (what.find("different arguments (a hash") != std::string_view::npos)
        which_argument = "; " + argument_difference(args, kinds);
      else if (what.find("different grids") != std::string_view::npos ||
               what.find("different blocks") != std::string_view::npos)
        which_argument =
            fmt::format("; rank {} launched a grid of ({}, {}, {}) blocks of ({}, {}, {}) threads", rank(),
                        g.x, g.y, g.z, b.x, b.y, b.z);
      throw InvalidArgument(
          fmt::format("cluster::launch of kernel '{}': {}{}", kernel.name, e.what(), which_argument));
    }
  }
  if (blocks == 0)
    throw InvalidArgument(
        fmt::format("cluster::launch of kernel '{}' with a grid of ({}, {}, {}): no block to run",
                    kernel.name, g.x, g.y, g.z));
  // A shape the executor would refuse fails here, on every rank alike, as a bad argument rather than
  // as the kernel's failure.
  try {
    exec::validate(launch);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("cluster::launch of kernel '{}': {}", kernel.name, e.what()));
  }
  if (!kernel.host)
    throw Unsupported(
        fmt::format("kernel '{}' has no host body: the cluster runs kernels on the CPU", kernel.name));
  // One rank runs every block: no split to allocate per launch (a policy's is still checked).
  std::uint64_t first = 0, last = blocks;
  if (ranks() > 1 || options_.policy) {
    const std::vector<std::uint64_t> bounds = agreed_split(kernel.name, blocks);
    first = bounds[static_cast<std::size_t>(rank())];
    last = bounds[static_cast<std::size_t>(rank()) + 1];
  }
  std::exception_ptr error;
  kernel_name_.store(kernel.name.c_str(), std::memory_order_relaxed);  // for a refused fault's message
  in_kernel_.store(true, std::memory_order_release);
  try {
    const exec::BlockInterval interval(first, last);
    kernel.host(executor_, launch, args);
  } catch (...) {
    error = std::current_exception();
  }
  kernel_name_.store(nullptr, std::memory_order_relaxed);
  // The boundary is part of the launch: a host thread that touches global memory during it is
  // refused as during the kernel (its touch would land in the lists the boundary reads and resets).
  struct KernelEnds {
    std::atomic<bool>& in_kernel;
    ~KernelEnds() { in_kernel.store(false, std::memory_order_release); }
  } ends{in_kernel_};
  boundary(kernel.name, error);
}

void Node::set_write_vector_steps(std::uint64_t from_pages, std::uint64_t block_pages) {
  agree_all(Call::write_vector_steps,
            {{from_pages, "writeVector steps (from pages)"}, {block_pages, "writeVector blocks (pages)"}});
  vector_steps_from_ = from_pages;
  vector_block_ = std::max<std::uint64_t>(block_pages, 1);
}

// Where much global memory is in use, most of its pages are unwritten and untouched at most
// boundaries, and a word for each cost every rank as many bytes at every kernel (a GiB of 4 KiB
// pages: 1 MiB). From vector_steps_from_ pages on, the ranks first sum a flag for each block of
// vector_block_ pages (some word in it is nonzero here) and the two trailing words, then the words
// of the flagged blocks alone: a second collective where some block is flagged, but a block's worth
// of bytes per written block. Every rank flags the same blocks after the first sum, so all compact
// the words alike.
std::uint64_t Node::sum_write_vector(std::vector<std::uint32_t>& words) {
  const std::uint64_t pages = words.size() - 2;
  if (pages < vector_steps_from_) {
    transport_.allreduce(words, ReduceOp::sum);
    return words.size() * sizeof(std::uint32_t);
  }
  // The two trailing words ride with the flags: a boundary that wrote and touched nothing needs no
  // second sum.
  const std::uint64_t block = vector_block_, blocks = (pages + block - 1) / block;
  std::vector<std::uint32_t> flags(blocks + 2, 0);
  flags[blocks] = words[pages];
  flags[blocks + 1] = words[pages + 1];
  for (std::uint64_t b = 0; b < blocks; ++b)
    flags[b] = std::any_of(words.begin() + static_cast<std::ptrdiff_t>(b * block),
                           words.begin() + static_cast<std::ptrdiff_t>(std::min(pages, (b + 1) * block)),
                           [](std::uint32_t w) { return w != 0; })
                   ? 1
                   : 0;
  transport_.allreduce(flags, ReduceOp::sum);
  words[pages] = flags[blocks];
  words[pages + 1] = flags[blocks + 1];
  const std::uint64_t flagged = static_cast<std::uint64_t>(
      std::count_if(flags.begin(), flags.begin() + static_cast<std::ptrdiff_t>(blocks),
                    [](std::uint32_t f) { return f != 0; }));
  if (flagged == 0) return flags.size() * sizeof(std::uint32_t);
  std::vector<std::uint32_t> compact;
  compact.reserve(flagged * block);
  const auto each_flagged = [&](auto&& fn) {
    for (std::uint64_t b = 0; b < blocks; ++b)
      if (flags[b] != 0) fn(b * block, std::min(pages, (b + 1) * block));
  };
  each_flagged([&](std::uint64_t first, std::uint64_t end) {
    compact.insert(compact.end(), words.begin() + static_cast<std::ptrdiff_t>(first),
                   words.begin() + static_cast<std::ptrdiff_t>(end));
  });
  transport_.allreduce(compact, ReduceOp::sum);
  std::size_t at = 0;
  each_flagged([&](std::uint64_t first, std::uint64_t end) {
    std::copy_n(compact.begin() + static_cast<std::ptrdiff_t>(at), end - first,
                words.begin() + static_cast<std::ptrdiff_t>(first));
    at += end - first;
  });
  return (flags.size() + compact.size()) * sizeof(std::uint32_t);
}

void Node::set_protection(std::vector<std::pair<std::uint64_t, os::Protection>>& changes) {
  std::sort(changes.begin(), changes.end());
  std::lock_guard lock(protection_mutex_);
  for (std::size_t i = 0; i < changes.size();) {
    std::size_t j = i + 1;
    while (j < changes.size() && changes[j].first == changes[j - 1].first + 1 &&
           changes[j].second == changes[i].second)
      ++j;
    protection_->set(changes[i].first, j - i, changes[i].second);
    i = j;
  }
  // Even with no change: the fetches and reopened pages since the map merged may have brought its
  // runs back within the budget.
  protection_->regain_granularity();
}

// The end of a kernel (the seed's coherence at kernel boundaries):
//   1. the pages each rank wrote and touched are summed over the ranks (writeVector, one allreduce);
//   2. pages are classified the same way on every rank: a page only one rank ever touched becomes
//      private to it (nothing sent); a private page another rank touched becomes shared (its holder
//      sends it whole to rank 0, the others their changes); the rest are shared;
//   3. each rank encodes its written shared pages as runs of changed bytes against their twins;
//   4. pages with several writers (and, in lazy mode, every modified page) go to rank 0, which
//      merges them into its copy;
//   5. eager: each rank broadcasts its single-writer pages, rank 0 scatters the merged ones and
//      broadcasts the pages that stopped being private; lazy: each rank invalidates the pages others
//      modified, and fetches them from rank 0 when it touches them.
void Node::boundary(const std::string& kernel, const std::exception_ptr& error) {
  if (ranks() == 1) {
    ++stats_.kernels;
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    if (error) throw_failure(kernel, error, 1, 0, {});
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  // A rank that fails alone anywhere in the boundary (out of memory for its lists, a record it
  // cannot encode or apply, an MPI error on it alone, a protection the process has no mapping for)
  // cannot follow the others through the collectives left, nor keep a coherent copy: it ends the
  // job. Refusals every rank makes alike before anything moves (Unsupported: a gather of over 2 GiB)
  // are thrown as they are.
  bool moved = false;  // rank 0 has applied what it gathered
  Exchanged done;
  try {
    done = exchange(kernel, error, moved);
  } catch (const Unsupported& e) {
    // Alike on every rank, but once rank 0 merged the gathered records (the scatter after it is
    // larger) the ranks' copies differ: only a refusal before that may return.
    if (moved) fail_alone(kernel, e.what());
    throw;
  } catch (const std::exception& e) {
    fail_alone(kernel, e.what());
    throw;
  }
  ++stats_.kernels;
  stats_.lazy_kernels += done.lazy ? 1 : 0;
  stats_.pages_invalidated += done.invalidated;
  stats_.pages_written += done.written;
  stats_.pages_modified += done.modified;
  stats_.pages_multi_writer += done.multi;
  stats_.pages_promoted += done.promoted;
  stats_.pages_modified_max = std::max(stats_.pages_modified_max, done.modified);
  stats_.modified_bytes += done.modified_bytes;
  stats_.vector_bytes += done.vector_bytes;
  stats_.boundary_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (done.failed != 0) {
    // The first failing rank's message, to every rank (cut to a fixed size every rank knows): the
    // program may print the error on rank 0 only, and the cause was on another.
    std::array<char, 1024> text{};
    // With one failure the boundary's sums name the rank; with several, the lowest is agreed on.
    int first = done.failed_rank;
    if (done.failed > 1) {
      std::array<std::uint32_t, 1> lowest = {static_cast<std::uint32_t>(error ? rank() : ranks())};
      transport_.allreduce(std::span<std::uint32_t>(lowest), ReduceOp::min);
      first = static_cast<int>(lowest[0]);
    }
    if (rank() == first && error) {
      std::string mine = os::exception_text(error);
      constexpr std::string_view kCut = "... (cut; the whole message is on that rank)";
      if (mine.size() > text.size() - 1) {
        // Cut at a character's start, not inside a UTF-8 sequence, and say so.
        std::size_t keep = text.size() - 1 - kCut.size();
        while (keep > 0 && (static_cast<unsigned char>(mine[keep]) & 0xC0) == 0x80) --keep;
        mine = mine.substr(0, keep) + std::string(kCut);
      }
      std::memcpy(text.data(), mine.data(), std::min(mine.size(), text.size() - 1));
    }
    transport_.broadcast(first, std::as_writable_bytes(std::span<char>(text)));
    text.back() = '\0';
    throw_failure(kernel, error, static_cast<int>(done.failed), error ? rank() : first, text.data());
  }
}

void Node::fail_alone(const std::string& kernel, const char* what) noexcept {
  abandon_saying(transport_, "a rank failed halfway through a kernel boundary", [&] {
    return fmt::format("rank {} failed halfway through kernel {}'s boundary: {}", rank(), kernel, what);
  });
}

void Node::fail_alone_in(const char* call, const char* what) noexcept {
  abandon_saying(transport_, call, [&] {
    return fmt::format(
        "rank {} failed in {} after the ranks agreed on the call, so its global memory is no longer the "
        "others': {}",
        rank(), call, what);
  });
}

Node::Exchanged Node::exchange(const std::string& kernel, const std::exception_ptr& error, bool& moved) {
  const std::uint64_t used = used_pages_.load(std::memory_order_acquire);
  std::vector<std::uint64_t> written(written_.get(),
                                     written_.get() + written_count_.load(std::memory_order_acquire));
  std::sort(written.begin(), written.end());
  // Pages opened ahead: written ones are like any other; the rest had no writer here and stay
  // ahead until the states below make them valid and read-only again.
  std::vector<std::uint64_t> unwritten;
  // Watched private pages this rank wrote: no writers in the writeVector (their holder sends them
  // whole if they stop being private), only the race check's runs.
  std::vector<std::uint64_t> private_written;
  std::erase_if(written, [&](std::uint64_t p) {
    std::atomic<PageState>& st = state_of(p);
    if (st.load(std::memory_order_relaxed) == PageState::private_written) {
      private_written.push_back(p);
      return true;
    }
    if (st.load(std::memory_order_relaxed) != PageState::ahead) return false;
    if (std::memcmp(shadow(p), twin(p), page_) != 0) {
      st.store(PageState::written, std::memory_order_relaxed);
      return false;
    }
    unwritten.push_back(p);
    return true;
  });
  opened_unwritten_ += unwritten.size();
  // Touches of pages freed since (host code may read a page between launches and free it; free
  // marks them stale): the page is no one's now, and would otherwise come back to life as a private
  // or promoted page, also when an allocation since took it and no one touched it there.
  std::vector<std::uint64_t> touched;
  for (std::uint64_t k = 0, n = touched_count_.load(std::memory_order_acquire); k < n; ++k) {
    const std::uint64_t p = touched_[k];
    const std::uint8_t noted = touch_noted_[p].exchange(0, std::memory_order_relaxed);
    if (noted == kTouchNoted && p < used && state_of(p).load(std::memory_order_relaxed) != PageState::unused)
      touched.push_back(p);
  }

  // writeVector, one word a page: the writers, and with private pages also the ranks that touched it
  // and their numbers + 1 (which name the one toucher). Two trailing words: ranks whose blocks
  // failed, and the sum of their numbers + 1.
  std::vector<std::uint32_t> words(used + 2, 0);
  for (const std::uint64_t p : written) words[p] |= 1;
  // Touches only with private pages, whose words keep them apart from the writers: without, a page
  // this rank only read (fetched) would count as written, be sent as modified and, in lazy mode, be
  // invalidated on every rank.
  if (private_pages_)
    for (const std::uint64_t p : touched)
      words[p] |= kToucher | (static_cast<std::uint32_t>(rank() + 1) << kWhoShift);
  if (error) {
    words[used] = 1;
    words[used + 1] = static_cast<std::uint32_t>(rank() + 1);
  }
  const std::uint64_t vector_bytes = sum_write_vector(words);
  const std::uint32_t failed = words[used];
  const int failed_rank = static_cast<int>(words[used + 1]) - 1;
  const auto writers = [&](std::uint64_t p) { return private_pages_ ? words[p] & kCountMask : words[p]; };
  const auto touchers = [&](std::uint64_t p) {
    return private_pages_ ? (words[p] >> kTouchShift) & kCountMask : 0u;
  };

  // The classes, the same on every rank: what each page becomes, and which pages change hands.
  enum class Fate : std::uint8_t { none, shared, to_private, promoted };
  std::vector<Fate> fate(used, Fate::none);
  std::vector<std::uint64_t> promoted_pages;
  std::uint64_t modified = 0, multi = 0;
  for (std::uint64_t p = 0; p < used; ++p) {
    if (words[p] == 0) continue;
    const std::int32_t holder = holder_[p].load(std::memory_order_relaxed);
    if (holder == kUntouched && touchers(p) == 1) {
      fate[p] = Fate::to_private;
    } else if (holder >= 0) {
      fate[p] = touchers(p) > 0 ? Fate::promoted : Fate::none;
      if (fate[p] == Fate::promoted) promoted_pages.push_back(p);
    } else {
      fate[p] = Fate::shared;
      modified += writers(p) != 0 ? 1 : 0;
      multi += writers(p) > 1 ? 1 : 0;
    }
  }
  const bool lazy = lazy_available_ && modified > options_.lazy_pages;
  const std::uint64_t promoted = promoted_pages.size();
  const bool to_root = multi > 0 || promoted > 0 || (lazy && modified > 0);

  // This rank's copy changes from here on under the page server's lock: no request can arrive for
  // this boundary's pages before it ends (every rank is in it, and later requests wait for the
  // epoch before they take the lock), so the lock costs nothing but says so to ThreadSanitizer, which
  // cannot see the ordering that MPI gives between another rank's fetch and this boundary.
  std::unique_lock shadow_lock(serve_mutex_);
  std::uint64_t modified_bytes = 0, invalidated = 0;
  std::vector<std::pair<std::uint64_t, os::Protection>> changes;
  {
    // Runs of this rank's written shared pages: single-writer pages to broadcast (eager) or send to
    // rank 0 (lazy); several-writer pages to rank 0 (rank 0 keeps its own, to send them on and check
    // races). A page that stops being private goes to rank 0 whole from its holder.
    RecordWriter broadcast_out, root_out, own_multi, own_promoted;
    const RecordPages pages{page_, 0, used};  // what records from other ranks may name
    PerRankRecords merged(rank() == 0 ? ranks() : 0);
    for (const std::uint64_t p : written) {
      if (p >= used || fate[p] == Fate::to_private) continue;
      const std::span<const std::byte> now(shadow(p), page_), before(twin(p), page_);
      // Runs of a page other ranks write too must be exact: see RecordWriter::add.
      const bool exact = writers(p) > 1 || fate[p] == Fate::promoted;
      if (fate[p] == Fate::promoted)
        modified_bytes += (rank() == 0 ? own_promoted : root_out).add(p, rank(), now, before, exact);
      else if (writers(p) == 1 && !lazy)
        modified_bytes += broadcast_out.add(p, rank(), now, before);
      else if (rank() != 0)
        modified_bytes += root_out.add(p, rank(), now, before, exact);
      else if (writers(p) > 1)
        modified_bytes += own_multi.add(p, rank(), now, before, exact);
      else
        modified_bytes += coherence::differing_bytes(now, before);
    }
    if (rank() != 0)
      for (const std::uint64_t p : promoted_pages)
        if (holder_[p].load(std::memory_order_relaxed) == rank())
          root_out.add_whole(p, rank(), {shadow(p), page_});
    // The race check's view of the holder's own changes to a page that stops being private (rank 0
    // applies them over the whole page, which holds them already). Not counted as modified bytes:
    // the page goes whole.
    RecordWriter own_private;
    for (const std::uint64_t p : private_written)
      if (p < used && fate[p] == Fate::promoted)
        (rank() == 0 ? own_private : root_out).add(p, rank(), {shadow(p), page_}, {twin(p), page_}, true);

    if (to_root) {
      std::vector<std::byte> gathered;
      std::vector<std::uint64_t> sizes;
      transport_.gather(root_out.bytes(), gathered, sizes);
      moved = true;
      stats_.payload_bytes += root_out.payload();
      stats_.header_bytes += root_out.headers();
      if (rank() == 0) {
        RaceCheck races(check_races_, pages);
        if (check_races_) {
          races.add(own_multi.bytes());
          races.add(own_promoted.bytes());  // rank 0's changes to pages that stop being private
          races.add(own_private.bytes());   // and to its own such pages, watched
          races.add(gathered);
        }
        stats_.race_warnings += races.report(kernel, base_);
        // Rank 0's copy gets everything: the whole pages of holders first, then every change.
        for_each_record(gathered, pages, [&](const RecordView& r) {
          if (r.whole) apply_record(r, shadow(r.page));
        });
        for_each_record(own_promoted.bytes(), pages,
                        [&](const RecordView& r) { apply_record(r, shadow(r.page)); });
        // Every rank's merged stream comes in rank order, rank 0's records first: applied in that
        // order, the bytes several ranks wrote in a racy kernel end with the highest rank's value
        // everywhere, as here, where the gathered records go over rank 0's own in rank order.
        if (!lazy)
          for_each_record(own_multi.bytes(), pages, [&](const RecordView& r) { merged.add_record(r); });
        for_each_record(gathered, pages, [&](const RecordView& r) {
          if (r.whole) return;
          apply_record(r, shadow(r.page));
          if (!lazy && fate[r.page] == Fate::shared && writers(r.page) > 1) merged.add_record(r);
        });
      }
    }
    if (rank() == 0 && !lazy) {
      // Pages that stop being private go out whole: ranks that never had them need every byte.
      for (const std::uint64_t p : promoted_pages) broadcast_out.add_whole(p, 0, {shadow(p), page_});
    }
    // Each rank gets the merged several-writer pages without the runs it wrote itself: the bytes on
    // the wire are the minimum, every modified byte once to every rank that lacks it.
    const auto receivable = [&](std::uint64_t p) {
      const PageState st = state_of(p).load(std::memory_order_relaxed);
      return st != PageState::invalid || fate[p] == Fate::promoted;
    };
    if (multi > 0 && !lazy) {
      std::vector<std::byte> mine;
      transport_.scatter(merged.views(), mine);
      if (rank() == 0) {
        stats_.payload_bytes += merged.payload();
        stats_.header_bytes += merged.headers();
      }
      // Lower ranks' records may cover bytes this rank wrote too (a racy kernel), where the higher
      // rank's value wins: this rank's own records of the pages they changed go again after them,
      // before the higher ranks' records.
      std::vector<std::uint64_t> covered;
      bool own_again = rank() == 0;
      const auto reapply_own = [&] {
        own_again = true;
        if (covered.empty()) return;
        std::sort(covered.begin(), covered.end());
        for_each_record(root_out.bytes(), pages, [&](const RecordView& r) {
          if (!r.whole && std::binary_search(covered.begin(), covered.end(), r.page))
            apply_record(r, shadow(r.page));
        });
      };
      for_each_record(mine, pages, [&](const RecordView& r) {
        if (!receivable(r.page)) return;
        if (!own_again && r.writer > static_cast<std::uint32_t>(rank())) reapply_own();
        apply_record(r, shadow(r.page));
        if (r.writer < static_cast<std::uint32_t>(rank())) covered.push_back(r.page);
      });
      if (!own_again) reapply_own();
    }
    if (!lazy) {
      const std::vector<std::uint64_t> sizes = transport_.allgather(broadcast_out.bytes().size());
      std::vector<std::byte> incoming;
      for (int root = 0; root < ranks(); ++root) {
        const std::uint64_t size = sizes[static_cast<std::size_t>(root)];
        if (size == 0) continue;
        if (root == rank()) {
          transport_.broadcast(root, broadcast_out.mutable_bytes());
          stats_.payload_bytes += broadcast_out.payload() * static_cast<std::uint64_t>(ranks() - 1);
          stats_.header_bytes += broadcast_out.headers() * static_cast<std::uint64_t>(ranks() - 1);
          continue;
        }
        incoming.resize(size);
        transport_.broadcast(root, incoming);
        // A page this rank invalidated at an earlier lazy boundary stays invalid: runs cannot make a
        // stale page current, and rank 0 holds it whole.
        for_each_record(incoming, pages, [&](const RecordView& r) {
          if (receivable(r.page)) apply_record(r, shadow(r.page));
        });
      }
    }

    // The new states, protections and holders.
    const auto become = [&](std::uint64_t p, PageState next, os::Protection prot) {
      const PageState before = state_of(p).exchange(next, std::memory_order_relaxed);
      if (before != next) changes.emplace_back(p, prot);
      // Dropped: a page this rank had (not one it never touched, now private to another rank).
      if (next == PageState::invalid && before != PageState::invalid && before != PageState::untouched)
        ++invalidated;
    };
    for (std::uint64_t p = 0; p < used; ++p) {
      switch (fate[p]) {
        case Fate::none:
          break;
        case Fate::to_private: {
          const auto who = static_cast<std::int32_t>(words[p] >> kWhoShift) - 1;
          if (who < 0 || who >= ranks())
            throw Error(
                Errc::system,
                fmt::format("cluster: the writeVector names rank {} as page {}'s one toucher", who, p));
          holder_[p].store(who, std::memory_order_relaxed);
          if (who == rank())
            become(p, PageState::private_page,
                   watch_private_ ? os::Protection::read : os::Protection::read_write);
          else
            become(p, PageState::invalid, os::Protection::none);
          break;
        }
        case Fate::promoted:
          holder_[p].store(kShared, std::memory_order_relaxed);
          if (!lazy || rank() == 0)
            become(p, PageState::valid, os::Protection::read);
          else
            become(p, PageState::invalid, os::Protection::none);
          break;
        case Fate::shared: {
          holder_[p].store(kShared, std::memory_order_relaxed);
          const PageState st = state_of(p).load(std::memory_order_relaxed);
          const bool mine_alone = writers(p) == 1 && st == PageState::written;
          if (st == PageState::invalid && (!lazy || writers(p) == 0))
            break;  // fetched from rank 0 when touched
          if (!lazy || writers(p) == 0 || rank() == 0 || mine_alone)
            become(p, PageState::valid, os::Protection::read);
          else
            become(p, PageState::invalid, os::Protection::none);
          break;
        }
      }
    }
    for (const std::uint64_t p : unwritten)
      if (fate[p] == Fate::none) become(p, PageState::valid, os::Protection::read);
    // Watched private pages that stay private: read-only again for the next kernel's first write.
    for (const std::uint64_t p : private_written)
      if (p < used && fate[p] == Fate::none) become(p, PageState::private_page, os::Protection::read);
    set_protection(changes);
    // The next kernel's predictions: the pages this rank wrote that stay valid, and those it opened
    // ahead without changing them (a kernel may store the values a page already holds; a page that
    // no thread touches any more costs its twin and a comparison when a fault before it opens it
    // again).
    if (options_.open_ahead > 0) {
      for (const std::uint64_t p : predicted_pages_) predicted_[p >> 6] &= ~(std::uint64_t{1} << (p & 63));
      predicted_pages_.clear();
      for (const auto* pages : {&written, &unwritten})
        for (const std::uint64_t p : *pages)
          if (p < used && state_of(p).load(std::memory_order_relaxed) == PageState::valid) {
            predicted_[p >> 6] |= std::uint64_t{1} << (p & 63);
            predicted_pages_.push_back(p);
          }
    }
  }
  written_count_.store(0, std::memory_order_relaxed);
  touched_count_.store(0, std::memory_order_relaxed);
  next_fault_.store(kNoPageExpected, std::memory_order_relaxed);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  shadow_lock.unlock();
  epoch_.notify_all();
  return {.written = written.size(),
          .modified = modified,
          .multi = multi,
          .promoted = promoted,
          .modified_bytes = modified_bytes,
          .vector_bytes = vector_bytes,
          .invalidated = invalidated,
          .failed = failed,
          .failed_rank = failed_rank,
          .lazy = lazy};
}

HDSM_FAULT_PATH void Node::await_opened(std::atomic<PageState>& st) const noexcept {
  if (os::spin_until([&] { return st.load(std::memory_order_acquire) != PageState::twinning; })) return;
  // Sequentially consistent with opened(): either the state's load sees the new state, or the opener
  // sees the count and bumps the word after this read of it, so the sleep returns at once or wakes.
  const std::atomic_ref<std::uint32_t> word(twins_opened_);
  twin_waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = word.load(std::memory_order_seq_cst);
    if (st.load(std::memory_order_seq_cst) != PageState::twinning) break;
    os::futex_wait(twins_opened_, seen);
  }
  twin_waiters_.fetch_sub(1, std::memory_order_release);
}

HDSM_FAULT_PATH void Node::opened(std::atomic<PageState>& st, PageState now) const noexcept {
  st.store(now, std::memory_order_seq_cst);
  if (twin_waiters_.load(std::memory_order_seq_cst) != 0) {
    std::atomic_ref<std::uint32_t>(twins_opened_).fetch_add(1, std::memory_order_seq_cst);
    os::futex_wake(twins_opened_, INT_MAX);
  }
}

bool Node::on_fault(void* self, void* address, os::FaultAccess access) {
  return static_cast<Node*>(self)->resolve(address, access);
}

// Opening a page lowers other pages' protections when the mappings budget is full, so this means
// that the process itself is out of mappings.
namespace {
constexpr const char* kNoMappings =
    "the process is out of mappings (mprotect: ENOMEM): raise vm.max_map_count, or lower "
    "HDSM_CLUSTER_MAPPINGS to leave the rest of the process more";
}  // namespace

bool Node::refuse(const char* why, void* address) const noexcept {
  if (!os::claim_fatal_report()) return false;  // another thread of the rank reports
  os::signal_safe::Line line;
  line.str("hdsm cluster: rank ")
      .decimal(static_cast<std::uint64_t>(transport_.rank()))
      .str(": ")
      .str(why)
      .str(" (address ")
      .hex(reinterpret_cast<std::uintptr_t>(address));
  // In a block of a kernel: which one.
  if (const char* kernel = kernel_name_.load(std::memory_order_relaxed);
      kernel != nullptr && executor_.running_here())
    line.str(", in kernel '").str(kernel).str("'");
  line.str(")\n").write();
  return false;
}

// The write-fault handler, in the signal handler: async-signal-safe (atomics, memcpy, mprotect).
// The first thread that writes a page makes its twin and opens it for writing; threads that fault
// on the page meanwhile wait for it. A page another rank modified (lazy) is fetched by the fault
// service, off the signal handler.
HDSM_FAULT_PATH bool Node::resolve(void* address, os::FaultAccess access) noexcept {
  const std::uint64_t page = page_of(address);
  const bool kernel = in_kernel_.load(std::memory_order_acquire);
  if (kernel && !executor_.running_here())
    return refuse(
        "a host thread touched global memory while a kernel runs: host code may touch it between launches "
        "only",
        address);
  if (page >= used_pages_.load(std::memory_order_acquire))
    return refuse("access to global memory that is not allocated", address);
  std::atomic<PageState>& st = state_of(page);
  for (;;) {
    PageState s = st.load(std::memory_order_acquire);
    switch (s) {
      case PageState::unused:
        return refuse("access to global memory that is not allocated", address);
      case PageState::invalid:
        return fault_service_->submit(address, access);
      case PageState::written:
      case PageState::ahead:
      case PageState::private_written:
        return reopen(page, access, address);  // another thread of this rank opened it
      case PageState::untouched: {
        // The rank's first touch: readable now (the content is the same everywhere), and recorded so
        // the boundary knows who touched it; a write goes on to make the twin.
        // Busy (twinning) while the protection changes: a thread that saw the page valid before it
        // was readable could open it for writing, and this read-only protection would then close it.
        if (!st.compare_exchange_strong(s, PageState::twinning, std::memory_order_acq_rel)) continue;
        bool readable = false;
        {
          std::lock_guard lock(protection_mutex_);
          readable = protection_->try_set_making_room(page, os::Protection::read);
        }
        if (readable) record_touch(page);
        opened(st, readable ? PageState::valid : PageState::untouched);
        if (!readable) return refuse(kNoMappings, address);
        // Where the hardware does not tell reads from writes, a write faults again, on a readable
        // page.
        if (access != os::FaultAccess::write) return true;
        continue;
      }
      case PageState::twinning:
        await_opened(st);
        continue;
      case PageState::valid:
      case PageState::private_page: {
        // Read: a fetch made it readable meanwhile, or a merged group closed it. With one rank every
        // page is writable, so a write fault is the merged group's too; so is a private page's, unless
        // the race check watches it (read-only then, and the first write of a kernel makes its twin).
        // An access of unknown kind on a page a merged group closed is taken as a read: a write
        // faults once more, on a readable page (and only then makes a twin).
        const bool is_private = s == PageState::private_page;
        if (access == os::FaultAccess::read || (is_private ? !watch_private_ : ranks() == 1) ||
            (access == os::FaultAccess::unknown && closed(page)))
          return reopen(page, access, address);
        if (!kernel)
          return refuse("host code wrote global memory: write it with cluster::memcpy, or from a kernel",
                        address);
        if (!st.compare_exchange_strong(s, PageState::twinning, std::memory_order_acq_rel)) continue;
        if (!twin_and_open(page, st, is_private ? PageState::private_page : PageState::valid,
                           is_private ? PageState::private_written : PageState::written))
          return refuse(kNoMappings, address);
        write_faults_.fetch_add(1, std::memory_order_relaxed);
        if (is_private) return true;  // its changes feed the race check only
        if (options_.open_ahead > 0) {
          const bool sequential = next_fault_.load(std::memory_order_relaxed) == page;
          next_fault_.store(open_ahead(page + 1, sequential), std::memory_order_relaxed);
        }
        return true;
      }
    }
  }
}

// A kernel's first write to a read-only page, by the thread that set it twinning: the page's twin,
// then write access, and the page in the kernel's written list. False, the page back in state
// `back`, where the process has no mapping left for the change.
HDSM_FAULT_PATH bool Node::twin_and_open(std::uint64_t page, std::atomic<PageState>& st, PageState back,
                                         PageState now) noexcept {
  std::memcpy(twin(page), shadow(page), page_);
  bool writable = false;
  {
    std::lock_guard lock(protection_mutex_);
    writable = protection_->try_set_making_room(page, os::Protection::read_write);
  }
  if (!writable) {
    opened(st, back);
    return false;
  }
  written_[written_count_.fetch_add(1, std::memory_order_acq_rel)] = page;
  opened(st, now);
  return true;
}

HDSM_FAULT_PATH bool Node::closed(std::uint64_t page) const noexcept {
  std::lock_guard lock(protection_mutex_);
  return protection_->effective_unchecked(page) == os::Protection::none;
}

HDSM_FAULT_PATH bool Node::reopen(std::uint64_t page, os::FaultAccess access, void* address) noexcept {
  std::lock_guard lock(protection_mutex_);
  // An access of unknown kind needs what the page's state allows: were it a write to a page its
  // group left readable, asking for read only would let it retry, and fault, forever.
  const os::Protection need = access == os::FaultAccess::write ? os::Protection::read_write
                              : access == os::FaultAccess::unknown
                                  ? std::max(os::Protection::read, protection_->desired_unchecked(page))
                                  : os::Protection::read;
  if (protection_->effective_unchecked(page) >= need) return true;  // opened meanwhile: retry
  // Closed with its group when a boundary's protections outgrew the mappings (the map coarsened):
  // retrying unchanged would fault forever.
  const os::Protection desired = protection_->desired_unchecked(page);
  if (desired < need)
    return refuse("access to global memory that is not allocated", address);  // freed meanwhile
  if (protection_->try_set_making_room(page, desired) && protection_->effective_unchecked(page) >= need)
    return true;
  return refuse(kNoMappings, address);
}

// In the signal handler, after a write fault opened `first - 1`: kernels that write a page again
// and again (an output array, every launch) would fault on each of its pages in each kernel, and
// every fault's protection change is a trip through the kernel that the rank's threads take one at a
// time. The pages after it that this rank wrote in the last kernel are opened with it instead (and,
// when the fault came where a sequential writer's next one would, the pages after it whatever the
// last kernel did): their twins, and one protection change for the run. The run stops at a page
// that is not valid (another thread opens it, or it is stale), so no thread ever waits here.
// Returns the end of the run.
HDSM_FAULT_PATH std::uint64_t Node::open_ahead(std::uint64_t first, bool sequential) noexcept {
  const std::uint64_t used = used_pages_.load(std::memory_order_acquire);
  std::uint64_t end = first;
  while (end < used && end - first < options_.open_ahead && (sequential || predicted(end))) {
    PageState s = PageState::valid;
    if (!state_of(end).compare_exchange_strong(s, PageState::twinning, std::memory_order_acq_rel)) break;
    std::memcpy(twin(end), shadow(end), page_);
    ++end;
  }
  if (end == first) return end;
  bool writable = false;
  {
    std::lock_guard lock(protection_mutex_);
    writable = protection_->try_set(first, end - first, os::Protection::read_write);
  }
  if (writable) {
    const std::uint64_t at = written_count_.fetch_add(end - first, std::memory_order_acq_rel);
    for (std::uint64_t q = first; q < end; ++q) written_[at + (q - first)] = q;
    opened_ahead_.fetch_add(end - first, std::memory_order_relaxed);
  }
  for (std::uint64_t q = first; q < end; ++q)
    opened(state_of(q), writable ? PageState::ahead : PageState::valid);  // a write faults on it again
  return end;
}

bool Node::on_slow_fault(void* self, void* address, os::FaultAccess access) {
  Node& node = *static_cast<Node*>(self);
  try {
    return node.resolve_slow(address, access);
  } catch (const std::exception& e) {
    // The faulting thread cannot go on (its access is refused, which ends the process), and the
    // rank's part in the next collective with it: the job ends now, naming the fetch.
    if (node.ranks() > 1) node.fail_alone_in("a fault's page fetch", e.what());
    throw;
  }
}

// On the fault service's thread: fetch a stale page from its holder (rank 0, or the rank it is
// private to), then let the access retry
// (a write faults once more, on a current read-only page, and makes its twin then).
bool Node::resolve_slow(void* address, os::FaultAccess) {
  const std::uint64_t page = page_of(address);
  std::atomic<PageState>& st = state_of(page);
  if (st.load(std::memory_order_acquire) != PageState::invalid) return true;
  transport_.fetch(holder_of(page), page, epoch_.load(std::memory_order_acquire), {shadow(page), page_});
  record_touch(page);
  // Readable before it is valid: a thread that saw it valid first could open it for writing, and
  // this read-only protection would then close it under the writer. Threads that fault meanwhile
  // queue behind this fetch and find the page valid.
  {
    std::lock_guard lock(protection_mutex_);
    protection_->set(page, 1, os::Protection::read);
    // A degraded map gives the page its group's protection, which another closed page of the group
    // keeps at none: the page alone, where the mappings allow.
    if (protection_->effective(page) == os::Protection::none)
      (void)protection_->try_set_making_room(page, os::Protection::read);
    if (protection_->effective(page) == os::Protection::none)
      throw SystemError(
          "mprotect",
          fmt::format("page {} of the cluster's global memory (the process's mappings: vm.max_map_count)",
                      page),
          ENOMEM);
  }
  st.store(PageState::valid, std::memory_order_release);
  fetches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The page server (rank 0's, and every rank's with private pages): the page as of boundary `epoch`. A
// shared page this rank writes in the kernel running now is served from its twin, which holds it as
// of the boundary; a private page as it is (its holder may be writing other bytes of it).
void Node::serve(std::uint64_t page, std::uint64_t epoch, std::span<std::byte> out) {
  if (page >= pages_ || out.size() != page_)
    throw InvalidArgument(
        fmt::format("cluster page server: request for page {} of {} bytes", page, out.size()));
  // A rank asks for the page as of the boundaries it finished, at most one past this rank's (which
  // may still be in that boundary): an epoch further ahead would be waited for forever.
  if (const std::uint64_t now = epoch_.load(std::memory_order_acquire); epoch > now + 1)
    throw InvalidArgument(fmt::format(
        "cluster page server: request for page {} as of kernel boundary {}, but this rank finished {}", page,
        epoch, now));
  for (std::uint64_t e; (e = epoch_.load(std::memory_order_acquire)) < epoch;)
    epoch_.wait(e, std::memory_order_acquire);
  std::lock_guard lock(serve_mutex_);
  std::atomic<PageState>& st = state_of(page);
  for (;;) {
    const PageState before = st.load(std::memory_order_acquire);
    if (before == PageState::twinning) {
      await_opened(st);
      continue;
    }
    if (before == PageState::written || before == PageState::ahead) {
      std::memcpy(out.data(), twin(page), page_);
      return;
    }
    std::memcpy(out.data(), shadow(page), page_);
    // A thread that began writing the page meanwhile made its twin first: take that instead.
    if (st.load(std::memory_order_acquire) == before) return;
  }
}

PageState Node::state(const void* p) const {
  if (!contains(p)) return PageState::unused;
  return state_of(page_of(p)).load(std::memory_order_acquire);
}

void Node::refuse_mprotects(std::size_t count) {
  std::lock_guard lock(protection_mutex_);
  protection_->refuse_mprotects(count);
}

std::size_t Node::protection_granularity() const {
  std::lock_guard lock(protection_mutex_);
  return protection_->granularity_blocks();
}

Stats Node::stats() const {
  Stats s = stats_;
  s.write_faults = write_faults_.load(std::memory_order_relaxed);
  s.fetches = fetches_.load(std::memory_order_relaxed);
  s.opened_ahead = opened_ahead_.load(std::memory_order_relaxed);
  s.opened_unwritten = opened_unwritten_;
  s.wire_bytes = transport_.bytes_sent();
  std::lock_guard lock(protection_mutex_);
  s.mapping_closes = protection_->stats().closed_for_room - mapping_closes_base_;
  return s;
}

void Node::reset_stats() {
  stats_ = Stats{};
  write_faults_.store(0, std::memory_order_relaxed);
  fetches_.store(0, std::memory_order_relaxed);
  opened_ahead_.store(0, std::memory_order_relaxed);
  opened_unwritten_ = 0;
  transport_.reset_bytes_sent();
  std::lock_guard lock(protection_mutex_);
  mapping_closes_base_ = protection_->stats().closed_for_room;
}

}  // namespace hdsm::cluster::detail
