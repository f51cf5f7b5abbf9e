// The MPI engine of hdsm::crc: rank 0 is the home and holds the shared space, every other rank is a
// worker whose task runs in the thread that calls Runtime::run. Requests and replies are messages
// on a duplicate of MPI_COMM_WORLD, the pages inside them; read-only and single-writer pages move by
// one-sided gets and puts on a window over the shared space (the seed's DMA without a handshake).
// The protocol (Home, Worker, Directory) is libhdsm's, as with threads. libhdsm finds this engine at
// run time through the C symbol hdsm_crc_mpi_engine. MPI calls go to libmpi's PMPI entry points,
// past libhdsm_mpi's own interposition (these buffers are never shared objects).
#include "crc/directory.hpp"
#include "crc/engine.hpp"
#include "crc/home.hpp"
#include "crc/transport.hpp"
#include "crc/worker.hpp"
#include "mpi/check.hpp"
#include "mpi/finalize_hook.hpp"
#include "mpi/poll.hpp"
#include "os/errno_text.hpp"
#include "os/fault.hpp"
#include "os/mapping.hpp"
#include "os/offset_heap.hpp"
#include "os/process.hpp"
#include "os/signal_safe_io.hpp"

#include <hdsm/export.h>
#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <sched.h>

namespace hdsm::crc::detail {
namespace {

constexpr int kRequestTag = 7101;
constexpr int kReplyTag = 7102;

constexpr mpi_detail::CallCheck check{"crc over MPI"};

/// Whether the directory where Open MPI's shared-memory windows keep their backing file (/dev/shm,
/// or OMPI_MCA_osc_sm_backing_directory) has room for `bytes`; true where it cannot tell, and a
/// window is then tried. (On rank 0's node: ranks on other nodes do not use that component.)
bool shm_has_room(std::size_t bytes) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): hdsm never changes the environment
  const char* set = std::getenv("OMPI_MCA_osc_sm_backing_directory");
  struct statvfs fs {};
  if (::statvfs(set != nullptr && set[0] != '\0' ? set : "/dev/shm", &fs) != 0) return true;
  return bytes <= static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize;
}

struct WireRequest {
  std::uint8_t op;
  std::uint8_t write;
  std::int32_t worker;
  std::int32_t errc;
  std::uint64_t page;
  std::uint64_t victim;
  std::int64_t number;
  std::uint64_t sequence;
  std::uint32_t page_bytes;  // the written page follows the header
  std::uint32_t message;     // then the failure's text
  std::uint32_t pages;       // then a single_put's page numbers
};

struct WireReply {
  std::uint8_t status;
  std::uint8_t data;
  std::uint32_t page_bytes;
  std::uint32_t invalidations;
  std::uint32_t message;
};

// Ends the job saying why (printf's `format`), allocating nothing: what ends it may be out of memory.
[[noreturn]] __attribute__((format(printf, 1, 2))) void end_job(const char* format, ...) noexcept {
  std::fputs("hdsm: crc over MPI: ", stderr);
  std::va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputs("; the job ends\n", stderr);
  std::fflush(stderr);
  PMPI_Abort(MPI_COMM_WORLD, 70);
  std::abort();
}

// A message whose lengths do not add up to its size, or that names another worker than the rank it
// came from (a corrupted message, another version of the library): nothing in it can be trusted, and
// the rank it came from waits for an answer, so the job ends.
[[noreturn]] void malformed(int rank, const std::string& what) {
  end_job("rank %d: a malformed message (%s)", rank, what.c_str());
}

template <class T>
void append(std::vector<std::byte>& out, const T* data, std::size_t count) {
  const auto* b = reinterpret_cast<const std::byte*>(data);
  out.insert(out.end(), b, b + count * sizeof(T));
}

int receive_into(std::vector<std::byte>& buffer, int source, int tag, MPI_Comm comm) {
  MPI_Status status;
  check(PMPI_Probe(source, tag, comm, &status), "MPI_Probe",
        [&] { return fmt::format("a message from rank {}", source); });
  int count = 0;
  PMPI_Get_count(&status, MPI_BYTE, &count);
  buffer.resize(static_cast<std::size_t>(count));
  check(PMPI_Recv(buffer.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE),
        "MPI_Recv", [&] { return fmt::format("{} B from rank {}", count, status.MPI_SOURCE); });
  return status.MPI_SOURCE;
}

class MpiHomeLink final : public HomeLink {
 public:
  MpiHomeLink(MPI_Comm comm, MPI_Win window, int workers) : comm_(comm), window_(window), workers_(workers) {
    out_.reserve(sizeof(WireReply));  // a reply of a status alone never allocates (reply())
  }
  void set_page_size(std::size_t bytes) { page_size_ = bytes; }

