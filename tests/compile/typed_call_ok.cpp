// expect: compiles
// The calls the failing cases get wrong, written right: the check's control.
#include <hdsm/hdsm.hpp>

#include <cstdint>

void calls(hdsm::Runtime& rt, int* ints, const float* in, float* out, std::uint64_t n) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, const float*, float*, int*, std::uint64_t) {});
  rt.call(k, hdsm::cover(n), in, out, ints, n);
  rt.call(k, hdsm::cover(n), hdsm::in(out), hdsm::out(out), hdsm::inout(ints), 7);  // float* -> const float*
  rt.call(k, hdsm::cover(n), nullptr, out, ints, n);
  hdsm::Kernel untyped = k;  // the untyped form still takes anything
  rt.call(untyped, hdsm::cover(n), 1.5f, out, ints, n);
}
