// The SIGSEGV/SIGBUS dispatcher: read/write decoding, dispatch to the owning range, concurrency,
// foreign faults (death and chaining) and errno.
#include "os/fault.hpp"
#include "os/mapping.hpp"
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace {

using hdsm::os::FaultAccess;
using hdsm::os::page_size;

// A PROT_NONE region of `pages` pages, unmapped at the end of the test.
class ProtectedRegion {
 public:
  explicit ProtectedRegion(std::size_t pages) : bytes_(pages * page_size()) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    data_ = static_cast<char*>(p);
  }
  ~ProtectedRegion() { ::munmap(data_, bytes_); }
  ProtectedRegion(const ProtectedRegion&) = delete;
  ProtectedRegion& operator=(const ProtectedRegion&) = delete;

  char* page(std::size_t i) const { return data_ + i * page_size(); }
  std::size_t bytes() const { return bytes_; }
  void protect(int prot) const { ASSERT_EQ(::mprotect(data_, bytes_, prot), 0); }

 private:
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
};

void* page_of(void* address) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  return reinterpret_cast<void*>(a - a % page_size());
}

// What a resolver saw, and the policy of the GMAC lazy-update protocol: a read (or an undecoded
// access) maps the page read-only, a write maps it read/write.
struct Recorder {
  static constexpr int kMaxCalls = 64;
  std::atomic<int> calls{0};
  void* addresses[kMaxCalls] = {};
  FaultAccess accesses[kMaxCalls] = {};
  bool accept = true;
  int clobber_errno = 0;
};

bool record_and_map(void* context, void* address, FaultAccess access) {
  auto* r = static_cast<Recorder*>(context);
  const int i = r->calls.fetch_add(1);
  if (i < Recorder::kMaxCalls) {
    r->addresses[i] = address;
    r->accesses[i] = access;
  }
  if (r->clobber_errno != 0) errno = r->clobber_errno;
  if (!r->accept) return false;
  // Undecoded: read-only the first time; a fault on a page already made readable was a write.
  bool seen = false;
  for (int j = 0; j < i && j < Recorder::kMaxCalls; ++j)
    seen = seen || page_of(r->addresses[j]) == page_of(address);
  const bool write = access == FaultAccess::write || (access == FaultAccess::unknown && seen);
  const int prot = write ? PROT_READ | PROT_WRITE : PROT_READ;
  return ::mprotect(page_of(address), page_size(), prot) == 0;
}

bool map_read_write(void* context, void* address, FaultAccess) {
  static_cast<std::atomic<int>*>(context)->fetch_add(1);
  return ::mprotect(page_of(address), page_size(), PROT_READ | PROT_WRITE) == 0;
}

// Death tests re-run the test binary, and the sanitizer runtimes install their own SIGSEGV handler
// at start-up: it would be the handler hdsm chains to (and report and exit in its own way). Reset the
// child to the default disposition so that the tests see what a plain process does.
void start_from_default_disposition() {
  hdsm::test::default_fault_disposition();
  hdsm::os::install_fault_handler();
}

// Unregisters at scope exit, so that a failed assertion does not leave a range behind for later tests.
class Registration {
 public:
  Registration(void* begin, std::size_t bytes, hdsm::os::FaultResolver resolver, void* context)
      : id_(hdsm::os::register_fault_range(begin, bytes, resolver, context)) {}
  ~Registration() {
    if (id_ >= 0) hdsm::os::unregister_fault_range(id_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  int id() const { return id_; }
  void release() { hdsm::os::unregister_fault_range(std::exchange(id_, -1)); }

 private:
  int id_;
};

int read_int(const void* address) { return *static_cast<const volatile int*>(address); }
void write_int(void* address, int value) { *static_cast<volatile int*>(address) = value; }

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hdsm::os::install_fault_handler();
    hdsm::os::reset_fault_stats();
  }
};

TEST_F(FaultTest, ReadThenWriteFaultsReachTheResolver) {
  ProtectedRegion region(2);
  write_int(region.page(1), 5678);
  region.protect(PROT_NONE);
  Recorder recorder;
  Registration range(region.page(0), region.bytes(), record_and_map, &recorder);

  EXPECT_EQ(read_int(region.page(1)), 5678);
  EXPECT_EQ(read_int(region.page(1)), 5678);  // readable now: no second fault
  ASSERT_EQ(recorder.calls.load(), 1);
  EXPECT_EQ(recorder.addresses[0], static_cast<void*>(region.page(1)));
  void* const written = region.page(1) + 4;
  write_int(written, 99);
  EXPECT_EQ(read_int(written), 99);
  ASSERT_EQ(recorder.calls.load(), 2);
  EXPECT_EQ(recorder.addresses[1], written);

  const auto stats = hdsm::os::fault_stats();
#if defined(__x86_64__)
  EXPECT_EQ(recorder.accesses[0], FaultAccess::read);
  EXPECT_EQ(recorder.accesses[1], FaultAccess::write);
  EXPECT_EQ(stats.reads, 1u);
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.unknown, 0u);
#else
  EXPECT_EQ(stats.unknown, 2u);