  bool receive(Request& r, std::chrono::steady_clock::time_point deadline) override {
    for (unsigned polls = 0;; ++polls) {
      // Round-robin: the worker after the one served last is asked first.
      for (int k = 1; k <= workers_; ++k) {
        const int w = (last_ + k) % workers_;
        int flag = 0;
        check(PMPI_Iprobe(w + 1, kRequestTag, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe",
              [&] { return fmt::format("requests of worker {}", w); });
        if (flag == 0) continue;
        receive_into(buffer_, w + 1, kRequestTag, comm_);
        sync_window();  // the workers' puts before this request, for the home's loads
        unpack(r, w);
        last_ = w;
        return true;
      }
      if (polls % 16 == 15) ::sched_yield();  // ranks often outnumber the cores
      if (polls % 64 == 63 && std::chrono::steady_clock::now() >= deadline) return false;
    }
  }

  std::span<const std::byte> written(const Request&) override {
    return {buffer_.data() + sizeof(WireRequest), page_size_};
  }

  // The late workers are other processes, which nothing here can stop: the job ends rather than
  // waits for them for good.
  void stalled(const std::string& why) override {
    std::fprintf(stderr, "hdsm: %s; the home (rank 0) ends the job\n", why.c_str());
    std::fflush(stderr);
    PMPI_Abort(comm_, 70);
  }

  // The worker waits for this reply (its call's answer, or the home's word that the region failed).
  // Out of memory to pack it, nothing reached the worker yet: the home fails the region and tells it
  // so in a reply of a status alone, which fits in what out_ reserved. A reply that cannot be sent
  // would leave the worker waiting for good, so the job ends instead.
  void reply(const Caller& r, const Reply& reply, std::span<const std::byte> page,
             std::span<const std::uint64_t> invalidations) override {
    pack_reply(reply, page, invalidations);
    try {
      sync_window();  // the home's stores before this reply, for the worker's gets after it
      check(PMPI_Send(out_.data(), static_cast<int>(out_.size()), MPI_BYTE, r.worker + 1, kReplyTag, comm_),
            "MPI_Send", "a reply");
    } catch (const std::exception& e) {
      end_job("the home (rank 0) could not answer worker %d (%zu B): %s", r.worker, out_.size(), e.what());
    }
  }

 private:
  void pack_reply(const Reply& reply, std::span<const std::byte> page,
                  std::span<const std::uint64_t> invalidations) {
    const WireReply h{.status = static_cast<std::uint8_t>(reply.status),
                      .data = static_cast<std::uint8_t>(reply.data ? 1 : 0),
                      .page_bytes = static_cast<std::uint32_t>(page.size()),
                      .invalidations = static_cast<std::uint32_t>(invalidations.size()),
                      .message = static_cast<std::uint32_t>(reply.message.size())};
    out_.clear();
    append(out_, &h, 1);
    append(out_, page.data(), page.size());
    append(out_, invalidations.data(), invalidations.size());
    append(out_, reply.message.data(), reply.message.size());
  }

  // Within a region's passive-target epoch, the home's own loads and stores and the workers'
  // one-sided copies of its window meet only through the messages: MPI_Win_sync at each of them
  // makes the window's copies agree (a memory barrier, with the unified memory model).
  void sync_window() {
    if (window_ != MPI_WIN_NULL) check(PMPI_Win_sync(window_), "MPI_Win_sync", "the shared space");
  }

  void unpack(Request& r, int from) {
    WireRequest h;
    if (buffer_.size() < sizeof h)
      malformed(0, fmt::format("a request of {} B from worker {}", buffer_.size(), from));
    std::memcpy(&h, buffer_.data(), sizeof h);
    const std::size_t expected =
        sizeof h + std::size_t{h.page_bytes} + h.message + std::size_t{h.pages} * sizeof(std::uint64_t);
    if (h.worker != from || h.op > static_cast<std::uint8_t>(Op::failed) ||
        (h.page_bytes != 0 && h.page_bytes != page_size_) || buffer_.size() != expected)
      malformed(
          0, fmt::format("request {} of {} B from worker {}, naming worker {}, with a page of {} B ({} B "
                         "pages), {} B of text and {} page numbers",
                         h.op, buffer_.size(), from, h.worker, h.page_bytes, page_size_, h.message, h.pages));
    const Op op = static_cast<Op>(h.op);
    const bool carries_page = op == Op::write_back || op == Op::flush_fetch || op == Op::direct_put;
    if (carries_page != (h.page_bytes != 0))
      malformed(0, fmt::format("a {} request from worker {} {} a page", to_string(op), from,
                               carries_page ? "without" : "with"));
    r = Request{};
    r.op = op;
    r.worker = from;
    r.write = h.write != 0;
    r.page = h.page;
    r.victim = h.victim;
    r.number = h.number;
    r.sequence = h.sequence;
    r.errc = h.errc;
    if (h.message != 0)
      r.message.assign(reinterpret_cast<const char*>(buffer_.data() + sizeof h + h.page_bytes), h.message);
    const std::size_t at = sizeof h + h.page_bytes + h.message;
    if (h.pages != 0) {  // within the message: its size was checked above
      r.pages.resize(h.pages);
      std::memcpy(r.pages.data(), buffer_.data() + at, r.pages.size() * sizeof(std::uint64_t));
    }
  }

  MPI_Comm comm_;
  MPI_Win window_;
  int workers_;
  int last_ = 0;
  std::size_t page_size_ = 0;
  std::vector<std::byte> buffer_, out_;
};

class MpiWorkerLink final : public WorkerLink {
 public:
  MpiWorkerLink(MPI_Comm comm, MPI_Win window, int worker, std::uint64_t window_offset)
      : comm_(comm), window_(window), worker_(worker), window_offset_(window_offset) {}
  void set_page_size(std::size_t bytes) { page_size_ = bytes; }

