// The object directory: O(1) pointer -> object -> block, tombstones of freed objects, id and slot
// reuse rules, typed errors, and lock-free lookups beside inserts and erases of other objects.
#include <hdsm/error.hpp>

#include "coherence/directory.hpp"
#include "os/arena.hpp"
#include "os/mapping.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using hdsm::coherence::BlockState;
using hdsm::coherence::Directory;
using hdsm::coherence::Object;
using hdsm::coherence::ObjectId;
using hdsm::os::Arena;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

TEST(Directory, LooksUpFirstInteriorAndLastBytesInSeveralSegments) {
  Arena arena(3, GiB);
  Directory dir(arena, 64 * KiB);
  struct Placed {
    ObjectId id;
    unsigned segment;
    std::size_t bytes;
  };
  std::vector<Placed> placed;
  for (unsigned s = 0; s < 3; ++s)
    for (std::size_t bytes : {std::size_t{1}, 100 * KiB, 64 * KiB, 5 * MiB + 3})
      placed.push_back({dir.insert(s, bytes), s, bytes});
  EXPECT_EQ(dir.size(), placed.size());
  for (const Placed& p : placed) {
    Object* o = dir.find(p.id);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->id, p.id);
    EXPECT_EQ(o->segment, p.segment);
    EXPECT_EQ(o->bytes, p.bytes);
    EXPECT_EQ(o->offset % dir.block_bytes(), 0u);
    EXPECT_EQ(o->blocks, (p.bytes + dir.block_bytes() - 1) / dir.block_bytes());
    ASSERT_EQ(o->states.size(), o->blocks);
    for (BlockState s : o->states) EXPECT_EQ(s, BlockState::invalid);
    const std::byte* base = dir.user(*o);
    EXPECT_EQ(base, arena.user(p.segment, o->offset));
    for (std::size_t in : {std::size_t{0}, p.bytes / 2, p.bytes - 1}) {
      const auto hit = dir.lookup(base + in);
      EXPECT_EQ(hit.object, o) << "offset " << in << " of object #" << p.id;
      EXPECT_EQ(hit.offset_in_object, in);
      EXPECT_EQ(hit.block, in / dir.block_bytes());
    }
    EXPECT_EQ(dir.object_at_start(base), o);
  }
}

TEST(Directory, BlockIndexArithmeticForSeveralBlockSizes) {
  Arena arena(2, GiB);
  for (std::size_t block : {4 * KiB, 64 * KiB, MiB}) {
    Directory dir(arena, block);
    EXPECT_EQ(dir.block_bytes(), block);
    EXPECT_EQ(std::size_t{1} << dir.block_shift(), block);
    const ObjectId small = dir.insert(0, 3 * block / 2);  // a block and a half
    const ObjectId large = dir.insert(1, 10 * block + 1);
    const Object* o = dir.find(large);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->blocks, 11u);
    const std::byte* base = dir.user(*o);
    for (std::size_t b = 0; b < 10; ++b) {
      EXPECT_EQ(dir.lookup(base + b * block).block, b);
      EXPECT_EQ(dir.lookup(base + b * block + block - 1).block, b);
      EXPECT_EQ(dir.lookup(base + b * block + block / 3).offset_in_object, b * block + block / 3);
    }
    EXPECT_EQ(dir.lookup(base + 10 * block).block, 10u);           // the last byte, alone in the 11th block
    EXPECT_EQ(dir.lookup(base + 10 * block + 1).object, nullptr);  // padding of the last block
    const Object* s = dir.find(small);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->blocks, 2u);
    EXPECT_EQ(dir.lookup(dir.user(*s) + block + block / 2 - 1).block, 1u);
    dir.erase(small);
    dir.erase(large);
  }
}