#endif
  hdsm::os::reset_fault_stats();
  const auto reset = hdsm::os::fault_stats();
  EXPECT_EQ(reset.reads + reset.writes + reset.unknown, 0u);
}

TEST_F(FaultTest, TwoRangesDispatchToTheirOwnResolver) {
  ProtectedRegion a(2), b(2);
  a.protect(PROT_NONE);
  b.protect(PROT_NONE);
  Recorder ra;
  std::atomic<int> rb{0};
  Registration range_a(a.page(0), a.bytes(), record_and_map, &ra);
  Registration range_b(b.page(0), b.bytes(), map_read_write, &rb);
  EXPECT_NE(range_a.id(), range_b.id());

  write_int(b.page(1), 7);
  EXPECT_EQ(ra.calls.load(), 0);
  EXPECT_EQ(rb.load(), 1);
  EXPECT_EQ(read_int(a.page(0)), 0);
  ASSERT_EQ(ra.calls.load(), 1);
  EXPECT_EQ(ra.addresses[0], static_cast<void*>(a.page(0)));
  EXPECT_EQ(rb.load(), 1);

  const int stale = range_a.id();
  range_a.release();
  EXPECT_THROW(hdsm::os::unregister_fault_range(stale), hdsm::InvalidPointer);
  write_int(b.page(0), 8);
  EXPECT_EQ(ra.calls.load(), 1);
  EXPECT_EQ(rb.load(), 2);
}

TEST_F(FaultTest, RegistrationRejectsOverlapsAndRunsOutOfSlots) {
  ProtectedRegion region(hdsm::os::kMaxFaultRanges + 1);
  std::atomic<int> calls{0};
  auto first = std::make_unique<Registration>(region.page(0), 2 * page_size(), map_read_write, &calls);
  EXPECT_THROW(hdsm::os::register_fault_range(region.page(1), page_size(), map_read_write, &calls),
               hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::os::register_fault_range(region.page(0), 0, map_read_write, &calls),
               hdsm::InvalidArgument);
  const int free_before = hdsm::os::free_fault_ranges();
  first.reset();
  EXPECT_EQ(hdsm::os::free_fault_ranges(), free_before + 1);
  std::vector<std::unique_ptr<Registration>> ranges;
  for (int i = 0; i < hdsm::os::kMaxFaultRanges; ++i)
    ranges.push_back(std::make_unique<Registration>(region.page(i), page_size(), map_read_write, &calls));
  EXPECT_EQ(hdsm::os::free_fault_ranges(), 0);
  EXPECT_THROW(hdsm::os::register_fault_range(region.page(hdsm::os::kMaxFaultRanges), page_size(),
                                              map_read_write, &calls),
               hdsm::Unsupported);
  EXPECT_THROW(hdsm::os::unregister_fault_range(-1), hdsm::InvalidPointer);
}

TEST_F(FaultTest, EightThreadsFaultingOnDistinctPagesAreAllResolved) {
  constexpr int kThreads = 8, kPagesPerThread = 32;
  ProtectedRegion region(kThreads * kPagesPerThread);
  for (int p = 0; p < kThreads * kPagesPerThread; ++p) write_int(region.page(p), p);
  region.protect(PROT_NONE);
  std::atomic<int> calls{0};
  Registration range(region.page(0), region.bytes(), map_read_write, &calls);
  std::atomic<int> wrong{0}, waiting{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() != 0) std::this_thread::yield();  // start together, so the faults overlap
      for (int i = 0; i < kPagesPerThread; ++i) {
        const int p = i * kThreads + t;  // interleaved, so neighbouring pages fault on different threads
        if (read_int(region.page(p)) != p) wrong.fetch_add(1);
        write_int(region.page(p) + 64, -p);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(calls.load(), kThreads * kPagesPerThread);  // the read made each page read/write at once
  const auto stats = hdsm::os::fault_stats();
  EXPECT_EQ(stats.reads + stats.writes + stats.unknown,
            static_cast<std::uint64_t>(kThreads * kPagesPerThread));
  for (int p = 0; p < kThreads * kPagesPerThread; ++p) EXPECT_EQ(read_int(region.page(p) + 64), -p);
}

TEST_F(FaultTest, ErrnoIsPreservedAcrossTheHandler) {
  ProtectedRegion region(1);
  region.protect(PROT_NONE);
  Recorder recorder;
  recorder.clobber_errno = EIO;
  Registration range(region.page(0), region.bytes(), record_and_map, &recorder);
  errno = ENOTTY;
  const int value = read_int(region.page(0));
  const int after = errno;
  EXPECT_EQ(value, 0);
  EXPECT_EQ(recorder.calls.load(), 1);
  EXPECT_EQ(after, ENOTTY);
}

class FaultDeathTest : public ::testing::Test {
 protected:
  hdsm::test::DeathTestStyle style_{"threadsafe"};
};

TEST_F(FaultDeathTest, ForeignAccessStillKillsWithSegv) {
  ProtectedRegion foreign(1);
  foreign.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        read_int(foreign.page(0));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "hdsm: segmentation fault at 0x[0-9a-f]+ \\(not in shared memory\\)");
  // A wild pointer near null (not null itself, which UBSan would catch before the hardware does).
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        volatile std::uintptr_t wild = 0x10;
        read_int(reinterpret_cast<const void*>(wild));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "hdsm: segmentation fault at 0x10 \\(not in shared memory\\)");
}

