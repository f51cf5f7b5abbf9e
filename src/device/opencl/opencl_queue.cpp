// OpenCL queues: asynchronous copies, fills and kernel launches on an in-order command queue.
#include "device/checks.hpp"
#include "device/event_state.hpp"
#include "device/opencl/opencl.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <atomic>
#include <cstring>

namespace hdsm::opencl {
namespace {

/// One kernel argument as OpenCL takes it; a sub-buffer for a pointer inside a buffer.
struct ArgValue {
  Mem sub;  // owns the sub-buffer, if any
  cl_mem mem = nullptr;
};

/// Adds a finished command's device time to a counter of its device (`data`: the kernel or the
/// transfer time), which the runtime keeps until after its devices are gone.
void CL_CALLBACK on_command_done(cl_event event, cl_int status, void* data) {
  cl_ulong start = 0, end = 0;
  if (status == CL_COMPLETE &&
      clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr) ==
          CL_SUCCESS &&
      clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) == CL_SUCCESS &&
      end > start)
    static_cast<std::atomic<std::uint64_t>*>(data)->fetch_add(end - start, std::memory_order_relaxed);
  clReleaseEvent(event);
}

/// Counts the device time of the command `done` names into `counter` once it completes.
void time_command(cl_event done, std::atomic<std::uint64_t>& counter) {
  if (clSetEventCallback(done, CL_COMPLETE, on_command_done, &counter) != CL_SUCCESS)
    clReleaseEvent(done);  // the command runs; only its time goes uncounted
}

}  // namespace

OpenclQueue::OpenclQueue(OpenclDevice& device) : device_(device) {
  cl_int err = CL_SUCCESS;
  // Profiling gives each kernel's device time (DeviceStats::kernel_ns).
  queue_ = CommandQueue(clCreateCommandQueue(device.context(), device.id(), CL_QUEUE_PROFILING_ENABLE, &err));
  check(err, "clCreateCommandQueue", device.name());
}

OpenclQueue::~OpenclQueue() {
  if (queue_.get() != nullptr) clFinish(queue_.get());
}

void OpenclQueue::copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src,
                                 std::size_t bytes) {
  require_host(src, bytes, "copy_to_device", device_.name());
  const cl_mem d = device_.resolve(dst, dst_offset, bytes, "copy_to_device");
  if (bytes == 0) return;
  cl_event done = nullptr;
  check(clEnqueueWriteBuffer(queue_.get(), d, CL_FALSE, dst_offset, bytes, src, 0, nullptr, &done),
        "clEnqueueWriteBuffer", device_.name());
  time_command(done, device_.counters().transfer_ns);
  device_.counters().route(Route::h2d).add(bytes);
}

void OpenclQueue::copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) {
  require_host(dst, bytes, "copy_to_host", device_.name());
  const cl_mem s = device_.resolve(src, src_offset, bytes, "copy_to_host");
  if (bytes == 0) return;
  cl_event done = nullptr;
  check(clEnqueueReadBuffer(queue_.get(), s, CL_FALSE, src_offset, bytes, dst, 0, nullptr, &done),
        "clEnqueueReadBuffer", device_.name());
  time_command(done, device_.counters().transfer_ns);
  device_.counters().route(Route::d2h).add(bytes);
}

void OpenclQueue::copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src,
                                 std::size_t src_offset, std::size_t bytes) {
  const cl_mem d = device_.resolve(dst, dst_offset, bytes, "copy_on_device (destination)");
  const cl_mem s = device_.resolve(src, src_offset, bytes, "copy_on_device (source)");
  if (bytes == 0) return;
  check(clEnqueueCopyBuffer(queue_.get(), s, d, src_offset, dst_offset, bytes, 0, nullptr, nullptr),
        "clEnqueueCopyBuffer", device_.name());
  device_.counters().route(Route::d2d).add(bytes);
}