TEST(Directory, GapsAndPointersOutsideTheArenaHitNothing) {
  Arena arena(2, GiB);
  Directory dir(arena, 64 * KiB);
  const ObjectId a = dir.insert(0, 10 * KiB);
  const std::byte* base = dir.user(*dir.find(a));
  EXPECT_EQ(dir.lookup(base + 10 * KiB).object, nullptr);       // one past the end, still in its block
  EXPECT_EQ(dir.lookup(base + 64 * KiB).object, nullptr);       // the next, unused block
  EXPECT_EQ(dir.lookup(arena.user(1, 12345)).object, nullptr);  // an empty segment
  EXPECT_EQ(dir.lookup(arena.user(0, 0) - 1).object, nullptr);
  EXPECT_EQ(dir.lookup(arena.user(1, GiB - 1) + 1).object, nullptr);
  EXPECT_EQ(dir.lookup(arena.shadow(0, 0)).object, nullptr);
  EXPECT_EQ(dir.lookup(nullptr).object, nullptr);
  int local = 0;
  EXPECT_EQ(dir.lookup(&local).object, nullptr);
  EXPECT_NE(dir.describe(&local).find("not in the shared-object arena"), std::string::npos);
  EXPECT_NE(dir.describe(arena.user(1, 12345)).find("outside any shared object"), std::string::npos);
  EXPECT_NE(dir.describe(base + 10 * KiB).find("past the end of shared object #" + std::to_string(a)),
            std::string::npos);
  EXPECT_NE(dir.describe(base + 5).find("inside shared object #" + std::to_string(a)), std::string::npos);
}

TEST(Directory, ErasedObjectsAreGoneButDescribedAsFreed) {
  Arena arena(1, GiB);
  Directory dir(arena, 64 * KiB);
  const ObjectId keep = dir.insert(0, MiB);
  const ObjectId gone = dir.insert(0, 4 * MiB);
  Object* o = dir.find(gone);
  ASSERT_NE(o, nullptr);
  std::byte* base = dir.user(*o);
  // The pages are given back: written data does not survive the erase.
  arena.protect(0, o->offset, 4 * MiB, PROT_READ | PROT_WRITE);
  std::memset(base, 0x5a, 4 * MiB);
  EXPECT_GE(arena.resident_bytes(0), 4 * MiB);
  dir.erase(gone);
  EXPECT_LT(arena.resident_bytes(0), 4 * MiB);
  EXPECT_EQ(dir.find(gone), nullptr);
  EXPECT_EQ(dir.size(), 1u);
  for (std::size_t in : {std::size_t{0}, 2 * MiB + 7, 4 * MiB - 1}) {
    EXPECT_EQ(dir.lookup(base + in).object, nullptr);
    const std::string what = dir.describe(base + in);
    EXPECT_NE(what.find("inside freed object #" + std::to_string(gone) + " (4 MiB, freed)"),
              std::string::npos)
        << what;
  }
  EXPECT_NE(dir.lookup(dir.user(*dir.find(keep))).object, nullptr);

  // A new object over part of the freed range replaces the tombstone there, not elsewhere.
  const ObjectId reuse = dir.insert(0, MiB);
  const Object* r = dir.find(reuse);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(dir.user(*r), base);  // best fit puts it at the start of the hole
  EXPECT_EQ(dir.lookup(base + 100).object, r);
  EXPECT_NE(dir.describe(base + 100).find("inside shared object #" + std::to_string(reuse)),
            std::string::npos);
  EXPECT_NE(dir.describe(base + 3 * MiB).find("freed object #" + std::to_string(gone)), std::string::npos);
  // Once the whole range is taken again, the tombstone is gone. (Each object also holds the block
  // after its end, where nothing else starts: the hole is 4 MiB + 64 KiB.)
  const ObjectId rest = dir.insert(0, 3 * MiB - 64 * KiB);
  EXPECT_EQ(dir.user(*dir.find(rest)), base + MiB + 64 * KiB);
  EXPECT_NE(dir.describe(base + 3 * MiB).find("inside shared object #" + std::to_string(rest)),
            std::string::npos);
  dir.erase(rest);
  EXPECT_NE(dir.describe(base + 3 * MiB).find("freed object #" + std::to_string(rest) + " (2.9 MiB, freed)"),
            std::string::npos);
  EXPECT_NE(dir.describe(base + 100).find("inside shared object #" + std::to_string(reuse)),
            std::string::npos);
}

