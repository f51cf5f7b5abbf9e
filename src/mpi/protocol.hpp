// The wire protocol of libhdsm_mpi (docs/user-guide.md, "MPI on shared objects"). A message whose
// send buffer is in a shared object and larger than the sender's HDSM_MPI_CHUNK goes out as
//   1. a header (this struct, sent as MPI_BYTE on the user's communicator and tag, so it is matched
//      exactly as the user's message would be), then
//   2. ceil(total / chunk) chunk messages of MPI_BYTE on the library's private duplicate of
//      MPI_COMM_WORLD, from the sender's world rank, tagged with the header's sequence number.
// Every other message is the user's bytes as one plain message. A receiver recognises a header by
// its exact size, its magic and a check word; every field is validated before anything is
// allocated or received from it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hdsm::mpi {

struct Header {
  static constexpr std::uint64_t kMagic = 0x68'64'73'6d'2d'6d'70'31;  // "hdsm-mp1"
  /// The largest chunk a receiver accepts: a sender's HDSM_MPI_CHUNK is at most 256 MiB.
  static constexpr std::uint64_t kMaxChunk = std::uint64_t{256} << 20;

  std::uint64_t magic = kMagic;
  std::uint64_t total = 0;     // bytes of the user's message
  std::uint64_t chunk = 0;     // bytes of every chunk but the last
  std::uint64_t sequence = 0;  // the chunks' tag on the private communicator
  std::uint64_t check = 0;     // checksum() of the fields above

  std::uint64_t checksum() const {
    return (magic ^ (total * 0x9e3779b97f4a7c15ULL) ^ (chunk * 0xc2b2ae3d27d4eb4fULL) ^
            (sequence * 0x165667b19e3779f9ULL)) +
           0x27d4eb2f165667c5ULL;
  }
  /// True when the fields describe a chunked message a receiver can take: the magic and check word
  /// match, the chunk is in (0, kMaxChunk] and smaller than the total, and the tag is within
  /// `tag_ub`.
  bool valid(int tag_ub) const {
    return magic == kMagic && check == checksum() && chunk > 0 && chunk <= kMaxChunk && total > chunk &&
           sequence <= static_cast<std::uint64_t>(tag_ub);
  }
  std::uint64_t chunks() const { return (total + chunk - 1) / chunk; }
  /// The bytes of chunk `i`: `chunk`, but the last one's rest.
  std::size_t length(std::uint64_t i) const {
    const std::uint64_t rest = total - i * chunk;
    return static_cast<std::size_t>(rest < chunk ? rest : chunk);
  }
};

static_assert(sizeof(Header) == 40, "the header's size is part of the protocol");

}  // namespace hdsm::mpi
