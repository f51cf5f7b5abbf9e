// expect: compiles without warnings
// The public headers and the templates a program instantiates most draw no warning from a program
// built with -Wall -Wextra -Wpedantic -Werror (hdsm's own build turns -Wmissing-field-initializers
// off, which hid ContainerOptions{&rt} inside the skeletons).
#include <hdsm/cluster.hpp>
#include <hdsm/crc.hpp>
#include <hdsm/hdsm.hpp>
#include <hdsm/matrix.hpp>
#include <hdsm/skeletons.hpp>

#include <cstdint>

HDSM_USER_FUNCTION(add_f, float, (float a, float b), { return a + b; })
HDSM_USER_FUNCTION(twice, float, (float a), { return 2 * a; })

int main() {
  hdsm::Runtime rt;
  hdsm::Vector<float> v(100, hdsm::ContainerOptions{&rt});
  hdsm::Vector<float> out(100, hdsm::ContainerOptions{&rt, true});
  hdsm::Matrix<float> m(4, 4, hdsm::ContainerOptions{&rt});
  float s = hdsm::Reduce<add_f>{}(v);
  s += hdsm::MapReduce<twice, add_f>{}(v);
  hdsm::Scan<add_f>{}(out, v);
  hdsm::Map<twice>{}(out, v);
  hdsm::Map<twice>{}(out.range(0, 4), m.row(1));
  hdsm::Vector<float> copy(v);
  const auto scale = hdsm::per_thread("scale", [](const hdsm::Thread& t, float* p, std::uint64_t n, float a) {
    if (t.global_x() < n) p[t.global_x()] *= a;
  });
  float* a = rt.alloc<float>(16);
  rt.call(scale, hdsm::cover(16), a, std::uint64_t{16}, 2.0f);
  rt.sync();
  rt.free(a);
  hdsm::crc::Options o;
  hdsm::cluster::Options co;
  (void)o;
  (void)co;
  return s > 0 ? 0 : 1;
}
