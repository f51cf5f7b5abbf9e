// The workloads of the papers' experiments, written against the public API. Every Parboil-like app
// (seed 000, Table 2) has three versions that compute the same output from the same deterministic
// input:
//   adsm      - the program ported to hdsm as the seed ports Parboil: the CPU initialises inputs in
//               shared objects, kernels get the shared pointers (unannotated calls: the seed's
//               release/acquire-everything semantics), the CPU reads results from shared memory;
//   explicit  - the hand-written "CUDA" version: host buffers, device buffers, queue copies, and a
//               queue wait wherever the adsm version syncs with no CPU access after it (the
//               program's own waits, which the seed's ports keep);
//   reference - plain serial C++ on the CPU, no hdsm, the output the other two are checked against.
// The kernel bodies are shared by adsm and explicit, so the two differ only in how data moves.
#pragma once

#include <hdsm/device.hpp>
#include <hdsm/runtime.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::apps {

/// Problem size. test: milliseconds, for unit tests and sanitizers; quick: `hdsm bench --quick`
/// (tens of milliseconds per run); full: the bench (a few hundred milliseconds per run).
enum class Scale { test, quick, full };

/// The one of an app's three problem sizes that `scale` names.
template <class T>
constexpr T by_scale(Scale scale, const T& test, const T& quick, const T& full) {
  switch (scale) {
    case Scale::test:
      return test;
    case Scale::quick:
      return quick;
    case Scale::full:
      return full;
  }
  return full;
}

/// What the CPU reads back at the end of a run, as numbers.
struct Output {
  std::vector<double> values;
};

struct App {
  std::string_view name;     // "cp", as in Table 2
  std::string_view pattern;  // one line: what the CPU initialises, the calls, what it reads back
  Output (*run_adsm)(Runtime& runtime, int device, Scale scale);
  Output (*run_explicit)(Device& device, Scale scale);
  Output (*run_reference)(Scale scale);
  double tolerance;  // the largest relative difference from the reference that is still correct
};

/// cp, mri-q, mri-fhd, sad, tpacf, pns, rpes: the order of Table 2.
std::span<const App> parboil_apps();
/// The app with this name, or nullptr.
const App* find_app(std::string_view name);

/// Empty when every value of `got` is within `tolerance` (relative, with an absolute floor of
/// `tolerance` for values near zero) of `want` and the sizes match; otherwise a message naming the
/// first bad index and both values.
std::string compare(const Output& got, const Output& want, double tolerance);

}  // namespace hdsm::apps
