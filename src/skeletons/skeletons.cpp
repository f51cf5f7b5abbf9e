// What the skeleton templates share: the host backend's parallel loop on the runtime's executor and
// the choice of devices.
#include <hdsm/error.hpp>
#include <hdsm/skeletons.hpp>

#include "exec/executor.hpp"
#include "runtime/runtime_impl.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hdsm::detail {

std::size_t host_chunks(Runtime& runtime, std::size_t n,
                        FunctionRef<void(std::size_t, std::size_t, std::size_t)> body) {
  exec::Executor& executor = impl_of(runtime).executor;
  const std::size_t chunks = host_chunk_count(runtime, n);
  const std::size_t chunk = (n + chunks - 1) / chunks;
  const Launch launch{Dim3{static_cast<std::uint32_t>(chunks)}, Dim3{1}};
  executor.for_each_block(launch, [&](const BlockRun& run) {
    const std::size_t first = std::size_t{run.block.x} * chunk;
    if (first < n) body(run.block.x, first, std::min(n, first + chunk));
  });
  return chunks;
}

void host_for(Runtime& runtime, std::size_t n, FunctionRef<void(std::size_t, std::size_t)> body) {
  host_chunks(runtime, n, [&](std::size_t, std::size_t first, std::size_t last) { body(first, last); });
}

std::size_t host_chunk_count(Runtime& runtime, std::size_t n) {
  // A few chunks per worker balance uneven chunks; at least 4096 elements each keep the overhead low.
  constexpr std::size_t kMinChunk = 4096;
  return std::clamp<std::size_t>(n / kMinChunk, 1, std::size_t{impl_of(runtime).executor.workers()} * 4);
}

std::vector<unsigned> skeleton_devices(Runtime& runtime, const std::vector<unsigned>& chosen) {
  const std::size_t count = runtime.devices().size();
  if (chosen.empty()) return {static_cast<unsigned>(runtime.default_device().properties().index)};
  for (unsigned d : chosen)
    if (d >= count)
      throw InvalidArgument(fmt::format("skeleton: device {} does not exist ({} devices)", d, count));
  return chosen;
}

}  // namespace hdsm::detail