// The pointer one past an object's last byte (a range's end) names that object for lookup_argument()
// and no object for lookup(); no other object starts there, whatever the sizes.
TEST(Directory, ARangesEndNamesTheObjectItEnds) {
  Arena arena(1, GiB);
  Directory dir(arena, 4 * KiB);
  for (const std::size_t bytes : {std::size_t{4 * KiB}, std::size_t{8 * KiB}, std::size_t{100}}) {
    SCOPED_TRACE(bytes);
    const ObjectId a = dir.insert(0, bytes);
    const ObjectId b = dir.insert(0, bytes);
    const Object* o = dir.find(a);
    std::byte* end = dir.user(*o) + bytes;
    EXPECT_EQ(dir.lookup(end).object, nullptr);
    const Directory::Hit hit = dir.lookup_argument(end);
    EXPECT_EQ(hit.object, o);
    EXPECT_EQ(hit.offset_in_object, bytes);
    EXPECT_EQ(hit.block, o->blocks);
    EXPECT_NE(dir.user(*dir.find(b)), end) << "the next object starts at the end";
    EXPECT_EQ(dir.lookup_argument(end + 1).object, nullptr);
    EXPECT_EQ(dir.lookup_argument(dir.user(*o) + 1).offset_in_object, 1u) << "interior: as lookup()";
    dir.erase(a);
    EXPECT_EQ(dir.lookup_argument(end).object, nullptr) << "freed";
    dir.erase(b);
  }
}

TEST(Directory, DoubleEraseAndUnknownIdsAreInvalidPointers) {
  Arena arena(1, GiB);
  Directory dir(arena, 4 * KiB);
  const ObjectId a = dir.insert(0, 100);
  dir.erase(a);
  try {
    dir.erase(a);
    FAIL() << "double erase did not throw";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("#" + std::to_string(a) + " was already freed"), std::string::npos)
        << e.what();
  }
  try {
    dir.erase(a + 1000);
    FAIL() << "erase of an unknown id did not throw";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("is not a shared object"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dir.erase(0), hdsm::InvalidPointer);
  EXPECT_EQ(dir.find(a), nullptr);
  EXPECT_EQ(dir.find(0), nullptr);
}

TEST(Directory, ObjectAtStartRejectsInteriorPointers) {
  Arena arena(1, GiB);
  Directory dir(arena, 4 * KiB);
  const ObjectId a = dir.insert(0, 3 * 4 * KiB);
  Object* o = dir.find(a);
  const std::byte* base = dir.user(*o);
  EXPECT_EQ(dir.object_at_start(base), o);
  EXPECT_EQ(dir.object_at_start(base + 1), nullptr);
  EXPECT_EQ(dir.object_at_start(base + 4 * KiB), nullptr);  // a block start is not the object start
  EXPECT_EQ(dir.object_at_start(base + 3 * 4 * KiB), nullptr);
  dir.erase(a);
  EXPECT_EQ(dir.object_at_start(base), nullptr);
}

TEST(Directory, SlotsAreReusedIdsAreNot) {
  Arena arena(1, GiB);
  Directory dir(arena, 4 * KiB);
  const ObjectId a = dir.insert(0, 100);
  Object* first = dir.find(a);
  dir.erase(a);
  const ObjectId b = dir.insert(0, 200);
  EXPECT_NE(a, b);
  EXPECT_GT(b, a);
  EXPECT_EQ(dir.find(b), first);  // the same slot, a new id
  EXPECT_EQ(dir.find(a), nullptr);
  EXPECT_EQ(first->id, b);
  EXPECT_EQ(first->bytes, 200u);
  EXPECT_THROW(dir.erase(a), hdsm::InvalidPointer);  // the stale id does not free the new object
  EXPECT_EQ(dir.find(b), first);
  // Many objects: more than one chunk of slots, then all recycled.
  std::vector<ObjectId> ids;
  for (int i = 0; i < 3000; ++i) ids.push_back(dir.insert(0, 4 * KiB));
  for (ObjectId id : ids) dir.erase(id);
  std::vector<ObjectId> again;
  for (int i = 0; i < 3000; ++i) again.push_back(dir.insert(0, 4 * KiB));
  EXPECT_GT(again.front(), ids.back());
  EXPECT_EQ(dir.size(), 3001u);
}