  Reply call(Request& r) override {
    send(r);
    receive_into(in_, 0, kReplyTag, comm_);
    WireReply h;
    if (in_.size() < sizeof h)
      malformed(worker_ + 1, fmt::format("a reply of {} B from the home", in_.size()));
    std::memcpy(&h, in_.data(), sizeof h);
    // The lengths must add up to the message, and a page can only land in the frame the call gave.
    if (in_.size() != sizeof h + std::size_t{h.page_bytes} +
                          std::size_t{h.invalidations} * sizeof(std::uint64_t) + h.message ||
        (h.page_bytes != 0 && (r.frame == nullptr || h.page_bytes != page_size_)) ||
        (h.invalidations != 0 && r.invalidations == nullptr))
      malformed(
          worker_ + 1,
          fmt::format("a reply of {} B from the home to a {} call, with a page of {} B ({} B pages), {} "
                      "invalidations and {} B of text",
                      in_.size(), to_string(r.op), h.page_bytes, page_size_, h.invalidations, h.message));
    const std::byte* at = in_.data() + sizeof h;
    Reply reply{.status = static_cast<Status>(h.status), .data = h.data != 0, .message = {}};
    if (h.page_bytes != 0) std::memcpy(r.frame, at, h.page_bytes);
    at += h.page_bytes;
    if (r.invalidations != nullptr) {
      r.invalidations->resize(h.invalidations);
      if (h.invalidations != 0)
        std::memcpy(r.invalidations->data(), at, h.invalidations * sizeof(std::uint64_t));
    }
    at += h.invalidations * sizeof(std::uint64_t);
    reply.message.assign(reinterpret_cast<const char*>(at), h.message);
    return reply;
  }

  void post(Request& r) override {
    if (r.op != Op::done && r.op != Op::failed) {
      send(r);
      return;
    }
    // The worker's last word in the region: the home waits for it, so one that cannot be sent ends the
    // job rather than leaves the home waiting.
    try {
      send(r);
    } catch (const std::exception& e) {
      end_job("worker %d could not tell the home that it %s: %s", worker_,
              r.op == Op::done ? "ended its task" : "failed", e.what());
    }
  }

  void get(std::uint64_t offset, std::byte* into, std::size_t bytes) override {
    if (window_ == MPI_WIN_NULL) {
      // No one-sided copies in this MPI: the home sends the bytes (no directory bookkeeping).
      Request r{.op = Op::direct_get, .worker = worker_, .page = offset, .frame = into};
      check_direct(call(r));
      return;
    }
    check(PMPI_Get(into, static_cast<int>(bytes), MPI_BYTE, 0, static_cast<MPI_Aint>(window_offset_ + offset),
                   static_cast<int>(bytes), MPI_BYTE, window_),
          "MPI_Get", [&] { return fmt::format("{} B at offset {} of the shared space", bytes, offset); });
    check(PMPI_Win_flush(0, window_), "MPI_Win_flush", "a get from the shared space");
  }

  void put(std::uint64_t offset, const std::byte* from, std::size_t bytes) override {
    if (window_ == MPI_WIN_NULL) {
      Request r{.op = Op::direct_put, .worker = worker_, .page = offset, .written = from};
      send(r);
      return;
    }
    check(PMPI_Put(from, static_cast<int>(bytes), MPI_BYTE, 0, static_cast<MPI_Aint>(window_offset_ + offset),
                   static_cast<int>(bytes), MPI_BYTE, window_),
          "MPI_Put", [&] { return fmt::format("{} B at offset {} of the shared space", bytes, offset); });
    check(PMPI_Win_flush(0, window_), "MPI_Win_flush", "a put into the shared space");
  }

 private:
  void send(const Request& r) {
    const std::size_t page = r.written != nullptr ? page_size_ : 0;
    const WireRequest h{.op = static_cast<std::uint8_t>(r.op),
                        .write = static_cast<std::uint8_t>(r.write ? 1 : 0),
                        .worker = r.worker,
                        .errc = r.errc,
                        .page = r.page,
                        .victim = r.victim,
                        .number = r.number,
                        .sequence = r.sequence,
                        .page_bytes = static_cast<std::uint32_t>(page),
                        .message = static_cast<std::uint32_t>(r.message.size()),
                        .pages = static_cast<std::uint32_t>(r.pages.size())};
    out_.clear();
    append(out_, &h, 1);
    append(out_, r.written, page);
    append(out_, r.message.data(), r.message.size());
    append(out_, r.pages.data(), r.pages.size());
    check(PMPI_Send(out_.data(), static_cast<int>(out_.size()), MPI_BYTE, 0, kRequestTag, comm_), "MPI_Send",
          [&] { return fmt::format("a {} request of {} B to the home", to_string(r.op), out_.size()); });
  }

