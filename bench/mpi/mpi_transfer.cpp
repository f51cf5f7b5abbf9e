// Seed 003 Fig. 12: MPI transfers of device-resident data between two ranks, run with
// `mpirun -np 2 hdsm_mpi_transfer [--quick]` (or `hdsm bench mpi`, which launches it). Rank 0 sends,
// rank 1 receives; for each experiment (device -> device, device -> host, host -> device) and size:
//   user buffer  the device copy goes through a pageable host buffer of the whole message
//   pinned       the same through one pinned buffer of the whole message
//   hdsm         MPI_Send/MPI_Recv straight on shared objects (libhdsm_mpi, double-buffered chunks)
// Every version's received bytes are checked before its time counts. Rank 0 prints CSV lines
// "csv,experiment,version,bytes,seconds,GBps" on stdout, and progress on stderr.
#include <hdsm/hdsm.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed with MPI error " + std::to_string(rc));
}

const hdsm::Kernel& fill_kernel() {
  // The same body in OpenCL C, and in CUDA (mpi_transfer_kernels.cu): the suite measures the device
  // `hdsm bench --device` names.
  static const hdsm::Kernel k = hdsm::with_opencl(
      "__kernel void mpi_bench_fill(__global uchar* p, ulong n) {\n"
      "  const ulong i = get_global_id(0);\n"
      "  if (i < n) p[i] = (uchar)(i * 7 + (i >> 20));\n"
      "}\n",
      hdsm::per_thread("mpi_bench_fill", [](const hdsm::Thread& t, unsigned char* p, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) p[i] = static_cast<unsigned char>(i * 7 + (i >> 20));
      }));
  return k;
}
unsigned char expected(std::size_t i) { return static_cast<unsigned char>(i * 7 + (i >> 20)); }

/// Pinned host memory of a device, freed at the end.
struct Pinned {
  Pinned(hdsm::Device& d, std::size_t n) : device(d), p(static_cast<unsigned char*>(d.alloc_pinned(n))) {}
  ~Pinned() { device.free_pinned(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  hdsm::Device& device;
  unsigned char* p;
};

/// Seconds per repetition of `once` on both ranks (the slower rank's, the median of `reps`).
double timed(int reps, const std::function<void()>& once) {
  std::vector<double> runs;
  once();  // warm-up: staging pools, connections
  for (int r = 0; r < reps; ++r) {
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const auto begin = std::chrono::steady_clock::now();
    once();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), worst = 0;
    check(MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    runs.push_back(worst);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

struct Bench {
  hdsm::Runtime& rt;
  hdsm::Device& device;
  std::unique_ptr<hdsm::Queue> queue;
  int reps;

  void row(const std::string& experiment, const std::string& version, std::size_t bytes, double seconds) {
    if (rank() != 0) return;
    std::printf("csv,%s,%s,%zu,%.9g,%.6g\n", experiment.c_str(), version.c_str(), bytes, seconds,
                static_cast<double>(bytes) / seconds / 1e9);
    std::fflush(stdout);
    std::fprintf(stderr, "[mpi] %-16s %-12s %5zu MiB  %.3f GB/s\n", experiment.c_str(), version.c_str(),
                 bytes / MiB, static_cast<double>(bytes) / seconds / 1e9);
  }

  /// Throws unless the n bytes at host `p` hold the pattern.
  static void expect(const unsigned char* p, std::size_t n, const std::string& who) {
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] != expected(i))
        throw std::logic_error(who + " received wrong data at byte " + std::to_string(i));
  }

  void run(std::size_t n) {
    const bool sender = rank() == 0;
    std::vector<unsigned char> pattern(n), user(n);
    for (std::size_t i = 0; i < n; ++i) pattern[i] = expected(i);
    Pinned pinned(device, n);
    hdsm::DeviceBuffer dev = device.alloc(n);
    queue->copy_to_device(dev, 0, pattern.data(), n);  // the sender's device data
    queue->synchronize();
    auto* shared = static_cast<unsigned char*>(rt.alloc(n));
    rt.call(fill_kernel(), hdsm::cover(n), hdsm::out(shared), std::uint64_t{n});
    rt.sync();  // host copy invalid: the data is on the device only
    std::vector<unsigned char> back(n);
    const int peer = 1 - rank();
    const int count = static_cast<int>(n);

    for (const std::string experiment : {"device -> device", "device -> host", "host -> device"}) {
      const bool from_device = experiment != "host -> device", to_device = experiment != "device -> host";
      // The two staged versions: a host buffer of the whole message on each side.
      for (const std::string version : {"user buffer", "pinned"}) {
        unsigned char* host = version == "pinned" ? pinned.p : user.data();
        const double s = timed(reps, [&] {
          if (sender) {
            // A host sender's data is already in a host buffer: it sends that, as hdsm's does (a
            // copy into `host` first would charge the staged versions a memcpy hdsm does not make).
            if (from_device) {
              queue->copy_to_host(host, dev, 0, n);
              queue->synchronize();
            }
            check(MPI_Send(from_device ? host : pattern.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD),
                  "MPI_Send");
          } else {
            check(MPI_Recv(host, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
            if (to_device) {
              queue->copy_to_device(dev, 0, host, n);
              queue->synchronize();
            }
          }
        });
        if (!sender) {
          if (to_device) {
            queue->copy_to_host(back.data(), dev, 0, n);
            queue->synchronize();
            expect(back.data(), n, version);
          } else {
            expect(host, n, version);
          }
        }
        row(experiment, version, n, s);
      }
      // hdsm: MPI on the shared object itself (or on the plain host buffer at a host end).
      const double s = timed(reps, [&] {
        if (sender) {
          check(MPI_Send(from_device ? shared : pattern.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD),
                "MPI_Send");
        } else {
          check(MPI_Recv(to_device ? shared : user.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE),
                "MPI_Recv");
        }
      });
      if (!sender) {
        if (to_device) {
          rt.memcpy(back.data(), shared, n);
          expect(back.data(), n, "hdsm");
          rt.call(fill_kernel(), hdsm::cover(n), hdsm::out(shared),
                  std::uint64_t{n});  // device-resident again
          rt.sync();
        } else {
          expect(user.data(), n, "hdsm");
        }
      }
      row(experiment, "hdsm", n, s);
    }
    rt.free(shared);
    device.free(dev);
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  try {
    if (size != 2) throw std::runtime_error("run with exactly 2 ranks (mpirun -np 2)");
    bool quick = false;
    for (int i = 1; i < argc; ++i) quick |= std::strcmp(argv[i], "--quick") == 0;
    hdsm::Runtime& rt = hdsm::Runtime::instance();
    hdsm::Device& device = rt.default_device();
    if (rank() == 0) {  // the suite checks that the ranks measure the device it names
      std::printf("device,%s\n", device.name().c_str());
      std::fflush(stdout);
    }
    Bench bench{rt, device, device.create_queue(), quick ? 3 : 7};
    const std::vector<std::size_t> sizes =
        quick ? std::vector<std::size_t>{8 * MiB, 32 * MiB}
              : std::vector<std::size_t>{1 * MiB, 8 * MiB, 32 * MiB, 128 * MiB};
    for (std::size_t n : sizes) bench.run(n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hdsm_mpi_transfer (rank %d): %s\n", rank(), e.what());
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