TEST(Directory, NoRoomIsATypedError) {
  Arena arena(2, 16 * MiB);
  Directory dir(arena, MiB);
  dir.insert(1, 10 * MiB);
  try {
    dir.insert(1, 8 * MiB);
    FAIL() << "an object larger than the free range was inserted";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_EQ(e.requested(), 8 * MiB);
    EXPECT_EQ(e.used(), 11 * MiB);  // and the block after it, where its end is
    EXPECT_EQ(e.capacity(), 16 * MiB);
    EXPECT_NE(std::string(e.what()).find("arena segment 1"), std::string::npos) << e.what();
    // The knob that raises it (before: HDSM_SIM_MEMORY, which does not).
    EXPECT_NE(std::string(e.what()).find("raise HDSM_ARENA_SEGMENT"), std::string::npos) << e.what();
    // Small objects fill a segment by their blocks, not their bytes: the message says so.
    EXPECT_NE(std::string(e.what()).find("1 live object in all"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("whole blocks of 1 MiB, HDSM_BLOCK_SIZE"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dir.insert(0, 17 * MiB), hdsm::OutOfDeviceMemory);
  EXPECT_THROW(dir.insert(0, ~std::size_t{0}), hdsm::OutOfDeviceMemory);
  // An object's end lies in its segment, so it is smaller than the segment: the other one is untouched.
  try {
    dir.insert(0, 16 * MiB);
    FAIL() << "an object as large as the segment was inserted";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_NE(std::string(e.what()).find("objects smaller than itself"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(dir.insert(0, 16 * MiB - 1));
  EXPECT_THROW(dir.insert(0, 0), hdsm::InvalidArgument);
  EXPECT_THROW(dir.insert(2, 100), hdsm::InvalidArgument);
  EXPECT_THROW(Directory(arena, 3 * 4 * KiB), hdsm::InvalidArgument);
  EXPECT_THROW(Directory(arena, 32 * MiB), hdsm::InvalidArgument);
  EXPECT_THROW(Directory(arena, hdsm::os::page_size() / 2), hdsm::InvalidArgument);
}

TEST(Directory, LookupsRunBesideInsertsAndErasesOfOtherObjects) {
  Arena arena(2, 256 * MiB);
  Directory dir(arena, 4 * KiB);
  std::vector<ObjectId> stable;
  std::vector<const std::byte*> bases;
  for (int i = 0; i < 64; ++i) {
    stable.push_back(dir.insert(i % 2, 4 * KiB * (1 + i % 5) + 17));
    bases.push_back(dir.user(*dir.find(stable.back())));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load(std::memory_order_relaxed)) {
        // Only the stable objects: looking up an object while it is erased breaks the directory's rule.
        // Their table entries sit between those the writer changes.
        const std::size_t i = rng() % stable.size();
        const std::size_t in = rng() % (4 * KiB * (1 + i % 5) + 17);
        const auto hit = dir.lookup(bases[i] + in);
        if (hit.object == nullptr || hit.object->id != stable[i] || hit.offset_in_object != in ||
            hit.block != in / (4 * KiB))
          ++errors;
      }
    });
  std::thread writer([&] {
    std::mt19937 rng(99);
    std::vector<ObjectId> churn;
    for (int round = 0; round < 20000; ++round) {
      if (churn.size() < 200 && rng() % 2 == 0) {
        churn.push_back(dir.insert(rng() % 2, 4 * KiB * (1 + rng() % 8)));
      } else if (!churn.empty()) {
        const std::size_t i = rng() % churn.size();
        dir.erase(churn[i]);
        churn[i] = churn.back();
        churn.pop_back();
      }
    }
    stop = true;
  });
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(errors.load(), 0);
  for (std::size_t i = 0; i < stable.size(); ++i) EXPECT_EQ(dir.object_at_start(bases[i])->id, stable[i]);
}

}  // namespace