  MPI_Comm comm_;
  MPI_Win window_;
  int worker_;
  std::uint64_t window_offset_;  // where the space starts in rank 0's window
  std::size_t page_size_ = 0;
  std::vector<std::byte> in_, out_;
};

constexpr int kStatsFields = sizeof(Stats) / sizeof(std::uint64_t);
static_assert(sizeof(Stats) == kStatsFields * sizeof(std::uint64_t), "Stats is a row of counters");

class MpiEngine final : public Engine {
 public:
  MpiEngine(const Options& o, std::exception_ptr local_error) : options_(o) {
    int initialized = 0, finalized = 0;
    PMPI_Initialized(&initialized);
    PMPI_Finalized(&finalized);
    if (finalized != 0)
      throw InvalidArgument(
          "crc over MPI: MPI is finalized already (a crc::Runtime that started MPI finalizes it at its end): "
          "a "
          "program that makes runtimes one after another calls MPI_Init itself, and MPI_Finalize after the "
          "last");
    if (initialized == 0) {
      int provided = 0;
      check(PMPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread",
            "crc::Runtime");
      own_mpi_ = true;
    }
    // A communicator of its own: the program's messages never meet the runtime's.
    mpi_detail::duplicate(MPI_COMM_WORLD, &comm_, check, "MPI_COMM_WORLD");
    PMPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    PMPI_Comm_rank(comm_, &rank_);
    int size = 0;
    PMPI_Comm_size(comm_, &size);
    workers_ = size - 1;
    if (workers_ < 1 || workers_ > kMaxWorkers) {
      PMPI_Comm_free(&comm_);
      throw InvalidArgument(
          fmt::format("crc over MPI with {} rank{}: it needs 2 to {} (rank 0 is the home, the others "
                      "the workers)",
                      size, size == 1 ? "" : "s", kMaxWorkers + 1));
    }
    const std::size_t bytes = (o.shared_bytes + kSpaceAlignment - 1) / kSpaceAlignment * kSpaceAlignment;
    // The options every rank must share, compared first: different ones stop every rank with one
    // message, instead of workers that size the space their own way.
    std::uint64_t shared[4] = {bytes, ~std::uint64_t{bytes}, o.page_size, ~std::uint64_t{o.page_size}};
    check(PMPI_Allreduce(MPI_IN_PLACE, shared, 4, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce",
          "the ranks' options");
    if (shared[0] != ~shared[1] || shared[2] != ~shared[3]) {
      PMPI_Comm_free(&comm_);
      if (own_mpi_) PMPI_Finalize();  // every rank is here
      throw InvalidArgument(
          fmt::format("crc over MPI: the ranks' {} differ: every rank must use the same",
                      shared[0] != ~shared[1]
                          ? fmt::format("Options::shared_bytes (HDSM_CRC_SHARED, rounded up to {} B: "
                                        "from {} to {} B; this rank has {} B)",
                                        kSpaceAlignment, ~shared[1], shared[0], bytes)
                          : fmt::format("Options::page_size (HDSM_CRC_PAGE_SIZE: from {} to {} B; this "
                                        "rank has {} B)",
                                        ~shared[3], shared[2], o.page_size)));
    }
    // The shared space is a window on rank 0, so read-only and single-writer pages move by one-sided
    // gets and puts. Where this MPI cannot make one (Open MPI's pt2pt one-sided component needs
    // MPI_THREAD_MULTIPLE, for one), the space is plain memory and those copies go through the home.
    // A window too large for the shared-memory file system is not tried: Open MPI's osc_sm then
    // fails on rank 0 alone, which goes on, while the other ranks wait inside MPI_Win_allocate for
    // good. Rank 0 decides for all.
    int try_window = rank_ == 0 && !shm_has_room(bytes + kSpaceAlignment) ? 0 : 1;
    check(PMPI_Bcast(&try_window, 1, MPI_INT, 0, comm_), "MPI_Bcast", "whether to make the window");
    std::byte* window_base = nullptr;
    int made =
        try_window != 0 && PMPI_Win_allocate(rank_ == 0 ? static_cast<MPI_Aint>(bytes + kSpaceAlignment) : 0,
                                             1, MPI_INFO_NULL, comm_, &window_base, &window_) == MPI_SUCCESS
            ? 1
            : 0;
    int everywhere = 0;
    check(PMPI_Allreduce(&made, &everywhere, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce",
          "the window's creation");
    if (everywhere == 0) {
      if (made != 0) PMPI_Win_free(&window_);
      window_ = MPI_WIN_NULL;
      window_base = nullptr;
    } else {
      PMPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN);
    }
    // Each rank sets up its part alone (the home its space and directory, a worker its local store)
    // and then the ranks agree on the outcome: a failure on one rank stops all of them, instead of
    // that one alone while the others wait for it in the next collective.
    std::exception_ptr error = std::move(local_error);
    std::uint64_t base = 0;
    if (rank_ == 0 && !error) {
      try {
        if (window_base == nullptr) {
          space_ = os::Mapping(bytes + kSpaceAlignment, "crc shared space");
          window_base = space_.data();
        }
        // Pages are aligned by address: the space starts on the largest page size.
        data_ = align_space(window_base);
        window_offset_ = static_cast<std::uint64_t>(data_ - window_base);
        heap_ = std::make_unique<os::OffsetHeap>(bytes, kSpaceAlignment);
        // One more worker than ranks: the home, in regions it works in (run_with_home).
        directory_ = std::make_unique<Directory>(bytes / o.page_size, o.page_size,
                                                 std::min(workers_ + 1, kMaxWorkers));
        home_link_ = std::make_unique<MpiHomeLink>(comm_, window_, workers_);
        home_ = std::make_unique<Home>(*home_link_, *directory_, data_, workers_, o.timeout);
        base = reinterpret_cast<std::uintptr_t>(data_);
      } catch (...) {
        error = std::current_exception();
      }
    }
    // Every rank names the shared space by rank 0's addresses: pointers mean the same everywhere.
    std::uint64_t where[2] = {base, window_offset_};
    check(PMPI_Bcast(where, 2, MPI_UINT64_T, 0, comm_), "MPI_Bcast", "the shared space's address");
    base = where[0];
    window_offset_ = where[1];
    space_base_ = base;
    space_bytes_ = bytes;
    // Every rank keeps which parts of the space are allocated (alloc and free are collective).
    try {
      granules_ = std::make_unique<Granules>(bytes);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    if (rank_ != 0 && base != 0 && !error) {
      try {
        worker_link_ = std::make_unique<MpiWorkerLink>(comm_, window_, rank_ - 1, window_offset_);
        worker_ = std::make_unique<Worker>(rank_ - 1, workers_, o.local_store, *worker_link_,
                                           Space{space_base_, space_bytes_, granules_.get()});
      } catch (...) {
        error = std::current_exception();
      }
    }
    std::int32_t failed = error ? rank_ + 1 : 0;
    check(PMPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT32_T, MPI_MAX, comm_), "MPI_Allreduce",
          "the ranks' setup");
    if (failed != 0) {
      home_.reset();
      home_link_.reset();
      worker_.reset();
      worker_link_.reset();
      if (window_ != MPI_WIN_NULL) PMPI_Win_free(&window_);
      PMPI_Comm_free(&comm_);
      if (own_mpi_) PMPI_Finalize();  // every rank is here
      if (error) std::rethrow_exception(error);
      throw Error(Errc::system,
                  fmt::format("crc over MPI: rank {} could not set up its part of the runtime (its own "
                              "exception says why), so no rank starts",
                              failed - 1));
    }
    // An MPI_Finalize at exit() from a task, on one of this rank's threads: left to the process's end,
    // as the runtime's own end would leave it.
    hook_ = std::make_unique<mpi::FinalizeHook>([this] {
      if (origin_.may_tear_down()) end_mpi();
    });
    // On a worker, the space's addresses (rank 0's) hold nothing: a task that dereferences a shared
    // pointer instead of crc::read gets a message saying so, not "not in shared memory". Where the
    // range is taken by another runtime's, the plain message stays.
    // The range is reserved first (inaccessible, no memory): only where nothing of this worker's is
    // mapped there, and so that nothing is mapped there later and taken for the shared space.
    if (rank_ != 0) {
      void* want = reinterpret_cast<void*>(space_base_);
      void* got = ::mmap(want, space_bytes_, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      // Best effort: without it, a direct access gets the plain message. Said once, with why.
      const auto without = [&](const std::string& why) {
        fmt::print(stderr,
                   "hdsm crc: worker {}: {}; a task's direct access to the shared space will not be named "
                   "as such\n",
                   rank_ - 1, why);
      };
      if (got == want) {
        reserved_ = got;
        try {
          direct_access_range_ =
              os::register_fault_range(want, space_bytes_, &MpiEngine::refuse_direct_access, this);
        } catch (const std::exception& e) {
          without(e.what());
        }
      } else if (got != MAP_FAILED) {
        ::munmap(got, space_bytes_);  // a kernel without MAP_FIXED_NOREPLACE placed it elsewhere
      } else if (errno != EEXIST) {   // EEXIST: this worker maps something there (the plain message)
        without(fmt::format("mmap of the shared space's {} bytes at {} failed: {}", space_bytes_, want,
                            os::errno_text(errno)));
      }
    }
  }

  // A worker's plain load or store in the shared space (rank 0's addresses, unmapped here).
  static bool refuse_direct_access(void* self, void* address, os::FaultAccess) noexcept {
    if (!os::claim_fatal_report()) return false;  // another thread of the worker reports
    os::signal_safe::Line()
        .str("hdsm crc: worker ")
        .decimal(static_cast<std::uint64_t>(static_cast<MpiEngine*>(self)->rank_ - 1))
        .str(" touched the shared space directly (address ")
        .hex(reinterpret_cast<std::uintptr_t>(address))
        .str(
            "): under MPI it lives on rank 0, and a task reaches it with crc::read and crc::write "
            "(or read_local and write_local)\n")
        .write();
    return false;
  }

  ~MpiEngine() override {
    hook_.reset();  // without ending anything; after the program's MPI_Finalize, that ended it
    if (!ended_) end_mpi();
  }

  // The runtime's MPI part: at its end, or at the program's MPI_Finalize if that comes first.
  void end_mpi() {
    ended_ = true;
    if (direct_access_range_ >= 0) os::unregister_fault_range(std::exchange(direct_access_range_, -1));
    if (reserved_ != nullptr && ::munmap(std::exchange(reserved_, nullptr), space_bytes_) != 0)
      fmt::print(stderr, "hdsm crc: munmap of the reserved shared space ({} bytes) failed: {}\n",
                 space_bytes_, os::errno_text(errno));
    // The end is a collective too (the window's and the communicator's frees): a rank still in
    // another call (allocate, free, run) fails there, since this is not the call it made, and this
    // rank agrees again until every rank is at its end. A rank that ends its runtime with an exception
    // in flight (one only it threw, caught outside the runtime) may meet ranks that wait elsewhere,
    // in the program's own MPI calls: after HDSM_CRC_TIMEOUT it ends the job instead of a hang.
    const bool unwinding = std::uncaught_exceptions() > 0;
    for (;;) {
      std::uint64_t values[kAgreed] = {};
      values[kAgreed - 2] = kEnding;
      values[kAgreed - 1] = ~kEnding;
      bool met = true;
      try {
        met = agree(values, kEnding, unwinding);
      } catch (const std::exception& e) {  // the MPI error: nothing left to agree with
        std::fprintf(stderr, "hdsm: %s\n", e.what());
        break;
      }
      if (!met) {
        std::fprintf(stderr,
                     "hdsm: crc over MPI: rank %d ended its runtime with an exception in flight and waited "
                     "%lld ms (HDSM_CRC_TIMEOUT) for the other ranks to end theirs; they are elsewhere (did "
                     "a call throw on this rank only?): rank %d ends the job\n",
                     rank_, static_cast<long long>(options_.timeout.count()), rank_);
        std::fflush(stderr);
        PMPI_Abort(comm_, 70);
        std::abort();
      }
      if (values[kAgreed - 2] == ~values[kAgreed - 1]) break;
      std::fprintf(stderr,
                   "hdsm: crc over MPI: rank %d ended its runtime while another rank was in %s, which fails "
                   "there; rank %d waits for the others to end theirs\n",
                   rank_, collective_name(~values[kAgreed - 1]), rank_);
    }
    if (window_ != MPI_WIN_NULL) PMPI_Win_free(&window_);
    PMPI_Comm_free(&comm_);
    int finalized = 0;
    PMPI_Finalized(&finalized);
    if (own_mpi_ && finalized == 0 && !(hook_ && hook_->fired())) PMPI_Finalize();
  }

  /// InvalidArgument once the program's MPI_Finalize ended the runtime's MPI part.
  void require_running(const char* call) const {
    if (ended_)
      throw InvalidArgument(fmt::format(
          "crc over MPI: {} after MPI_Finalize, which ended the runtime's part (end the runtime first)",
          call));
  }

  int workers() const override { return workers_; }
  bool is_home() const override { return rank_ == 0; }

  void* allocate(std::size_t bytes) override {
    require_running("crc::Runtime::alloc");
    // Collective: every rank must ask for the same size, or its pointers would name other ranks'
    // bytes (refused on every rank, as cluster::alloc does).
    std::uint64_t sizes[kAgreed] = {bytes, ~std::uint64_t{bytes}};
    agree_collective(kAllocating, sizes);
    if (sizes[0] != ~sizes[1])
      throw InvalidArgument(
          fmt::format("crc::Runtime::allocate over MPI: the ranks asked for different sizes (from {} to {} "
                      "B; rank {} for {} "
                      "B); allocation is collective and every rank must ask for the same",
                      ~sizes[1], sizes[0], rank_, bytes));
    if (bytes == 0) throw InvalidArgument("crc::Runtime::allocate(0): nothing to allocate");
    std::uint64_t offset = ~std::uint64_t{0};
    std::uint64_t used[2] = {0, 0};
    if (rank_ == 0) {
      if (const auto o = heap_->allocate(bytes)) {
        offset = *o;
        std::memset(data_ + offset, 0, heap_->rounded(bytes));
      }
      used[0] = heap_->used();
      used[1] = heap_->capacity();
    }
    std::uint64_t message[3] = {offset, used[0], used[1]};
    check(PMPI_Bcast(message, 3, MPI_UINT64_T, 0, comm_), "MPI_Bcast", "an allocation of the shared space");
    if (message[0] == ~std::uint64_t{0})
      throw OutOfDeviceMemory("crc shared space", bytes, message[1], message[2], "HDSM_CRC_SHARED");
    void* p = reinterpret_cast<void*>(space_base_ + message[0]);
    sizes_[p] = bytes;
    granules_->mark(message[0], bytes, true);
    return p;
  }

  void free(void* pointer) override {
    require_running("crc::Runtime::free");
    // Collective too: a rank that freed alone would go on using what the home hands out again.
    // A pointer that is no allocation (a host pointer differs between ranks by nature) is compared
    // as one value, so that ranks that all pass one agree, and each says so.
    // A null pointer is a value of its own (0): every rank freeing null is nothing, agreed.
    const bool known = sizes_.contains(pointer);
    const auto offset = known || pointer == nullptr
                            ? static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pointer))
                            : ~std::uint64_t{0};
    std::uint64_t pointers[kAgreed] = {offset, ~offset};
    agree_collective(kFreeing, pointers);
    if (pointers[0] != ~pointers[1])
      throw InvalidArgument(fmt::format(
          "crc::Runtime::free over MPI: the ranks freed different pointers (rank {} freed {}{}); free is "
          "collective and every rank must free the same allocation",
          rank_, pointer, known || pointer == nullptr ? "" : ", which is no allocation of the shared space"));
    if (pointer == nullptr) return;
    const auto it = sizes_.find(pointer);
    if (it == sizes_.end())
      throw InvalidPointer(
          fmt::format("crc::Runtime::free({}): not an allocation of this shared space", pointer));
    if (rank_ == 0) heap_->release(reinterpret_cast<std::uintptr_t>(pointer) - space_base_, it->second);
    granules_->mark(reinterpret_cast<std::uintptr_t>(pointer) - space_base_, it->second, false);
    sizes_.erase(it);
  }

