// A program built against the installed hdsm: a kernel on the default device, checked.
#include <hdsm/hdsm.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  hdsm::Runtime rt;
  auto& dev = rt.default_device();
  auto queue = dev.create_queue();
  const int n = 1000;
  std::vector<int> host(n, 20);
  auto buf = dev.alloc(n * sizeof(int));
  auto twice = hdsm::per_thread("twice", [](const hdsm::Thread& t, int* x, int count) {
    if (t.global_x() < static_cast<unsigned>(count)) x[t.global_x()] *= 2;
  });
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(buf), hdsm::KernelArg::value(n)};
  queue->copy_to_device(buf, 0, host.data(), n * sizeof(int));
  queue->launch(twice, hdsm::cover(n), args);
  queue->copy_to_host(host.data(), buf, 0, n * sizeof(int));
  queue->synchronize();
  dev.free(buf);
  for (int v : host)
    if (v != 40) return std::printf("wrong result %d\n", v), 1;
  if (std::string(hdsm::version()) != HDSM_VERSION_STRING)
    return std::printf("the library is %s, its headers %s\n", hdsm::version(), HDSM_VERSION_STRING), 1;
  std::printf("consumer_cpp: hdsm %s on %s ok\n", hdsm::version(), dev.name().c_str());
  return 0;
}
