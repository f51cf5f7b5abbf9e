// The free functions of <hdsm/cluster.hpp>: each acts on the calling thread's node (the session's).
#include "cluster/node.hpp"

#include <hdsm/config.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <limits>

namespace hdsm::cluster {

Options Options::from_environment() { return from_config(Config::from_environment()); }

Options Options::from_config(const Config& config) {
  Options o;
  o.space_bytes = config.size("HDSM_CLUSTER_SPACE");
  o.page_size = config.size("HDSM_CLUSTER_PAGE_SIZE");
  o.threads = static_cast<unsigned>(config.integer("HDSM_CLUSTER_THREADS"));
  o.lazy_pages = static_cast<std::uint64_t>(config.integer("HDSM_CLUSTER_LAZY_PAGES"));
  o.distribution =
      config.get("HDSM_CLUSTER_DISTRIBUTION") == "weighted" ? Distribution::weighted : Distribution::equal;
  const std::string& races = config.get("HDSM_CLUSTER_CHECK_RACES");
#ifdef NDEBUG
  o.check_races = races == "1";
#else
  o.check_races = races != "0";
#endif
  o.timeout = std::chrono::milliseconds(config.integer("HDSM_CLUSTER_TIMEOUT"));
  o.private_pages = config.boolean("HDSM_CLUSTER_PRIVATE_PAGES");
  o.open_ahead = static_cast<unsigned>(config.integer("HDSM_CLUSTER_OPEN_AHEAD"));
  o.mappings = static_cast<std::size_t>(config.integer("HDSM_CLUSTER_MAPPINGS"));
  o.fiber_stack = config.size("HDSM_FIBER_STACK");
  o.wait = WaitPolicy::from_config(config);
  return o;
}

int rank() { return detail::current().rank(); }
int ranks() { return detail::current().ranks(); }

void* alloc_bytes(std::size_t bytes) { return detail::current().alloc(bytes); }
void free(void* p) { detail::current().free(p); }
bool is_global(const void* p) { return detail::current().contains(p); }

void memcpy(void* dst, const void* src, std::size_t bytes, Deliver deliver) {
  detail::current().copy(dst, src, bytes, deliver);
}

void sync() { detail::current().barrier(); }

void launch(const Kernel& kernel, const Launch& shape, const ArgPack& args) {
  detail::current().launch(kernel, shape, args, std::nullopt);
}

void detail::launch(const Kernel& kernel, const Launch& shape, const ArgPack& args, ArgKinds kinds) {
  detail::current().launch(kernel, shape, args, kinds);
}

void replicate(void* data, std::size_t bytes) { detail::current().replicate(data, bytes); }

Stats stats() { return detail::current().stats(); }
void reset_stats() { detail::current().reset_stats(); }

}  // namespace hdsm::cluster