  void abandon() noexcept override {
    if (hook_) hook_->disarm();
  }

  Stats run_with_home(const std::function<void()>& task, const Geometry& geometry) override {
    require_running("crc::Runtime::run_with_home");
    if (workers_ + 1 > kMaxWorkers)  // the same answer on every rank
      throw InvalidArgument(
          fmt::format("crc::Runtime::run_with_home with {} workers: the home would be worker {}, "
                      "beyond the {} supported",
                      workers_, workers_ + 1, kMaxWorkers));
    return run_region(task, geometry, true);
  }

  Stats run(const std::function<void()>& task, const Geometry& geometry) override {
    require_running("crc::Runtime::run");
    return run_region(task, geometry, false);
  }

 private:
  // The collectives a rank enters between regions, which each begin with this agreement: a rank in
  // one while another is in the other (a program that diverged) is refused on both, instead of their
  // reductions matching and the collectives after them hanging.
  static constexpr std::uint64_t kAllocating = 1, kFreeing = 2, kRunning = 3, kEnding = 4;
  static const char* collective_name(std::uint64_t which) {
    static constexpr std::array<const char*, 5> kNames = {"?", "allocate", "free", "run",
                                                          "the runtime's end"};
    return which < kNames.size() ? kNames[which] : "?";
  }
  /// Reduces `values` with MPI_MAX: the caller's values, each beside its complement (up to three
  /// pairs, the rest 0), then the collective's name and its complement (the last two, filled in
  /// here); InvalidArgument on every rank when the ranks are in different collectives. Every
  /// collective reduces as many values, so that ranks in different ones still match.
  static constexpr std::size_t kAgreed = 8;
  /// The reduction of agree_collective and of the end. A rank that has waited HDSM_CRC_TIMEOUT says so,
  /// naming the call, and goes on waiting (no timeout tells a late rank from one that is elsewhere),
  /// unless `give_up`: then false, the reduction left pending, for a caller that ends the job.
  bool agree(std::uint64_t (&values)[kAgreed], std::uint64_t which, bool give_up) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(PMPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(kAgreed), MPI_UINT64_T, MPI_MAX, comm_,
                          &request),
          "MPI_Iallreduce", [&] { return fmt::format("the agreement to {}", collective_name(which)); });
    const char* what = "the ranks' agreement on a collective call";
    if (mpi_detail::wait_within(request, options_.timeout, check, what)) return true;
    if (give_up) return false;
    std::fprintf(stderr,
                 "hdsm: crc over MPI: rank %d has waited %lld ms (HDSM_CRC_TIMEOUT) in %s for the other "
                 "ranks, and goes on waiting: they may still be busy (rank 0 takes seconds to build a large "
                 "shared space's directory, at the start or at a new, smaller page size), or they wait "
                 "elsewhere, and then one rank left an earlier call alone or never makes this one\n",
                 rank_, static_cast<long long>(options_.timeout.count()), collective_name(which));
    return mpi_detail::wait_within(request, std::chrono::milliseconds::max(), check, what);
  }

  void agree_collective(std::uint64_t which, std::uint64_t (&values)[kAgreed]) {
    values[kAgreed - 2] = which;
    values[kAgreed - 1] = ~which;
    const auto name = [](std::uint64_t w) { return collective_name(w); };
    agree(values, which, false);
    if (values[kAgreed - 2] != ~values[kAgreed - 1])
      throw InvalidArgument(fmt::format(
          "crc over MPI: the ranks called different collectives (some {}, some {}): every rank calls "
          "allocate, free and run (or run_with_home) in the same order",
          name(~values[kAgreed - 1]), name(values[kAgreed - 2])));
  }

  Stats run_region(const std::function<void()>& task, const Geometry& geometry, bool home_works) {
    const int count = home_works ? workers_ + 1 : workers_;
    // The home sets up its side before the ranks agree to start (its directory's table, its own
    // worker): once they have, the workers wait for its answers, so a failure here rides the
    // agreement and the region starts nowhere.
    std::exception_ptr error;
    if (rank_ == 0) {
      try {
        directory_->reset(space_bytes_ / geometry.page_size, geometry.page_size);
        home_link_->set_page_size(geometry.page_size);
        if (home_works && !home_worker_)
          home_worker_ = std::make_unique<HomeWorker>(*directory_, data_, workers_, options_.local_store,
                                                      Space{space_base_, space_bytes_, granules_.get()},
                                                      options_.zero_copy);
      } catch (...) {
        error = nested_failure_of(
            fmt::format("crc home (rank 0): a region of {} B pages could not be set up", geometry.page_size));
      }
    }
    // Runtime::page_size is each rank's own call: the ranks agree on the region's page before it
    // starts (a worker and the home that number pages differently would move the wrong bytes), and on
    // whether the home works in it (run_with_home: the workers count it). The largest value and the
    // largest complement of one: every rank learns the largest and smallest.
    const std::uint64_t page = geometry.page_size, with_home = home_works ? 1 : 0, failed = error ? 1 : 0;
    std::uint64_t agreed[kAgreed] = {page, ~page, with_home, ~with_home, failed, ~failed};
    agree_collective(kRunning, agreed);
    if (agreed[0] != ~agreed[1])
      throw InvalidArgument(fmt::format(
          "crc::Runtime::run under MPI: the ranks set page sizes from {} B to {} B for this region (rank "
          "{}: {} B); crc::Runtime::page_size is collective: every rank sets the same",
          ~agreed[1], agreed[0], rank_, geometry.page_size));
    if (agreed[2] != ~agreed[3])
      throw InvalidArgument(fmt::format(
          "crc over MPI: some ranks called run and others run_with_home (rank {}: {}); every rank calls "
          "the same",
          rank_, home_works ? "run_with_home" : "run"));
    Stats mine;
    if (agreed[4] != 0) return outcome(error, mine);  // the home could not set up: no rank starts
    // One-sided gets and puts bypass the home, so nothing orders them after what the home stored
    // before the region (its initialization of the shared space) or before what it reads after it,
    // unless the window's copies are synchronized and the ranks meet: at the start and at the end.
    if (window_ != MPI_WIN_NULL) {
      check(PMPI_Win_lock_all(0, window_), "MPI_Win_lock_all", "the shared space");
      if (rank_ == 0) check(PMPI_Win_sync(window_), "MPI_Win_sync", "the shared space before a region");
      check(PMPI_Barrier(comm_), "MPI_Barrier", "the start of a region");
    }
    if (rank_ == 0) {
      std::exception_ptr home_error;
      // The home's own share first, in place in its memory (nobody waits for it), then it serves.
      if (home_works) home_error = home_worker_->run(task, geometry, count, mine);
      error = home_->serve(geometry.page_size, mine);
      if (!error) error = home_error;
      mine.twins = directory_->twins_made();
      if (window_ != MPI_WIN_NULL) {
        // Every worker's puts were flushed before its last message: the home's loads see them now.
        check(PMPI_Win_sync(window_), "MPI_Win_sync", "the shared space after a region");
        check(PMPI_Win_unlock_all(window_), "MPI_Win_unlock_all", "the shared space");
      }
    } else {
      worker_link_->set_page_size(geometry.page_size);
      (void)worker_->run(task, geometry, count);  // the home reports the region's error to every rank
      if (window_ != MPI_WIN_NULL)
        check(PMPI_Win_unlock_all(window_), "MPI_Win_unlock_all", "the shared space");
      mine = worker_->stats();
      worker_->reset_stats();
    }
    return outcome(error, mine);
  }

  /// The region's end on every rank: its counters summed on rank 0, and its error (rank 0's `error`)
  /// thrown on every rank.
  Stats outcome(const std::exception_ptr& error, Stats& mine) {
    Stats total;
    check(PMPI_Reduce(&mine, &total, kStatsFields, MPI_UINT64_T, MPI_SUM, 0, comm_), "MPI_Reduce",
          "the region's counters");
    // The region's error reaches every rank, so an SPMD program takes the same path everywhere.
    std::int32_t code = 0;
    std::string text;
    if (rank_ == 0 && error) {
      try {
        std::rethrow_exception(error);
      } catch (const Error& e) {
        code = static_cast<std::int32_t>(e.code());
      } catch (...) {
        code = static_cast<std::int32_t>(Errc::kernel_failure);
      }
      // The other ranks wait for the outcome below: out of memory for the words, the code goes alone.
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        try {
          text = e.what();
        } catch (...) {  // NOLINT(bugprone-empty-catch)
        }
      } catch (...) {
        try {
          text = "an exception that is not a std::exception";
        } catch (...) {  // NOLINT(bugprone-empty-catch)
        }
      }
    }
    std::int32_t header[2] = {code, static_cast<std::int32_t>(text.size())};
    check(PMPI_Bcast(header, 2, MPI_INT32_T, 0, comm_), "MPI_Bcast", "the region's outcome");
    text.resize(static_cast<std::size_t>(header[1]));
    if (header[1] != 0)
      check(PMPI_Bcast(text.data(), header[1], MPI_CHAR, 0, comm_), "MPI_Bcast", "the region's error");
    // Rank 0 keeps its own error object (a nested original with it) where the others rebuild the same
    // class from the code; otherwise (a SystemError, a program's subclass, a non-hdsm exception) it
    // throws what they do, so that every rank catches alike.
    if (rank_ == 0 && error) {
      Request failure;
      describe_failure(error, failure);
      if (failure.exact || is_nested_kernel_failure(error)) std::rethrow_exception(error);
    }
    if (header[0] != 0) std::rethrow_exception(make_error(static_cast<Errc>(header[0]), text));
    Stats& result = rank_ == 0 ? total : mine;
    result.regions = 1;
    return result;
  }

  Options options_;
  os::Origin origin_;  // where the engine was made: whether its MPI may be ended from here
  bool own_mpi_ = false;
  bool ended_ = false;                       // end_mpi ran
  int direct_access_range_ = -1;             // a worker's fault range over the space, for its message
  void* reserved_ = nullptr;                 // a worker's reservation of the space's addresses
  std::unique_ptr<mpi::FinalizeHook> hook_;  // runs end_mpi at the program's MPI_Finalize
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  int rank_ = 0;
  int workers_ = 0;
  std::uintptr_t space_base_ = 0;
  std::size_t space_bytes_ = 0;
  std::map<void*, std::size_t> sizes_;
  std::unique_ptr<Granules> granules_;
  // The home's (rank 0): the space is the window's memory, or space_ where there is no window.
  std::byte* data_ = nullptr;
  std::uint64_t window_offset_ = 0;  // where the space starts in the window
  os::Mapping space_;
  std::unique_ptr<os::OffsetHeap> heap_;
  std::unique_ptr<Directory> directory_;
  std::unique_ptr<MpiHomeLink> home_link_;
  std::unique_ptr<Home> home_;
  std::unique_ptr<HomeWorker> home_worker_;  // run_with_home: the home as the last worker
  // A worker's (the other ranks).
  std::unique_ptr<MpiWorkerLink> worker_link_;
  std::unique_ptr<Worker> worker_;
};

std::unique_ptr<Engine> make_mpi_engine(const Options& options, std::exception_ptr local_error) {
  return std::make_unique<MpiEngine>(options, std::move(local_error));
}

}  // namespace
}  // namespace hdsm::crc::detail

extern "C" HDSM_API hdsm::crc::detail::EngineFactory hdsm_crc_mpi_engine() {
  return &hdsm::crc::detail::make_mpi_engine;
}