TEST_F(FaultDeathTest, UnregisteredRangeIsForeign) {
  ProtectedRegion region(2);
  region.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        Recorder recorder;
        const int id =
            hdsm::os::register_fault_range(region.page(0), region.bytes(), record_and_map, &recorder);
        read_int(region.page(0));
        hdsm::os::unregister_fault_range(id);
        std::fprintf(stderr, "resolved %d\n", recorder.calls.load());
        read_int(region.page(1));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "resolved 1\nhdsm: segmentation fault at 0x[0-9a-f]+ \\(not in shared memory\\)");
}

TEST_F(FaultDeathTest, DecliningResolverKillsWithSegv) {
  ProtectedRegion region(1);
  region.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        Recorder recorder;
        recorder.accept = false;
        hdsm::os::register_fault_range(region.page(0), region.bytes(), record_and_map, &recorder);
        read_int(region.page(0));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "hdsm: segmentation fault at 0x[0-9a-f]+ \\(refused by the resolver");
}

bool accept_always(void* context, void*, FaultAccess) {
  static_cast<std::atomic<int>*>(context)->fetch_add(1);
  return true;  // as a resolver does for a fault it takes for a spurious one
}

// A bus error inside a registered range (its memfd truncated under it) is no protection fault: it
// never reaches the resolver, which would call it spurious and have it retried forever (before, the
// process spun at 100 % CPU), and the process dies of it with a message.
TEST_F(FaultDeathTest, ABusErrorInARangeKillsWithSigbusWithoutItsResolver) {
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        const int fd = ::memfd_create("bus error test", MFD_CLOEXEC);
        if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(page_size())) != 0) ::_exit(2);
        void* p = ::mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) ::_exit(3);
        std::atomic<int> calls{0};
        hdsm::os::register_fault_range(p, page_size(), accept_always, &calls);
        write_int(p, 1);
        if (::ftruncate(fd, 0) != 0) ::_exit(4);
        write_int(p, 2);
        ::_exit(calls.load() == 0 ? 5 : 6);
      },
      ::testing::KilledBySignal(SIGBUS), "hdsm: bus error at 0x[0-9a-f]+ \\(in shared memory");
}

// A previous handler of SIG_IGN given with SA_SIGINFO reads back as sa_sigaction == (void*)1: it is
// no handler (before, a foreign fault jumped to address 1).
TEST_F(FaultDeathTest, APreviousIgnoreWithSigInfoIsNoHandler) {
  ProtectedRegion foreign(1);
  foreign.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        ignore.sa_flags = SA_SIGINFO;
        sigemptyset(&ignore.sa_mask);
        ::sigaction(SIGSEGV, &ignore, nullptr);  // before hdsm's: saved as the previous handler
        hdsm::os::install_fault_handler();
        read_int(foreign.page(0));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "hdsm: segmentation fault at 0x[0-9a-f]+ \\(not in shared memory\\)");
}

std::atomic<void*> expected_fault_address{nullptr};

void exit_42(int, siginfo_t* info, void*) {
  ::_exit(info->si_addr == expected_fault_address.load() ? 42 : 43);
}
void exit_44(int) { ::_exit(44); }

// The program's own SIGSEGV handler, installed before hdsm's (which then passes foreign faults to it).
void install_previous(void (*info_handler)(int, siginfo_t*, void*), void (*plain_handler)(int), int flags) {
  struct sigaction action {};
  if (info_handler != nullptr) {
    action.sa_sigaction = info_handler;
    flags |= SA_SIGINFO;
  } else {
    action.sa_handler = plain_handler;
  }
  action.sa_flags = flags;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, nullptr);
  hdsm::os::install_fault_handler();
}

