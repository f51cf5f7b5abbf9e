// A worker's read miss where it shares the home's memory: it copies the page itself while its
// request goes home, and copies it again when the home counted it as a reader after a change that
// the first copy may have missed (the page's version moved in between). The home is played by the
// test, so the interleaving is exact. And the home's checks of direct copies' offsets, with the
// workers played by the test.
#include "crc/worker.hpp"
#include "crc/directory.hpp"
#include "crc/home.hpp"
#include "crc/page_buffer.hpp"
#include "crc/transport.hpp"

#include <hdsm/crc.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace hdsm::crc::detail;

constexpr std::size_t kPage = 1024;
constexpr std::size_t kPages = 8;

class ScriptedHome final : public WorkerLink {
 public:
  explicit ScriptedHome(std::byte* space) : space_(space) {}

  Reply call(Request& r) override {
    ADD_FAILURE() << "a call without a copy in between: " << to_string(r.op);
    return {};
  }
  Reply call(Request& r, void (*meanwhile)(void*), void* context) override {
    EXPECT_EQ(r.op, Op::fetch_read);
    EXPECT_TRUE(r.copying);
    meanwhile(context);  // the worker's own copy, as the request travels
    if (merge_before_counting) {
      // Another worker's write-back, merged before the home gets to this request.
      std::memset(space_ + r.page * kPage, 2, kPage);
      versions_[r.page].store(versions_[r.page].load() + 1, std::memory_order_release);
    }
    return Reply{.version = versions_[r.page].load()};
  }
  void post(Request&) override {}
  void get(std::uint64_t offset, std::byte* into, std::size_t bytes) override {
    std::memcpy(into, space_ + offset, bytes);
    ++gets;
  }
  void put(std::uint64_t offset, const std::byte* from, std::size_t bytes) override {
    std::memcpy(space_ + offset, from, bytes);
  }
  const std::atomic<std::uint32_t>* versions() const override { return versions_.data(); }

  bool merge_before_counting = false;
  int gets = 0;

 private:
  std::byte* space_;
  std::array<std::atomic<std::uint32_t>, kPages> versions_{};
};

struct CopyingMiss : ::testing::Test {
  alignas(4096) std::array<std::byte, kPage * kPages> space{};
  ScriptedHome home{space.data()};
  Worker worker{0, 1, 16 << 10, home, Space{reinterpret_cast<std::uintptr_t>(space.data()), space.size()}};

  void SetUp() override {
    space.fill(std::byte{1});
    worker.begin(geometry(16 << 10, kPage, 0));
  }
  void TearDown() override { worker.end(); }
};

TEST_F(CopyingMiss, KeepsItsCopyWhenThePageDidNotChangeBeforeTheHomeCountedIt) {
  EXPECT_EQ(hdsm::crc::read(&space[3 * kPage + 5]), std::byte{1});
  EXPECT_EQ(home.gets, 1);  // one copy, made while the request travelled
  // A later change is the home's to announce (the page goes on this worker's invalidation list);
  // until then the buffered copy is what the worker reads.
  space[3 * kPage + 5] = std::byte{9};
  EXPECT_EQ(hdsm::crc::read(&space[3 * kPage + 5]), std::byte{1});
}

TEST_F(CopyingMiss, CopiesAgainWhenAChangeCameBetweenItsCopyAndTheCount) {
  home.merge_before_counting = true;
  EXPECT_EQ(hdsm::crc::read(&space[2 * kPage]), std::byte{2});
  EXPECT_EQ(home.gets, 2);
}

// A worker whose page buffer cannot be laid out (no memory for its tables) tells the home, as a
// failed task does: before, the exception left Worker::run without a word, so the home waited for
// the worker for good (MPI) or the worker's thread ended the process (threads).
class PostsOnly final : public WorkerLink {
 public:
  Reply call(Request& r) override {
    ADD_FAILURE() << "a call: " << to_string(r.op);
    return {};
  }
  void post(Request& r) override {
    posted.push_back(r.op);
    messages.push_back(r.message);
  }
  void get(std::uint64_t, std::byte*, std::size_t) override {}
  void put(std::uint64_t, const std::byte*, std::size_t) override {}
  std::vector<Op> posted;
  std::vector<std::string> messages;
};

TEST(WorkerFailures, ABufferThatCannotBeLaidOutIsReportedToTheHome) {
  alignas(4096) std::array<std::byte, kPage * kPages> space{};
  PostsOnly link;
  Worker worker{0, 1, 16 << 10, link, Space{reinterpret_cast<std::uintptr_t>(space.data()), space.size()}};
  bool ran = false;
  // More ways than a vector can hold: the tables' allocation throws before it takes any memory.
  const Geometry huge{
      .page_size = kPage, .page_shift = 10, .frames = std::size_t{1} << 60, .sets = std::size_t{1} << 60};
  const std::exception_ptr error = worker.run([&] { ran = true; }, huge, 1);
  EXPECT_FALSE(ran);
  ASSERT_TRUE(error);
  ASSERT_EQ(link.posted, std::vector<Op>{Op::failed});
  EXPECT_NE(link.messages[0].find("crc worker 0: its page buffer for 1024 B pages could not be set up"),
            std::string::npos)
      << link.messages[0];
  // The next region lays it out again and runs.
  EXPECT_FALSE(worker.run([&] { ran = true; }, geometry(16 << 10, kPage, 0), 1));
  EXPECT_TRUE(ran);
  EXPECT_EQ(link.posted.back(), Op::done);
}