void OpenclQueue::copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device,
                                 DeviceBuffer src, std::size_t src_offset, std::size_t bytes) {
  auto* peer = dynamic_cast<OpenclDevice*>(&src_device);
  if (peer == nullptr || !device_.can_access_peer(*peer))
    throw Unsupported(
        fmt::format("copy_from_peer: {} cannot copy directly from {} (not in one OpenCL context); "
                    "stage the copy through host memory",
                    device_.name(), src_device.name()));
  const cl_mem d = device_.resolve(dst, dst_offset, bytes, "copy_from_peer (destination)");
  const cl_mem s = peer->resolve(src, src_offset, bytes, "copy_from_peer (source)");
  if (bytes == 0) return;
  check(clEnqueueCopyBuffer(queue_.get(), s, d, src_offset, dst_offset, bytes, 0, nullptr, nullptr),
        "clEnqueueCopyBuffer", fmt::format("{} from {}", device_.name(), peer->name()));
  device_.counters().route(Route::peer).add(bytes);
}

void OpenclQueue::fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) {
  const cl_mem d = device_.resolve(dst, offset, bytes, "fill");
  if (bytes == 0) return;
  check(clEnqueueFillBuffer(queue_.get(), d, &value, 1, offset, bytes, 0, nullptr, nullptr),
        "clEnqueueFillBuffer", device_.name());
}

void OpenclQueue::launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) {
  require_launch(kernel, launch, "on " + device_.name());
  if (kernel.opencl_source.empty())
    throw Unsupported(
        fmt::format("kernel '{}' has no body for backend opencl (it needs OpenCL C source)", kernel.name));
  const cl_program program = device_.program(kernel.name, kernel.opencl_source);
  cl_int err = CL_SUCCESS;
  // A kernel object per launch: clSetKernelArg is not safe on one object from several threads.
  ClKernel k(clCreateKernel(program, kernel.name.c_str(), &err));
  check(err, "clCreateKernel",
        fmt::format("kernel '{}' on {} (the __kernel function must have this name)", kernel.name,
                    device_.name()));
  cl_uint expected = 0;
  check(clGetKernelInfo(k.get(), CL_KERNEL_NUM_ARGS, sizeof expected, &expected, nullptr), "clGetKernelInfo",
        kernel.name);
  const std::size_t dynamic = launch.shared_bytes > 0 ? 1 : 0;  // a trailing __local argument
  if (expected != args.size() + dynamic)
    throw InvalidArgument(fmt::format(
        "kernel '{}' takes {} arguments in its OpenCL C source; the call passes {}{}", kernel.name, expected,
        args.size(), dynamic != 0 ? " plus the __local one of Launch::shared_bytes" : ""));
  std::vector<ArgValue> values(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    const std::string what = fmt::format("argument {} of kernel '{}' on {}", i, kernel.name, device_.name());
    if (!a.is_buffer()) {
      // A host pointer where the kernel takes a __global or __constant one: OpenCL would read its
      // bytes as a buffer handle (PoCL asserts; others crash). A null pointer is a null buffer.
      if (a.size() == sizeof(void*) && std::any_of(static_cast<const std::byte*>(a.data()),
                                                   static_cast<const std::byte*>(a.data()) + a.size(),
                                                   [](std::byte b) { return b != std::byte{0}; })) {
        cl_kernel_arg_address_qualifier where = CL_KERNEL_ARG_ADDRESS_PRIVATE;
        if (clGetKernelArgInfo(k.get(), static_cast<cl_uint>(i), CL_KERNEL_ARG_ADDRESS_QUALIFIER,
                               sizeof where, &where, nullptr) == CL_SUCCESS &&
            (where == CL_KERNEL_ARG_ADDRESS_GLOBAL || where == CL_KERNEL_ARG_ADDRESS_CONSTANT)) {
          void* p = nullptr;
          std::memcpy(&p, a.data(), sizeof p);
          throw InvalidArgument(
              fmt::format("{}: the kernel takes a {} pointer, and the call passes {}, which is in no "
                          "shared object or device buffer (an OpenCL kernel reaches device buffers only)",
                          what, where == CL_KERNEL_ARG_ADDRESS_GLOBAL ? "__global" : "__constant", p));
        }
      }
      check(clSetKernelArg(k.get(), static_cast<cl_uint>(i), a.size(), a.data()), "clSetKernelArg", what);
      continue;
    }
    cl_mem m = device_.resolve(a.buffer(), a.offset(), 0, what);
    if (a.offset() != 0) {
      if (a.offset() >= a.buffer().bytes)
        throw InvalidArgument(
            fmt::format("{}: a pointer to the end of a {}-byte buffer; OpenCL passes a pointer into a "
                        "buffer as a sub-buffer, and has none of 0 bytes (pass the buffer and a count)",
                        what, a.buffer().bytes));
      if (a.offset() % device_.base_align() != 0)
        throw InvalidArgument(
            fmt::format("{}: a pointer {} bytes into a buffer; OpenCL passes it as a "
                        "sub-buffer, whose offset must be a multiple of {} bytes "
                        "(CL_DEVICE_MEM_BASE_ADDR_ALIGN)",
                        what, a.offset(), device_.base_align()));
      const cl_buffer_region region{a.offset(), a.buffer().bytes - a.offset()};
      values[i].sub =
          Mem(clCreateSubBuffer(m, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err));
      check(err, "clCreateSubBuffer", what);
      m = values[i].sub.get();
    }
    values[i].mem = m;
    check(clSetKernelArg(k.get(), static_cast<cl_uint>(i), sizeof(cl_mem), &values[i].mem), "clSetKernelArg",
          what);
  }
  if (dynamic != 0)
    check(clSetKernelArg(k.get(), static_cast<cl_uint>(args.size()), launch.shared_bytes, nullptr),
          "clSetKernelArg", fmt::format("the __local argument of kernel '{}'", kernel.name));
  const std::size_t local[3] = {launch.block.x, launch.block.y, launch.block.z};
  const std::size_t global[3] = {std::size_t{launch.grid.x} * launch.block.x,
                                 std::size_t{launch.grid.y} * launch.block.y,
                                 std::size_t{launch.grid.z} * launch.block.z};
  cl_event done = nullptr;
  check(clEnqueueNDRangeKernel(queue_.get(), k.get(), 3, nullptr, global, local, 0, nullptr, &done),
        "clEnqueueNDRangeKernel", fmt::format("kernel '{}' on {}", kernel.name, device_.name()));
  device_.counters().kernel_launches.fetch_add(1, std::memory_order_relaxed);
  time_command(done, device_.counters().kernel_ns);
}