TEST_F(FaultDeathTest, PreviousHandlerGetsForeignFaults) {
  ProtectedRegion foreign(1), shared(1);
  foreign.protect(PROT_NONE);
  shared.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        install_previous(exit_42, nullptr, 0);
        hdsm::os::install_fault_handler();  // idempotent: must not save itself as the previous handler
        std::atomic<int> calls{0};
        hdsm::os::register_fault_range(shared.page(0), shared.bytes(), map_read_write, &calls);
        write_int(shared.page(0), 1);  // resolved by hdsm, not passed on
        if (calls.load() != 1) ::_exit(1);
        expected_fault_address = foreign.page(0) + 8;
        read_int(foreign.page(0) + 8);
        ::_exit(0);
      },
      ::testing::ExitedWithCode(42), "");
  // A plain (non-SA_SIGINFO) handler is called too.
  EXPECT_EXIT(
      {
        install_previous(nullptr, exit_44, 0);
        read_int(foreign.page(0));
        ::_exit(0);
      },
      ::testing::ExitedWithCode(44), "");
}

// The previous handler runs with the mask it would have had without hdsm (the interrupted code's,
// its own sa_mask, and the signal), not hdsm's, which blocks every signal: a handler that leaves by
// longjmp (a probe of an address) would otherwise leave the program with SIGINT and SIGTERM
// blocked for good.
void exit_by_mask(int, siginfo_t*, void*) {
  sigset_t now;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
  const bool sigint = sigismember(&now, SIGINT) == 1, sigsegv = sigismember(&now, SIGSEGV) == 1;
  ::_exit(!sigint && sigsegv ? 45 : 46);
}

TEST_F(FaultDeathTest, PreviousHandlerRunsWithItsOwnSignalMask) {
  ProtectedRegion foreign(1);
  foreign.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        install_previous(exit_by_mask, nullptr, 0);
        read_int(foreign.page(0));
        ::_exit(0);
      },
      ::testing::ExitedWithCode(45), "");
}

// A previous handler with SA_RESETHAND (a crash reporter that raises the signal again to end with it)
// finds the default action in place, as the kernel would have left it: it runs once, and the process
// dies of the signal (before, with SIGSEGV unblocked for it, its raise came back to hdsm and to it).
std::atomic<int> reset_hand_calls{0};
void report_and_raise(int sig) {
  if (reset_hand_calls.fetch_add(1) > 0) ::_exit(3);  // called again: SA_RESETHAND was ignored
  ::raise(sig);
}

TEST_F(FaultDeathTest, PreviousHandlerWithResetHandRunsOnce) {
  ProtectedRegion foreign(1);
  foreign.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        install_previous(nullptr, report_and_raise, SA_RESETHAND | SA_NODEFER);
        read_int(foreign.page(0));
        ::_exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

// Only the previous handler's slot is reset: hdsm's handler stays the process's, and shared memory
// goes on faulting into it (before, SA_RESETHAND reset the process's action, and the next touch of
// shared memory killed the process without a word).
char* reset_hand_page = nullptr;
void open_foreign_page(int) { ::mprotect(reset_hand_page, page_size(), PROT_READ | PROT_WRITE); }

TEST_F(FaultDeathTest, PreviousHandlerWithResetHandLeavesHdsmsHandlerInPlace) {
  ProtectedRegion foreign(1), shared(1);
  foreign.protect(PROT_NONE);
  shared.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        reset_hand_page = foreign.page(0);
        install_previous(nullptr, open_foreign_page, SA_RESETHAND);
        std::atomic<int> calls{0};
        hdsm::os::register_fault_range(shared.page(0), shared.bytes(), map_read_write, &calls);
        read_int(foreign.page(0));  // the previous handler opens it, once
        write_int(shared.page(0), 1);
        ::_exit(calls.load() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// A crash handler that ends as Open MPI's does (its own slot back to the default, then raise) comes
// back to hdsm with the signal it sent itself: that is the fault reported already, and the process
// dies of it without a second line saying that some process sent a SIGSEGV.
void report_reset_and_raise(int sig) {
  constexpr char kLine[] = "crash handler ran\n";
  (void)!::write(STDERR_FILENO, kLine, sizeof kLine - 1);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

TEST_F(FaultDeathTest, ACrashHandlerThatRaisesAgainGetsNoSecondReport) {
  ProtectedRegion foreign(1);
  foreign.protect(PROT_NONE);
  EXPECT_EXIT(
      {
        install_previous(nullptr, report_reset_and_raise, 0);
        read_int(foreign.page(0));
        ::_exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "crash handler ran.?$");
}

// A SIGSEGV that kill or raise sent has no address (si_addr holds the sender's pid): the message
// says who sent it instead of naming a bogus address.
TEST_F(FaultDeathTest, ASentSigsegvIsNotReportedAsAnAddress) {
  EXPECT_EXIT(
      {
        start_from_default_disposition();
        ::raise(SIGSEGV);
        ::_exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "hdsm: SIGSEGV sent by process [0-9]+ \\(kill, raise or sigqueue\\)");
}

}  // namespace
