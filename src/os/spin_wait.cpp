#include "os/spin_wait.hpp"

#include <limits>

namespace hdsm::os {

std::atomic<std::uint64_t> detail::spin_budget_ns{50'000};

void set_wait_policy(WaitPolicy policy, std::uint32_t spin_us) noexcept {
  std::uint64_t budget = 0;
  switch (policy) {
    case WaitPolicy::automatic:
      budget = std::uint64_t{spin_us} * 1000;
      break;
    case WaitPolicy::spin:
      budget = std::numeric_limits<std::uint64_t>::max();
      break;
    case WaitPolicy::block:
      budget = 0;
      break;
  }
  detail::spin_budget_ns.store(budget, std::memory_order_relaxed);
}

}  // namespace hdsm::os