// The home's end of direct copies: under MPI without a window their offsets come from another
// process, and one outside the shared space must not address anything.
class ScriptedWorkers final : public HomeLink {
 public:
  explicit ScriptedWorkers(std::vector<Request> script) : script_(std::move(script)) {}
  bool receive(Request& request, std::chrono::steady_clock::time_point) override {
    if (next_ == script_.size()) return false;
    request = script_[next_++];
    return true;
  }
  std::span<const std::byte> written(const Request& r) override { return {r.written, kPage}; }
  void reply(const Caller& caller, const Reply& reply, std::span<const std::byte>,
             std::span<const std::uint64_t>) override {
    if (caller.worker == fail_next_to) {
      fail_next_to = -1;
      throw std::runtime_error("the transport failed");
    }
    replies.push_back(reply);
    to.push_back(caller.worker);
  }
  std::vector<Reply> replies;
  std::vector<int> to;    // the worker of each reply
  int fail_next_to = -1;  // the next reply to this worker throws (a transport that failed)

 private:
  std::vector<Request> script_;
  std::size_t next_ = 0;
};

TEST(HomeDirectCopies, OffsetsOutsideTheSharedSpaceFailTheRegion) {
  const std::array<std::byte, kPage> page{};
  for (const Op op : {Op::direct_get, Op::direct_put}) {
    for (const std::uint64_t offset :
         {std::uint64_t{kPage * kPages}, std::uint64_t{kPage * kPages - kPage / 2}, ~std::uint64_t{0} - 8}) {
      SCOPED_TRACE(::testing::Message() << to_string(op) << " at offset " << offset);
      std::vector<std::byte> space(kPage * (kPages + 1), std::byte{7});  // a guard page after the space
      Directory directory(kPages, kPage, 1);
      ScriptedWorkers link({Request{.op = op, .worker = 0, .page = offset, .written = page.data()},
                            Request{.op = Op::done, .worker = 0}});
      Home home(link, directory, space.data(), 1, std::chrono::milliseconds(1000));
      hdsm::crc::Stats stats;
      const std::exception_ptr error = home.serve(kPage, stats);
      ASSERT_TRUE(error);
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("outside the shared space"), std::string::npos) << e.what();
      }
      if (op == Op::direct_get) {
        ASSERT_EQ(link.replies.size(), 1u);
        EXPECT_EQ(link.replies[0].status, Status::error);
      }
      for (std::size_t b = 0; b < space.size(); ++b) ASSERT_EQ(space[b], std::byte{7}) << b;
    }
  }
  // Inside the space, the same requests land.
  std::vector<std::byte> space(kPage * kPages, std::byte{7});
  Directory directory(kPages, kPage, 1);
  std::array<std::byte, kPage> ones;
  ones.fill(std::byte{1});
  ScriptedWorkers link({Request{.op = Op::direct_put, .worker = 0, .page = 3 * kPage, .written = ones.data()},
                        Request{.op = Op::done, .worker = 0}});
  Home home(link, directory, space.data(), 1, std::chrono::milliseconds(1000));
  hdsm::crc::Stats stats;
  EXPECT_FALSE(home.serve(kPage, stats));
  EXPECT_EQ(space[3 * kPage], std::byte{1});
  EXPECT_EQ(space[4 * kPage], std::byte{7});
}

// A request the home cannot serve fails the region and is answered, once: a write-back of a page the
// worker never had write permission for (the directory refuses it), and an unlock whose waiter's
// grant fails after the unlocker got its answer (before, the home's error left every worker
// waiting; a catch that answered the unlocker again would leave a stale reply in its mailbox).
TEST(HomeFailures, ARequestTheHomeCannotServeFailsTheRegionAndIsAnsweredOnce) {
  std::array<std::byte, kPage> page{};
  {
    std::vector<std::byte> space(kPage * kPages);
    Directory directory(kPages, kPage, 1);
    ScriptedWorkers link({Request{.op = Op::write_back, .worker = 0, .page = 1, .written = page.data()},
                          Request{.op = Op::done, .worker = 0}});
    Home home(link, directory, space.data(), 1, std::chrono::milliseconds(1000));
    hdsm::crc::Stats stats;
    EXPECT_TRUE(home.serve(kPage, stats));
    ASSERT_EQ(link.replies.size(), 1u);
    EXPECT_EQ(link.replies[0].status, Status::aborted);
  }
  std::vector<std::byte> space(kPage * kPages);
  Directory directory(kPages, kPage, 2);
  ScriptedWorkers link({Request{.op = Op::lock, .worker = 0, .number = 1},
                        Request{.op = Op::lock, .worker = 1, .number = 1},
                        Request{.op = Op::unlock, .worker = 0, .number = 1},
                        Request{.op = Op::done, .worker = 0}, Request{.op = Op::done, .worker = 1}});
  link.fail_next_to = 1;  // worker 1's grant
  Home home(link, directory, space.data(), 2, std::chrono::milliseconds(1000));
  hdsm::crc::Stats stats;
  const std::exception_ptr error = home.serve(kPage, stats);
  ASSERT_TRUE(error);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "the transport failed");
  }
  EXPECT_EQ(link.to, (std::vector<int>{0, 0, 1}));  // lock, unlock, then worker 1 told the region failed
  EXPECT_EQ(link.replies.back().status, Status::aborted);
}

}  // namespace