namespace {

void CL_CALLBACK on_marker(cl_event event, cl_int status, void* data) {
  auto* state = static_cast<std::shared_ptr<detail::EventState>*>(data);
  std::exception_ptr error;
  if (status < 0)
    error =
        std::make_exception_ptr(Error(Errc::system, fmt::format("OpenCL work before an event failed: {} ({})",
                                                                error_name(status), status)));
  (*state)->complete(error);
  delete state;
  clReleaseEvent(event);
}

}  // namespace

Event OpenclQueue::record() {
  cl_event marker = nullptr;
  check(clEnqueueMarkerWithWaitList(queue_.get(), 0, nullptr, &marker), "clEnqueueMarkerWithWaitList",
        device_.name());
  auto state = std::make_shared<detail::EventState>();
  auto* data = new std::shared_ptr<detail::EventState>(state);
  const cl_int err = clSetEventCallback(marker, CL_COMPLETE, on_marker, data);
  if (err != CL_SUCCESS) {
    delete data;
    clReleaseEvent(marker);
    check(err, "clSetEventCallback", device_.name());
  }
  clFlush(queue_.get());  // the callback needs the marker to run
  return Event(state);
}

void OpenclQueue::wait(const Event& event) {
  const auto& state = event.state();
  if (!state) return;
  cl_int err = CL_SUCCESS;
  cl_event gate = clCreateUserEvent(device_.context(), &err);
  check(err, "clCreateUserEvent", device_.name());
  const cl_int queued = clEnqueueBarrierWithWaitList(queue_.get(), 1, &gate, nullptr);
  // The gate opens when the event completes (at once if it has); a failed event fails the gate.
  state->then([gate](const std::exception_ptr& e) {
    clSetUserEventStatus(gate, e ? -1 : CL_COMPLETE);
    clReleaseEvent(gate);
  });
  check(queued, "clEnqueueBarrierWithWaitList", device_.name());
}

void OpenclQueue::synchronize() {
  cl_event marker = nullptr;
  check(clEnqueueMarkerWithWaitList(queue_.get(), 0, nullptr, &marker), "clEnqueueMarkerWithWaitList",
        device_.name());
  const cl_int waited = clWaitForEvents(1, &marker);
  cl_int status = CL_COMPLETE;
  clGetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  clReleaseEvent(marker);
  if (status < 0) check(status, "queued OpenCL work", device_.name());
  check(waited, "clWaitForEvents", device_.name());
}

}  // namespace hdsm::opencl
