// Skeletons over smart containers: user functions defined once for the host, OpenCL and CUDA, and
// skeleton objects called on containers or ranges of them (v.range(first, n), matrix rows), on the host's
// worker threads or on one or several devices. This part provides the user functions and user types, Map
// (elementwise, 1 to N inputs), MapIndex, MapArray and MapArrayIndex, MapOverlap (1D, and row- and
// column-wise on matrices), MapOverlap2D, Reduce (also row- and column-wise), MapReduce, Scan and Farm; see
// docs/skeletons.md.
//
//   HDSM_USER_FUNCTION(saxpy, float, (float x, float y, float a), { return a * x + y; })
//   hdsm::Map<saxpy> map;
//   map.devices({0, 1})(out, x, y, 2.0f);  // out[i] = saxpy(x[i], y[i], 2.0f), half on each device
#pragma once

#include <hdsm/export.h>
#include <hdsm/container.hpp>
#include <hdsm/error.hpp>
#include <hdsm/matrix.hpp>
#include <hdsm/vector.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#include <hdsm/cuda.hpp>
#define HDSM_HOST_DEVICE __host__ __device__
#define HDSM_DETAIL_NOINLINE __noinline__
#else
#define HDSM_HOST_DEVICE
#define HDSM_DETAIL_NOINLINE [[gnu::noinline]]
#endif

/// Defines user function NAME once: a C++ function (host, and device under nvcc) and its OpenCL C
/// text. The body is plain C that both languages accept: scalar types (float, double, int, unsigned
/// int, long, unsigned long), arithmetic, conditionals, loops and the math functions both know. In
/// the C++ body the math functions are OpenCL's overloads: sqrt, exp, log, sin, cos, tan, fabs,
/// floor, ceil (one argument), pow, fmin, fmax, fmod, atan2 (two) take and return float for float
/// arguments, as in OpenCL C, not double as C's would.
///   HDSM_USER_FUNCTION(add, float, (float a, float b), { return a + b; })
#define HDSM_USER_FUNCTION(NAME, RETURN, PARAMS, ...)                                    \
  struct NAME : ::hdsm::detail::UserMath {                                               \
    static constexpr const char* name = #NAME;                                           \
    static constexpr const char* opencl_source = #RETURN " " #NAME #PARAMS #__VA_ARGS__; \
    HDSM_HOST_DEVICE static RETURN call PARAMS __VA_ARGS__                               \
  };

/// Defines struct NAME with the given members once for the host, CUDA and the OpenCL C programs the
/// skeletons generate, so that containers of NAME work with every skeleton, on every backend. Members
/// are scalars (as user functions' parameters), declared one per statement:
///   HDSM_USER_TYPE(Particle, float x; float y; float z; float mass;)
/// Scalar members are laid out alike by C++ and OpenCL C (each aligned to its size).
#define HDSM_USER_TYPE(NAME, ...)                                                                           \
  struct NAME {                                                                                             \
    __VA_ARGS__                                                                                             \
    static constexpr const char* hdsm_type_name = #NAME;                                                    \
    static constexpr const char* hdsm_opencl_definition = "typedef struct {" #__VA_ARGS__ "} " #NAME ";\n"; \
  };

/// Marks a pointer parameter of a user function (MapArray's array) as device memory for OpenCL C,
/// where it reads `__global`; it is empty in C++.
#define HDSM_GLOBAL

HDSM_VISIBLE_BEGIN
namespace hdsm {

namespace detail {

/// n / d rounded up, with no overflow whatever d (chunks(SIZE_MAX) wrapped n + d - 1 to a zero chunk).
constexpr std::size_t ceil_div(std::size_t n, std::size_t d) { return n / d + (n % d != 0 ? 1 : 0); }

#define HDSM_DETAIL_MATH1(F)                                                  \
  HDSM_HOST_DEVICE static float F(float x) { return ::F##f(x); } /* NOLINT */ \
  HDSM_HOST_DEVICE static double F(double x) { return ::F(x); }
#define HDSM_DETAIL_MATH2(F)                                                              \
  HDSM_HOST_DEVICE static float F(float x, float y) { return ::F##f(x, y); } /* NOLINT */ \
  HDSM_HOST_DEVICE static double F(double x, double y) { return ::F(x, y); }

/// The base of every user function: the math functions its body names are found here first, with
/// OpenCL C's overloads (float in, float out), so the host computes what the devices do.
struct UserMath {
  HDSM_DETAIL_MATH1(sqrt)
  HDSM_DETAIL_MATH1(exp)
  HDSM_DETAIL_MATH1(log)
  HDSM_DETAIL_MATH1(sin)
  HDSM_DETAIL_MATH1(cos)
  HDSM_DETAIL_MATH1(tan)
  HDSM_DETAIL_MATH1(fabs)
  HDSM_DETAIL_MATH1(floor)
  HDSM_DETAIL_MATH1(ceil)
  HDSM_DETAIL_MATH2(pow)
  HDSM_DETAIL_MATH2(fmin)
  HDSM_DETAIL_MATH2(fmax)
  HDSM_DETAIL_MATH2(fmod)
  HDSM_DETAIL_MATH2(atan2)
  // abs of integers keeps their width, as OpenCL C's does (C's ::abs takes an int: a long's high bits
  // were lost on the host and the sim), and their sign, as C++'s and CUDA's (OpenCL C's is unsigned:
  // the same value but for the most negative). abs of a float is an error here, as in OpenCL C.
  HDSM_HOST_DEVICE static int abs(int x) { return x < 0 ? -x : x; }
  HDSM_HOST_DEVICE static long abs(long x) { return x < 0 ? -x : x; }            // NOLINT(google-runtime-int)
  HDSM_HOST_DEVICE static long long abs(long long x) { return x < 0 ? -x : x; }  // NOLINT(google-runtime-int)
  HDSM_HOST_DEVICE static unsigned abs(unsigned x) { return x; }
  HDSM_HOST_DEVICE static unsigned long abs(unsigned long x) { return x; }  // NOLINT(google-runtime-int)
  HDSM_HOST_DEVICE static unsigned long long abs(unsigned long long x) {
    return x;
  }  // NOLINT(google-runtime-int)
};

#undef HDSM_DETAIL_MATH1
#undef HDSM_DETAIL_MATH2

}  // namespace detail

/// Where a skeleton runs: the host's worker threads, or devices of the runtime.
enum class SkeletonBackend : std::uint8_t { host, devices };

/// How a call on several devices splits its elements: equal parts, or parts in proportion to the
/// devices' speeds, measured once per runtime and device.
enum class Split : std::uint8_t { equal, measured };

/// The scalar result of an asynchronous reduction (Reduce::async, MapReduce::async): the call
/// enqueued its kernels and returned; get() waits for them, combines their partial results and keeps
/// the value (later calls return it). A failure of the call's work is thrown by get().
template <class T>
class Future {
 public:
  /// A result known at once (the host backend, an empty input with a start value).
  explicit Future(T value) : value_(std::move(value)) {}
  /// A result that `finish` computes when it is first asked for.
  explicit Future(std::function<T()> finish) : finish_(std::move(finish)) {}

  /// The value; a failure of the call is thrown by this get() and by every later one.
  T get() {
    if (!value_) {
      if (error_) std::rethrow_exception(error_);
      try {
        value_ = finish_();
      } catch (...) {
        // Once more would combine partial results the failed call left: a wrong value, no error.
        error_ = std::current_exception();
        finish_ = nullptr;
        throw;
      }
      finish_ = nullptr;
    }
    return *value_;
  }
  /// Whether get() has the value without computing it.
  bool ready() const { return value_.has_value(); }

 private:
  std::optional<T> value_;
  std::function<T()> finish_;
  std::exception_ptr error_;
};

namespace detail {

/// The OpenCL C name of a scalar element type.
template <class T>
constexpr const char* opencl_type() {
  if constexpr (requires { T::hdsm_type_name; })
    return T::hdsm_type_name;
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
    return std::is_signed_v<T> ? "int" : "uint";
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
    return std::is_signed_v<T> ? "long" : "ulong";
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 2)
    return std::is_signed_v<T> ? "short" : "ushort";
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
    return std::is_signed_v<T> ? "char" : "uchar";
  else
    static_assert(sizeof(T) == 0, "skeletons take containers of scalars or of HDSM_USER_TYPE structs");
}

/// Runs body(first, last) over [0, n) in chunks on the runtime's host worker threads.
void host_for(Runtime& runtime, std::size_t n, FunctionRef<void(std::size_t, std::size_t)> body);
/// The same with each chunk's index; returns the number of chunks (host_chunk_count(runtime, n)).
std::size_t host_chunks(Runtime& runtime, std::size_t n,
                        FunctionRef<void(std::size_t, std::size_t, std::size_t)> body);
std::size_t host_chunk_count(Runtime& runtime, std::size_t n);

/// A call's split: its own weights (one per device), else its own Split, else HDSM_SKELETON_SPLIT.
struct SplitChoice {
  std::optional<Split> split;
  std::vector<double> weights;
};

/// The parts of a call's n elements: part p, on devices[p], is [bounds[p], bounds[p + 1]).
struct Parts {
  std::vector<unsigned> devices;
  std::vector<std::size_t> bounds;
  std::size_t size() const { return devices.size(); }
  std::size_t first(std::size_t p) const { return bounds[p]; }
  std::size_t last(std::size_t p) const { return bounds[p + 1]; }
};

/// A skeleton call's launches, each of them run twice by held_launches: first every launch's operands
/// are held on its device (DeviceHolds), then the launches run on them. One that does not fit fails
/// the call before any kernel wrote an output, so every container keeps its contents, as after one
/// launch that does not fit; a part's second kernel finds its operands where the first left them.
class HeldLaunches {
 public:
  template <class K, class... A>
  void operator()(unsigned device, const K& kernel, const Launch& grid, const A&... args) {
    if (launching_)
      launch(device, kernel, grid, args...);
    else
      holds_.add(device, args...);
  }

 private:
  template <class Body>
  friend void held_launches(Body&& body);
  DeviceHolds holds_;
  bool launching_ = false;
};
template <class Body>
void held_launches(Body&& body) {
  HeldLaunches run;
  body(run);
  run.launching_ = true;
  body(run);
}

/// [0, n) over `devices` as `split` says (equal: n / parts each, the last taking the rest).
Parts skeleton_parts(Runtime& runtime, std::vector<unsigned> devices, const SplitChoice& split,
                     std::size_t n);
/// The measured speed of each device (bytes per second of a copy within its memory), measured on
/// first use and kept by the runtime; empty when a device's free memory holds not even two 64 KiB
/// buffers to measure with (the split is then equal, and the device measured at a later call).
std::vector<double> device_speeds(Runtime& runtime, const std::vector<unsigned>& devices);

/// The devices a skeleton call runs on: its own choice (checked), else HDSM_SKELETON_DEVICES (the
/// runtime's default device by default).
std::vector<unsigned> skeleton_devices(Runtime& runtime, const std::vector<unsigned>& chosen);
/// Where a skeleton call runs: its own choice, else HDSM_SKELETON_BACKEND (devices by default).
SkeletonBackend skeleton_backend(Runtime& runtime, std::optional<SkeletonBackend> chosen);

/// What every generated OpenCL program starts with: HDSM_GLOBAL for user functions' pointer
/// parameters, and floating-point contraction off, as the host bodies are compiled (no FMA), so float
/// expressions round alike on both.
inline constexpr const char* kOpenclPrelude =
    "#pragma OPENCL FP_CONTRACT OFF\n#define HDSM_GLOBAL __global\n";

/// Appends name0, name1, ... (`count` names, each followed by `suffix`) to the argument list `list`,
/// comma-separated.
inline void append_names(std::string& list, std::string_view name, std::size_t count,
                         std::string_view suffix = {}) {
  for (std::size_t j = 0; j < count; ++j) {
    if (!list.empty()) list += ", ";
    list += name;
    list += std::to_string(j);
    list += suffix;
  }
}

/// An OpenCL skeleton kernel's uniform parameters, ", T0 u0, T1 u1", and the arguments that hand them
/// on to a user function, ", u0, u1" (both empty without uniforms).
struct OpenclUniforms {
  std::string params, args;
};
template <class... U>
OpenclUniforms opencl_uniforms() {
  OpenclUniforms out;
  std::size_t k = 0;
  ((out.params += std::string(", ") + opencl_type<U>() + " u" + std::to_string(k++)), ...);
  append_names(out.args, "u", sizeof...(U));
  if (!out.args.empty()) out.args = ", " + out.args;
  return out;
}

/// The prelude, then the OpenCL C definition of each HDSM_USER_TYPE among Ts, once.
template <class... Ts>
std::string opencl_prelude() {
  std::string s = kOpenclPrelude;
  std::vector<const char*> defined;
  const auto define = [&](const char* definition) {
    if (std::find(defined.begin(), defined.end(), definition) != defined.end()) return;
    defined.push_back(definition);
    s += definition;
  };
  (
      [&] {
        if constexpr (requires { Ts::hdsm_opencl_definition; }) define(Ts::hdsm_opencl_definition);
      }(),
      ...);
  return s;
}

template <class>
struct function_traits;
template <class Ret, class... P>
struct function_traits<Ret (*)(P...)> {
  using result = Ret;
  using parameters = std::tuple<std::remove_cvref_t<P>...>;
};
template <class F>
using user_parameters = typename function_traits<decltype(&F::call)>::parameters;

/// Whether user function F returns void (it then writes its outputs through pointers).
template <class F>
inline constexpr bool returns_void = std::is_void_v<typename function_traits<decltype(&F::call)>::result>;

/// How many containers a Map's user function writes: 1 when it returns its element; when it returns
/// void, the number of its leading parameters that are pointers to non-const (the outputs, written
/// through them).
template <class F>
constexpr std::size_t output_count() {
  using Params = user_parameters<F>;
  if constexpr (!returns_void<F>) {
    return 1;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      std::size_t n = 0;
      bool more = true;
      ((more = more && std::is_pointer_v<std::tuple_element_t<I, Params>> &&
               !std::is_const_v<std::remove_pointer_t<std::tuple_element_t<I, Params>>>,
        n += more ? 1 : 0),
       ...);
      return n;
    }
    (std::make_index_sequence<std::tuple_size_v<Params>>{});
  }
}

#if defined(__CUDACC__)
/// The CUDA body of a skeleton kernel: every thread runs Body::element with its global index.
template <class Body, class... A>
__global__ void cuda_skeleton_kernel(A... a) {
  Body::element(std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x, a...);
}
/// The CUDA body of a skeleton kernel over rows (skeleton_kernel_rows).
template <class Body, class... A>
__global__ void cuda_skeleton_kernel_rows(A... a) {
  Body::element(std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x,
                (std::uint64_t{blockIdx.z} * gridDim.y + blockIdx.y) * blockDim.y + threadIdx.y, a...);
}
#endif

/// A kernel named `name` whose every thread runs Body::element(its global index, a...): on the host
/// and sim devices, and on CUDA devices where nvcc compiles the skeleton's call (a __global__
/// template instantiated for Body; compiled by another compiler, a launch on CUDA fails naming the
/// kernel). The OpenCL body is the caller's to give.
template <class Body, class... A>
Kernel skeleton_kernel(std::string name) {
  Kernel kernel =
      per_thread(std::move(name), [](const Thread& t, A... a) { Body::element(t.global_x(), a...); });
#if defined(__CUDACC__)
  kernel.cuda_lookup = &cuda_lookup<&cuda_skeleton_kernel<Body, A...>>;
#endif
  return kernel;
}

/// A skeleton kernel over the elements of rows, launched by rows_launch: every thread runs
/// Body::element(x, y, a...), x its column and y its row (the grid's y, then its z, which keeps each
/// within CUDA's 65535). Consecutive threads take consecutive columns, as OpenCL's vectorizers want:
/// an index split by a division hid that, and so did a loop over rows.
template <class Body, class... A>
Kernel skeleton_kernel_rows(std::string name) {
  Kernel kernel = per_thread(std::move(name), [](const Thread& t, A... a) {
    Body::element(t.global_x(), t.global_z() * t.grid_dim.y * t.block_dim.y + t.global_y(), a...);
  });
#if defined(__CUDACC__)
  kernel.cuda_lookup = &cuda_lookup<&cuda_skeleton_kernel_rows<Body, A...>>;
#endif
  return kernel;
}

/// The launch of a skeleton_kernel_rows kernel over `rows` rows of `cols` elements: blocks of 64
/// threads, as wide as the rows (up to 64) and as tall as that leaves, so that narrow matrices do not
/// launch idle threads; the blocks' rows split evenly between the grid's y and z.
inline Launch rows_launch(std::uint64_t rows, std::uint64_t cols) {
  constexpr std::uint32_t kThreads = 64;
  std::uint32_t width = 1;
  while (width < kThreads && width < cols) width *= 2;
  const std::uint32_t height = kThreads / width;
  const Launch columns = cover(cols, width);
  const std::uint64_t row_blocks = ceil_div(std::max<std::uint64_t>(rows, 1), height);
  const std::uint64_t slabs = ceil_div(row_blocks, kMaxGridYZ);
  if (slabs > kMaxGridYZ)
    throw InvalidArgument("a skeleton over " + std::to_string(rows) + " rows: more than " +
                          std::to_string(kMaxGridYZ * kMaxGridYZ * height) + " rows in one part");
  return Launch{Dim3{columns.grid.x, static_cast<std::uint32_t>(ceil_div(row_blocks, slabs)),
                     static_cast<std::uint32_t>(slabs)},
                Dim3{width, height}, 0};
}

template <class F, bool Indexed, class Outs, class... Ins>
struct MapKernel;

// The kernel computes, for i < n on one part, out[i] = F(in[i]..., uniforms...) (one output), or
// F(&r0, &r1, ..., in[i]..., uniforms...) then out0[i] = r0, out1[i] = r1, ... (several); Indexed, the
// index base + i (base the part's first element) comes before the inputs.
template <class F, bool Indexed, class... R, class... Ins>
struct MapKernel<F, Indexed, std::tuple<R...>, Ins...> {
  static constexpr bool kSingle = !returns_void<F>;

  template <class... U>
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t i, R*... out, const Ins*... in, std::uint64_t n,
                                         std::uint64_t base, U... u) {
      if (i >= n) return;
      if constexpr (kSingle) {
        if constexpr (Indexed)
          ((out[i] = F::call(base + i, in[i]..., u...)), ...);
        else
          ((out[i] = F::call(in[i]..., u...)), ...);
      } else if constexpr (Indexed) {
        F::call(&out[i]..., base + i, in[i]..., u...);
      } else {
        F::call(&out[i]..., in[i]..., u...);
      }
    }
  };

  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel = skeleton_kernel<Body<U...>, R*..., const Ins*..., std::uint64_t, std::uint64_t, U...>(
          std::string(Indexed ? "hdsm_mapindex_" : "hdsm_map_") + F::name);
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  template <class... U>
  static std::string opencl() {
    std::string s = opencl_prelude<R..., Ins..., U...>() + F::opencl_source + "\n__kernel void " +
                    (Indexed ? "hdsm_mapindex_" : "hdsm_map_") + F::name + "(";
    const std::vector<std::string> outs{opencl_type<R>()...};
    for (std::size_t j = 0; j < outs.size(); ++j)
      s += (j == 0 ? "__global " : ", __global ") + outs[j] + "* out" + std::to_string(j);
    int k = 0;
    ((s += std::string(", __global const ") + opencl_type<Ins>() + "* in" + std::to_string(k++)), ...);
    s += ", ulong n, ulong base" + opencl_uniforms<U...>().params;
    s += ") {\n  const ulong i = get_global_id(0);\n  if (i >= n) return;\n";
    std::string args = Indexed ? "base + i" : "";
    append_names(args, "in", sizeof...(Ins), "[i]");
    append_names(args, "u", sizeof...(U));
    if constexpr (kSingle) return s + "  out0[i] = " + F::name + "(" + args + ");\n}\n";
    // Several outputs: F writes private results through its pointers (OpenCL C 1.2 has no pointer
    // that may point to global and private memory alike), which are then stored.
    std::string results, stores;
    for (std::size_t j = 0; j < outs.size(); ++j) {
      const std::string r = "r" + std::to_string(j);
      s += "  " + outs[j] + " " + r + ";\n";
      results += (j == 0 ? "&" : ", &") + r;
      stores += "  out" + std::to_string(j) + "[i] = " + r + ";\n";
    }
    return s + "  " + F::name + "(" + results + (args.empty() ? "" : ", ") + args + ");\n" + stores + "}\n";
  }
};

}  // namespace detail

namespace detail {

template <class X>
inline constexpr bool is_vector = false;
template <class T>
inline constexpr bool is_vector<Vector<T>> = true;
template <class X>
inline constexpr bool is_matrix = false;
template <class T>
inline constexpr bool is_matrix<Matrix<T>> = true;
template <class X>
inline constexpr bool is_part = false;
template <class T, bool Writable>
inline constexpr bool is_part<ContainerPart<T, Writable>> = true;
template <class X>
inline constexpr bool is_read_only_part = false;
template <class T>
inline constexpr bool is_read_only_part<ContainerPart<T, false>> = true;

/// Whether an argument is an operand of a 1D skeleton: a vector, a whole matrix (its elements in
/// row-major order), or a part of a container (`v.range(first, n)`, `m.row(i)`, whole rows).
template <class A>
inline constexpr bool is_operand =
    is_vector<std::remove_cvref_t<A>> || is_matrix<std::remove_cvref_t<A>> || is_part<std::remove_cvref_t<A>>;

template <class A>
struct operand_element {
  using type = typename A::value_type;
};
template <class T, bool Writable>
struct operand_element<ContainerPart<T, Writable>> {
  using type = T;
};
/// The element type of an operand.
template <class A>
using operand_element_t = typename operand_element<std::remove_cvref_t<A>>::type;

/// Elements [first, first + n) of a container.
struct SliceId {
  const ContainerCore* core;
  std::size_t first;
  std::size_t n;
  bool operator==(const SliceId&) const = default;
  /// Some element in common.
  bool overlaps(const SliceId& o) const {
    return core == o.core && n > 0 && o.n > 0 && first < o.first + o.n && o.first < first + n;
  }
};

/// One operand of a 1D skeleton call: elements [first, first + n) of a container, contiguous in its
/// main copy and in every device copy. The call's element i is the container's element first + i.
template <class T>
class Slice {
 public:
  Slice(ContainerCore& core, std::size_t first, std::size_t n) : core_(&core), first_(first), n_(n) {}
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  ContainerCore& core() const { return *core_; }
  /// The call's elements [first, first + n) in the main copy, made current for the access.
  T* host_range(std::size_t first, std::size_t n, Access mode) const {
    core_->host_access(first_ + first, n, mode);
    return reinterpret_cast<T*>(core_->host()) + first_ + first;
  }
  /// The call's elements [first, first + n), for a launch.
  ContainerPart<T> range(std::size_t first, std::size_t n) const {
    return {core_, Extent::range(first_ + first, n)};
  }
  ContainerPart<T> whole() const { return range(0, n_); }
  /// Where its elements are, to tell operands apart.
  SliceId id() const { return {core_, first_, n_}; }

 private:
  ContainerCore* core_;
  std::size_t first_;
  std::size_t n_;
};

/// An operand of skeleton `prefix` + `function` + ">" (the name is for messages) as a Slice; a part of
/// a container must be contiguous (InvalidArgument otherwise).
template <class T>
Slice<T> slice_of(const Vector<T>& v, const char* /*prefix*/, const char* /*function*/) {
  return {v.core(), 0, v.size()};
}
template <class T>
Slice<T> slice_of(const Matrix<T>& m, const char* /*prefix*/, const char* /*function*/) {
  return {m.core(), 0, m.size()};
}
template <class T, bool Writable>
Slice<T> slice_of(const ContainerPart<T, Writable>& part, const char* prefix, const char* function) {
  const Extent e = part.extent.normalized();
  if (e.count() == 0) return {*part.core, e.offset, 0};
  if (e.rows != 1)
    throw InvalidArgument(std::string(prefix) + function + ">: an operand of " + std::to_string(e.rows) +
                          " x " + std::to_string(e.cols) + " elements of the " + part.core->name() +
                          " is not contiguous (a skeleton takes vectors, ranges of them, rows and whole "
                          "rows of matrices)");
  return {*part.core, e.offset, e.cols};
}

/// slice_of for an output, which may not be a const container (as out() of one does not compile for a
/// typed kernel).
template <class O>
auto output_slice_of(O& out, const char* prefix, const char* function) {
  // A const part (a handle into a container) still writes the container; a const container does not.
  static_assert(!(std::is_const_v<O> && WholeContainer<std::remove_const_t<O>>),
                "hdsm: a skeleton's output cannot be a const container");
  static_assert(!is_read_only_part<std::remove_const_t<O>>,
                "hdsm: a skeleton's output cannot be a part of a const container");
  return slice_of(out, prefix, function);
}

/// InvalidArgument (naming skeleton `prefix` + `function` + ">") unless the whole matrices among the
/// operands have one shape: an element-wise call over a 4 x 5 and a 5 x 4 matrix is a mistake, even
/// though both have 20 elements. Vectors and parts are not compared here (their sizes are).
template <class... A>
void check_matrix_shapes(const char* prefix, const char* function, const A&... operands) {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool seen = false;
  const auto one = [&](const auto& a) {
    if constexpr (is_matrix<std::remove_cvref_t<decltype(a)>>) {
      if (!seen) {
        rows = a.rows();
        cols = a.cols();
        seen = true;
      } else if (a.rows() != rows || a.cols() != cols) {
        throw InvalidArgument(std::string(prefix) + function + ">: matrices of " + std::to_string(rows) +
                              " x " + std::to_string(cols) + " and " + std::to_string(a.rows()) + " x " +
                              std::to_string(a.cols()) + " elements (element-wise operands have one shape)");
      }
    }
  };
  (one(operands), ...);
}

/// InvalidArgument (naming skeleton `prefix` + `function` + ">") unless the outputs are apart and each
/// input is apart from each output or the same elements of it: an element may be updated in place,
/// not read at another index.
void check_aliasing(const char* prefix, const char* function, std::span<const SliceId> outputs,
                    std::span<const SliceId> inputs);

/// How many of the arguments, from the first, are operands (vectors or container parts).
template <class... A>
constexpr std::size_t leading_vectors() {
  std::size_t n = 0;
  bool more = true;
  ((more = more && is_operand<A>, n += more ? 1 : 0), ...);
  return n;
}

/// How many of the arguments from the `First`th on, from it, are vectors.
template <std::size_t First, class... A>
constexpr std::size_t leading_vectors_from() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return leading_vectors<std::tuple_element_t<First + I, std::tuple<A...>>...>();
  }
  (std::make_index_sequence<sizeof...(A) - First>{});
}

/// Runs map F into the outputs `outs` from the inputs `ins` and the uniforms `u` (already F's
/// parameter types).
template <class F, bool Indexed = false, class... R, class... T, class... U>
void run_map(std::optional<SkeletonBackend> backend_chosen, const std::vector<unsigned>& chosen,
             const SplitChoice& split, std::tuple<Slice<R>...> outs, std::tuple<Slice<T>...> ins,
             std::tuple<U...> u) {
  constexpr bool single = sizeof...(R) == 1 && !returns_void<F>;
  const char* prefix = Indexed ? "hdsm::MapIndex<" : "hdsm::Map<";
  const auto name = [&] { return std::string(prefix) + F::name + ">"; };  // for errors only
  const std::size_t n = std::get<0>(outs).size();
  std::apply(
      [&](const auto&... out) {
        std::size_t k = 0;
        ((out.size() != n
              ? throw InvalidArgument(name() + ": output " + std::to_string(k) + " has " +
                                      std::to_string(out.size()) + " elements, output 0 " + std::to_string(n))
              : void(++k)),
         ...);
      },
      outs);
  std::apply(
      [&](const auto&... in) {
        std::size_t other = n;
        ((other = in.size() != n ? in.size() : other), ...);
        if (other != n)
          throw InvalidArgument(name() + ": an input has " + std::to_string(other) +
                                " elements, the output " + std::to_string(n));
      },
      ins);
  check_aliasing(
      prefix, F::name,
      std::apply([](const auto&... o) { return std::array<SliceId, sizeof...(R)>{o.id()...}; }, outs),
      std::apply([](const auto&... i) { return std::array<SliceId, sizeof...(T)>{i.id()...}; }, ins));
  if (n == 0) return;
  Runtime& rt = std::get<0>(outs).core().runtime();
  if (skeleton_backend(rt, backend_chosen) == SkeletonBackend::host) {
    const std::tuple<const T*...> src = std::apply(
        [](const auto&... in) {
          return std::tuple<const T*...>{in.host_range(0, in.size(), Access::read)...};
        },
        ins);
    const std::tuple<R*...> dst = std::apply(
        [&](const auto&... out) { return std::tuple<R*...>{out.host_range(0, n, Access::write)...}; }, outs);
    host_for(rt, n, [&](std::size_t first, std::size_t last) {
      std::apply(
          [&](R*... d) {
            std::apply(
                [&](const T*... p) {
                  std::apply(
                      [&](const U&... v) {
                        for (std::size_t i = first; i < last; ++i) {
                          if constexpr (single && Indexed)
                            ((d[i] = F::call(std::uint64_t{i}, p[i]..., v...)), ...);
                          else if constexpr (single)
                            ((d[i] = F::call(p[i]..., v...)), ...);
                          else if constexpr (Indexed)
                            F::call(&d[i]..., std::uint64_t{i}, p[i]..., v...);
                          else
                            F::call(&d[i]..., p[i]..., v...);
                        }
                      },
                      u);
                },
                src);
          },
          dst);
    });
    return;
  }
  const Parts split_parts = skeleton_parts(rt, skeleton_devices(rt, chosen), split, n);
  const std::vector<unsigned>& devices = split_parts.devices;
  const Kernel& kernel = MapKernel<F, Indexed, std::tuple<R...>, T...>::template get<U...>();
  held_launches([&](HeldLaunches& run) {
    for (std::size_t part = 0; part < devices.size(); ++part) {
      const std::size_t first = split_parts.first(part);
      const std::size_t last = split_parts.last(part);
      if (first == last) continue;
      // The arguments in one tuple (outputs, inputs, sizes, uniforms): nested packs of generic lambdas
      // are beyond nvcc's front end.
      const auto part_of = [&](const auto& v) { return v.range(first, last - first); };
      auto args = std::tuple_cat(
          std::apply([&](const Slice<R>&... out) { return std::make_tuple(hdsm::out(part_of(out))...); },
                     outs),
          std::apply([&](const Slice<T>&... in) { return std::make_tuple(hdsm::in(part_of(in))...); }, ins),
          std::make_tuple(std::uint64_t{last - first}, std::uint64_t{first}), u);
      std::apply([&](auto&... a) { run(devices[part], kernel, cover(last - first), a...); }, args);
    }
  });
}

/// What every skeleton is told: where it runs (Derived: the skeleton, for chained calls).
template <class Derived>
// NOLINTNEXTLINE(bugprone-crtp-constructor-accessibility): intermediate bases derive from it too
class SkeletonOptions {
 public:
  Derived& backend(SkeletonBackend b) {
    backend_ = b;
    return static_cast<Derived&>(*this);
  }
  /// The devices to split each call over, in equal parts; none chosen: HDSM_SKELETON_DEVICES.
  Derived& devices(std::initializer_list<unsigned> devices) {
    devices_.assign(devices);
    return static_cast<Derived&>(*this);
  }
  Derived& devices(std::vector<unsigned> devices) {
    devices_ = std::move(devices);
    return static_cast<Derived&>(*this);
  }
  /// Equal parts, or parts in proportion to the devices' measured speeds; none chosen:
  /// HDSM_SKELETON_SPLIT. Clears weights given before.
  Derived& split(Split split) {
    split_.split = split;
    split_.weights.clear();
    return static_cast<Derived&>(*this);
  }
  /// Parts in proportion to these weights, one per device of the call (positive numbers).
  Derived& weights(std::vector<double> weights) {
    split_.weights = std::move(weights);
    return static_cast<Derived&>(*this);
  }

 protected:
  /// The parts of a call over n elements on runtime `rt`.
  Parts parts(Runtime& rt, std::size_t n) const {
    return skeleton_parts(rt, skeleton_devices(rt, devices_), split_, n);
  }

  std::optional<SkeletonBackend> backend_;  // none chosen: HDSM_SKELETON_BACKEND
  std::vector<unsigned> devices_;
  SplitChoice split_;
};

/// Map and MapIndex: the outputs, the inputs and the uniforms of a call, checked against F.
template <class F, bool Indexed, class Derived>
// NOLINTNEXTLINE(bugprone-crtp-constructor-accessibility): Map and MapIndex derive from it
class MapBase : public SkeletonOptions<Derived> {
 public:
  template <class... A>
  void operator()(A&&... args) {
    using Params = user_parameters<F>;
    constexpr std::size_t outputs = output_count<F>();
    constexpr std::size_t first = (returns_void<F> ? outputs : 0) + (Indexed ? 1 : 0);
    static_assert(outputs >= 1,
                  "hdsm::Map: the user function returns the element, or returns void and writes its outputs "
                  "through its leading T* parameters");
    static_assert(sizeof...(A) >= outputs,
                  "hdsm::Map: give one output vector per output of the user function");
    static_assert(leading_vectors<A...>() >= outputs,
                  "hdsm::Map: the first arguments are the output vectors");
    constexpr std::size_t inputs = leading_vectors_from<outputs, A...>();
    static_assert(Indexed || inputs >= 1, "hdsm::Map: give at least one input vector after the outputs");
    static_assert(
        std::tuple_size_v<Params> == first + sizeof...(A) - outputs,
        "hdsm::Map: the user function takes one argument per input vector and per uniform (after its "
        "output pointers and the index, where it has them)");
    if constexpr (Indexed) {
      using Index = std::tuple_element_t<first - 1, Params>;
      static_assert(std::is_integral_v<Index> && std::is_unsigned_v<Index> && sizeof(Index) == 8,
                    "hdsm::MapIndex: the user function's index parameter is unsigned long");
    }
    auto all = std::forward_as_tuple(args...);
    call<outputs, first, inputs>(all, std::make_index_sequence<outputs>{}, std::make_index_sequence<inputs>{},
                                 std::make_index_sequence<sizeof...(A) - outputs - inputs>{});
  }

 private:
  template <std::size_t Outputs, std::size_t First, std::size_t Inputs, class Tuple, std::size_t... O,
            std::size_t... I, std::size_t... J>
  void call(Tuple& all, std::index_sequence<O...>, std::index_sequence<I...>, std::index_sequence<J...>) {
    using Params = user_parameters<F>;
    if constexpr (returns_void<F>)
      static_assert((std::is_same_v<operand_element_t<std::tuple_element_t<O, Tuple>>*,
                                    std::tuple_element_t<O, Params>> &&
                     ...),
                    "hdsm::Map: output k's elements are what the user function's k-th parameter points to");
    else
      static_assert((std::is_convertible_v<typename function_traits<decltype(&F::call)>::result,
                                           operand_element_t<std::tuple_element_t<O, Tuple>>> &&
                     ...),
                    "hdsm::Map: the user function's result does not convert to the output's elements");
    static_assert((std::is_convertible_v<operand_element_t<std::tuple_element_t<Outputs + I, Tuple>>,
                                         std::tuple_element_t<First + I, Params>> &&
                   ...),
                  "hdsm::Map: an input's elements do not convert to the user function's parameter");
    static_assert((std::is_convertible_v<std::tuple_element_t<Outputs + Inputs + J, Tuple>,
                                         std::tuple_element_t<First + Inputs + J, Params>> &&
                   ...),
                  "hdsm::Map: a uniform does not convert to the user function's parameter");
    const char* prefix = Indexed ? "hdsm::MapIndex<" : "hdsm::Map<";
    check_matrix_shapes(prefix, F::name, std::get<O>(all)..., std::get<Outputs + I>(all)...);
    run_map<F, Indexed>(this->backend_, this->devices_, this->split_,
                        std::make_tuple(output_slice_of(std::get<O>(all), prefix, F::name)...),
                        std::make_tuple(slice_of(std::get<Outputs + I>(all), prefix, F::name)...),
                        std::tuple<std::tuple_element_t<First + Inputs + J, Params>...>(
                            std::get<Outputs + Inputs + J>(all)...));
  }
};

}  // namespace detail

/// Map: out[i] = F(in0[i], in1[i], ..., uniforms...) for every element. The inputs (1 to N vectors)
/// and the output have one size; the uniforms are the scalars F takes after its element arguments.
/// Several outputs: F returns void and its leading parameters point to one element of each output,
/// which it writes: map(out0, out1, in0, ...) calls F(&out0[i], &out1[i], in0[i], ..., uniforms...).
/// Calls are asynchronous on devices: host accesses of the outputs wait for them.
template <class F>
class Map : public detail::MapBase<F, false, Map<F>> {};

/// MapIndex: out[i] = F(i, in0[i], ..., uniforms...): Map whose user function also gets the
/// element's index (`unsigned long`, after the output pointers where it has them), with 0 to N input
/// vectors, so it can compute from positions alone (out[i] = F(i, uniforms...)).
template <class F>
class MapIndex : public detail::MapBase<F, true, MapIndex<F>> {};

namespace detail {

/// The kernel that reduces [j * chunk, (j + 1) * chunk) of its part to partial[j], one thread per
/// chunk, in element order.
template <class F, class T>
struct ReduceKernel {
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t j, const T* in, T* partial, std::uint64_t n,
                                         std::uint64_t chunk) {
      const std::uint64_t first = j * chunk;
      if (first >= n) return;
      const std::uint64_t last = first + chunk < n ? first + chunk : n;
      T acc = in[first];
      for (std::uint64_t i = first + 1; i < last; ++i) acc = F::call(acc, in[i]);
      partial[j] = acc;
    }
  };

  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel = skeleton_kernel<Body, const T*, T*, std::uint64_t, std::uint64_t>(
          std::string("hdsm_reduce_") + F::name);
      const std::string type = opencl_type<T>();
      kernel.opencl_source =
          opencl_prelude<T>() + F::opencl_source + "\n__kernel void hdsm_reduce_" + F::name +
          "(__global const " + type + "* in, __global " + type +
          "* partial, ulong n, ulong chunk) {\n  const ulong j = get_global_id(0);\n"
          "  const ulong first = j * chunk;\n  if (first >= n) return;\n"
          "  const ulong last = first + chunk < n ? first + chunk : n;\n  " +
          type + " acc = in[first];\n  for (ulong i = first + 1; i < last; ++i) acc = " + F::name +
          "(acc, in[i]);\n  partial[j] = acc;\n}\n";
      return kernel;
    }();
    return k;
  }
};

/// The kernels of a matrix's row-wise and column-wise reductions over one part: thread i reduces
/// row i of a rows x cols block (row-wise), or column i (column-wise), in element order.
template <class F, class T>
struct Reduce2DKernel {
  struct Rows {
    HDSM_HOST_DEVICE static void element(std::uint64_t i, const T* in, T* out, std::uint64_t rows,
                                         std::uint64_t cols) {
      if (i >= rows) return;
      T acc = in[i * cols];
      for (std::uint64_t j = 1; j < cols; ++j) acc = F::call(acc, in[i * cols + j]);
      out[i] = acc;
    }
  };
  struct Cols {
    HDSM_HOST_DEVICE static void element(std::uint64_t j, const T* in, T* out, std::uint64_t rows,
                                         std::uint64_t cols) {
      if (j >= cols) return;
      T acc = in[j];
      for (std::uint64_t i = 1; i < rows; ++i) acc = F::call(acc, in[i * cols + j]);
      out[j] = acc;
    }
  };

  static const Kernel& get(bool by_rows) {
    static const Kernel rows = make(true), cols = make(false);
    return by_rows ? rows : cols;
  }
  static Kernel make(bool by_rows) {
    const std::string name = std::string(by_rows ? "hdsm_reduce_rows_" : "hdsm_reduce_cols_") + F::name;
    Kernel kernel = by_rows ? skeleton_kernel<Rows, const T*, T*, std::uint64_t, std::uint64_t>(name)
                            : skeleton_kernel<Cols, const T*, T*, std::uint64_t, std::uint64_t>(name);
    const std::string type = opencl_type<T>();
    const std::string first = by_rows ? "k * cols" : "k", next = by_rows ? "k * cols + m" : "m * cols + k",
                      count = by_rows ? "rows" : "cols", other = by_rows ? "cols" : "rows";
    kernel.opencl_source =
        opencl_prelude<T>() + F::opencl_source + "\n__kernel void " + name + "(__global const " + type +
        "* in, __global " + type +
        "* out, ulong rows, ulong cols) {\n  const ulong k = get_global_id(0);\n  if (k >= " + count +
        ") return;\n  " + type + " acc = in[" + first + "];\n  for (ulong m = 1; m < " + other +
        "; ++m) acc = " + F::name + "(acc, in[" + next + "]);\n  out[k] = acc;\n}\n";
    return kernel;
  }
};

}  // namespace detail

/// Reduce: F(F(F(v[0], v[1]), v[2]), ...) for an associative F. On devices each part is reduced in
/// chunks by one kernel per device, and the chunks' results are combined on the host in element
/// order, so an exact F (integers, min, max) gives the same result on any number of devices. The call
/// waits for the result.
template <class F>
class Reduce : public detail::SkeletonOptions<Reduce<F>> {
 public:
  /// Chunks per device part (threads of the reducing kernel); default 256.
  Reduce& chunks(std::size_t chunks) {
    chunks_ = chunks == 0 ? 1 : chunks;
    return *this;
  }

  /// The reduction of all of `v` (a vector or a range of one, as Map's operands); InvalidArgument
  /// for an empty one. Waits for the result.
  template <class V>
  requires detail::is_operand<V> detail::operand_element_t<V>
  operator()(V&& v) { return async(std::forward<V>(v)).get(); }
  /// F(init, reduction of v), or init for an empty vector.
  template <class V>
  requires detail::is_operand<V> detail::operand_element_t<V>
  operator()(V&& v, const detail::operand_element_t<V>& init) {
    return async(std::forward<V>(v), init).get();
  }
  /// The same, returning as soon as the devices' kernels are enqueued: the Future's get() waits for
  /// them and combines their results. Host accesses of `v` meanwhile wait as for any call reading it.
  template <class V>
  requires detail::is_operand<V> Future<detail::operand_element_t<V>> async(V&& v) {
    using T = detail::operand_element_t<V>;
    check<T>();
    const detail::Slice<T> s = detail::slice_of(v, "hdsm::Reduce<", F::name);
    if (s.empty())
      throw InvalidArgument(std::string("hdsm::Reduce<") + F::name +
                            ">: an empty vector has no reduction (give an initial value)");
    return run(s);
  }
  template <class V>
  requires detail::is_operand<V> Future<detail::operand_element_t<V>> async(
      V&& v, const detail::operand_element_t<V>& init) {
    using T = detail::operand_element_t<V>;
    check<T>();
    const detail::Slice<T> s = detail::slice_of(v, "hdsm::Reduce<", F::name);
    if (s.empty()) return Future<T>(init);
    Future<T> partial = run(s);
    if (partial.ready()) return Future<T>(F::call(init, partial.get()));
    return Future<T>(std::function<T()>([partial, init]() mutable { return F::call(init, partial.get()); }));
  }

  /// Row-wise: out[i] = the reduction of row i of `m` (out has m.rows() elements, m at least one
  /// column). On N devices the rows are split. Asynchronous on devices, as Map.
  template <class T>
  void rows(Vector<T>& out, Matrix<T>& m) {
    check<T>();
    run_2d(out, m, true);
  }
  /// Column-wise: out[j] = the reduction of column j of `m` (out has m.cols() elements, m at least
  /// one row). On N devices the columns are split.
  template <class T>
  void cols(Vector<T>& out, Matrix<T>& m) {
    check<T>();
    run_2d(out, m, false);
  }

 private:
  template <class T>
  static void check() {
    using Params = detail::user_parameters<F>;
    static_assert(std::tuple_size_v<Params> == 2 && std::is_same_v<std::tuple_element_t<0, Params>, T> &&
                      std::is_same_v<std::tuple_element_t<1, Params>, T>,
                  "hdsm::Reduce: the user function takes two elements of the vector's type");
  }

  template <class T>
  Future<T> run(const detail::Slice<T>& v) {
    const std::size_t n = v.size();
    Runtime& rt = v.core().runtime();
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const T* p = v.host_range(0, n, Access::read);
      std::vector<T> partial(detail::host_chunk_count(rt, n));
      std::vector<char> used(partial.size(), 0);
      detail::host_chunks(rt, n, [&](std::size_t c, std::size_t first, std::size_t last) {
        T acc = p[first];
        for (std::size_t i = first + 1; i < last; ++i) acc = F::call(acc, p[i]);
        partial[c] = acc;
        used[c] = 1;
      });
      return Future<T>(combine(partial, used));
    }
    const detail::Parts split_parts = this->parts(rt, n);
    const std::vector<unsigned>& devices = split_parts.devices;
    auto partials = std::make_shared<std::vector<Vector<T>>>();
    for (std::size_t part = 0; part < devices.size(); ++part) {
      const std::size_t first = split_parts.first(part);
      const std::size_t last = split_parts.last(part);
      if (first == last) continue;
      const std::size_t chunk = detail::ceil_div(last - first, chunks_);  // no wrap for a huge chunks()
      const std::size_t count = (last - first + chunk - 1) / chunk;
      partials->emplace_back(count, ContainerOptions{&rt});
      launch(devices[part], detail::ReduceKernel<F, T>::get(), cover(count),
             hdsm::in(v.range(first, last - first)), hdsm::out(partials->back()), std::uint64_t{last - first},
             std::uint64_t{chunk});
    }
    return Future<T>(std::function<T()>([partials] {
      std::vector<T> all;
      for (Vector<T>& p : *partials) {
        const T* r = p.host_range(0, p.size(), Access::read);
        all.insert(all.end(), r, r + p.size());
      }
      return combine(all, std::vector<char>(all.size(), 1));
    }));
  }

  template <class T>
  void run_2d(Vector<T>& out, Matrix<T>& m, bool by_rows) {
    const std::string name = std::string("hdsm::Reduce<") + F::name + ">::" + (by_rows ? "rows" : "cols");
    const std::size_t count = by_rows ? m.rows() : m.cols(), other = by_rows ? m.cols() : m.rows();
    if (out.size() != count)
      throw InvalidArgument(name + ": out has " + std::to_string(out.size()) + " elements, the matrix " +
                            std::to_string(count) + (by_rows ? " rows" : " columns"));
    if (count == 0) return;
    if (other == 0)
      throw InvalidArgument(name + ": a matrix without " + (by_rows ? "columns" : "rows") +
                            " has no reduction");
    Runtime& rt = m.core().runtime();
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const T* p = m.host_range(0, m.size(), Access::read);
      T* dst = out.host_range(0, count, Access::write);
      const std::size_t cols = m.cols();
      detail::host_for(rt, count, [&](std::size_t first, std::size_t last) {
        for (std::size_t k = first; k < last; ++k) {
          T acc = by_rows ? p[k * cols] : p[k];
          for (std::size_t j = 1; j < other; ++j)
            acc = F::call(acc, by_rows ? p[k * cols + j] : p[j * cols + k]);
          dst[k] = acc;
        }
      });
      return;
    }
    const detail::Parts split_parts = this->parts(rt, count);
    const std::vector<unsigned>& devices = split_parts.devices;
    const Kernel& kernel = detail::Reduce2DKernel<F, T>::get(by_rows);
    detail::held_launches([&](detail::HeldLaunches& run) {
      for (std::size_t part = 0; part < devices.size(); ++part) {
        const std::size_t first = split_parts.first(part);
        const std::size_t last = split_parts.last(part);
        if (first == last) continue;
        // The part's rows (or columns) as a submatrix, contiguous on the device.
        const std::size_t rows = by_rows ? last - first : m.rows(), cols = by_rows ? m.cols() : last - first;
        run(devices[part], kernel, cover(last - first),
            hdsm::in(by_rows ? m.submatrix(first, 0, rows, cols) : m.submatrix(0, first, rows, cols)),
            hdsm::out(out.range(first, last - first)), std::uint64_t{rows}, std::uint64_t{cols});
      }
    });
  }

  template <class T>
  static T combine(const std::vector<T>& partial, const std::vector<char>& used) {
    std::size_t i = 0;
    while (!used[i]) ++i;
    T acc = partial[i];
    for (++i; i < partial.size(); ++i)
      if (used[i]) acc = F::call(acc, partial[i]);
    return acc;
  }

  std::size_t chunks_ = 256;
};

namespace detail {

/// The kernel that reduces map M over chunk j of its part to partial[j]: the chunk's first mapped
/// element, then R(acc, M(in[i]..., u...)) in element order.
template <class M, class Rd, class T, class... Ins>
struct MapReduceKernel {
  template <class... U>
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t j, T* partial, const Ins*... in, std::uint64_t n,
                                         std::uint64_t chunk, U... u) {
      const std::uint64_t first = j * chunk;
      if (first >= n) return;
      const std::uint64_t last = first + chunk < n ? first + chunk : n;
      T acc = M::call(in[first]..., u...);
      for (std::uint64_t i = first + 1; i < last; ++i) acc = Rd::call(acc, M::call(in[i]..., u...));
      partial[j] = acc;
    }
  };

  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel = skeleton_kernel<Body<U...>, T*, const Ins*..., std::uint64_t, std::uint64_t, U...>(
          std::string("hdsm_mapreduce_") + M::name + "_" + Rd::name);
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  template <class... U>
  static std::string opencl() {
    const std::string type = opencl_type<T>();
    std::string s = opencl_prelude<T, Ins..., U...>() + M::opencl_source + "\n";
    // OpenCL C has one namespace for functions: two of one name cannot be in one program.
    if (!std::is_same_v<M, Rd> && std::string(M::name) == Rd::name)
      s += std::string("#error \"hdsm::MapReduce: its map and reduce functions are both named '") + M::name +
           "', and OpenCL C has no namespaces: give one of them another name\"\n";
    else if (!std::is_same_v<M, Rd>)
      s += std::string(Rd::opencl_source) + "\n";
    s += std::string("__kernel void hdsm_mapreduce_") + M::name + "_" + Rd::name + "(__global " + type +
         "* partial";
    int k = 0;
    ((s += std::string(", __global const ") + opencl_type<Ins>() + "* in" + std::to_string(k++)), ...);
    s += ", ulong n, ulong chunk" + opencl_uniforms<U...>().params;
    const auto mapped = [&](const char* index) {
      std::string args;
      append_names(args, "in", sizeof...(Ins), std::string("[") + index + "]");
      append_names(args, "u", sizeof...(U));
      return std::string(M::name) + "(" + args + ")";
    };
    s += ") {\n  const ulong j = get_global_id(0);\n  const ulong first = j * chunk;\n  if (first >= n) "
         "return;\n"
         "  const ulong last = first + chunk < n ? first + chunk : n;\n  " +
         type + " acc = " + mapped("first") +
         ";\n  for (ulong i = first + 1; i < last; ++i) acc = " + Rd::name + "(acc, " + mapped("i") +
         ");\n  partial[j] = acc;\n}\n";
    return s;
  }
};

}  // namespace detail

namespace detail {

/// The kernel that computes out[i] = F(array, in[i]..., uniforms...) for i < n on one part, or
/// (Indexed) F(base + i, array, in[i]..., uniforms...), base the part's first element.
template <class F, bool Indexed, class R, class A, class... Ins>
struct MapArrayKernel {
  static constexpr const char* prefix = Indexed ? "hdsm_maparrayindex_" : "hdsm_maparray_";

  template <class... U>
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t i, R* out, const A* array, const Ins*... in,
                                         std::uint64_t n, std::uint64_t base, U... u) {
      if (i >= n) return;
      if constexpr (Indexed)
        out[i] = F::call(base + i, array, in[i]..., u...);
      else
        out[i] = F::call(array, in[i]..., u...);
    }
  };

  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel =
          skeleton_kernel<Body<U...>, R*, const A*, const Ins*..., std::uint64_t, std::uint64_t, U...>(
              std::string(prefix) + F::name);
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  template <class... U>
  static std::string opencl() {
    std::string s = opencl_prelude<R, A, Ins..., U...>() + F::opencl_source + "\n__kernel void " + prefix +
                    F::name + "(__global " + opencl_type<R>() + "* out, __global const " + opencl_type<A>() +
                    "* array";
    int k = 0;
    ((s += std::string(", __global const ") + opencl_type<Ins>() + "* in" + std::to_string(k++)), ...);
    s += ", ulong n, ulong base" + opencl_uniforms<U...>().params;
    s += ") {\n  const ulong i = get_global_id(0);\n  if (i < n) out[i] = " + std::string(F::name) +
         (Indexed ? "(base + i, array" : "(array");
    append_names(s, "in", sizeof...(Ins), "[i]");
    append_names(s, "u", sizeof...(U));
    return s + ");\n}\n";
  }
};

}  // namespace detail

/// MapArray: out[i] = F(array, in0[i], ..., uniforms...): like Map, with one more operand, `array`,
/// that F reads at any index (its first parameter, `HDSM_GLOBAL const A*`). On N devices the inputs
/// and the output are split as Map's are and `array` is replicated: every device reads it whole. The
/// output may be an input, not the array. Calls are asynchronous on devices.
/// MapArrayIndex<F> (Indexed) also gives F the element's index, before the array:
/// out[i] = F(i, array, in0[i], ..., uniforms...), with 0 to N inputs.
template <class F, bool Indexed = false>
class MapArray : public detail::SkeletonOptions<MapArray<F, Indexed>> {
  static constexpr std::size_t kFirst = Indexed ? 1 : 0;  // F's parameter that takes the array

 public:
  template <class O, class V, class... Args>
  requires(detail::is_operand<O>&& detail::is_operand<V>) void operator()(O&& out, V&& array,
                                                                          Args&&... args) {
    using A = detail::operand_element_t<V>;
    constexpr std::size_t inputs = detail::leading_vectors<Args...>();
    using Params = detail::user_parameters<F>;
    static_assert(
        std::tuple_size_v<Params> == kFirst + 1 + sizeof...(Args),
        "hdsm::MapArray: the user function takes (the index,) the array, then one argument per input "
        "vector and per uniform");
    static_assert(
        std::is_same_v<std::tuple_element_t<kFirst, Params>, const A*>,
        "hdsm::MapArray: the user function's array parameter is HDSM_GLOBAL const A*, A the array's "
        "element type");
    if constexpr (Indexed) {
      using Index = std::tuple_element_t<0, Params>;
      static_assert(std::is_integral_v<Index> && std::is_unsigned_v<Index> && sizeof(Index) == 8,
                    "hdsm::MapArrayIndex: the user function's first parameter is the index, unsigned long");
    } else {
      static_assert(inputs >= 1, "hdsm::MapArray: give at least one input vector after the array");
    }
    auto all = std::forward_as_tuple(args...);
    call<inputs>(out, array, all, std::make_index_sequence<inputs>{},
                 std::make_index_sequence<sizeof...(Args) - inputs>{});
  }

 private:
  template <std::size_t Inputs, class O, class V, class Tuple, std::size_t... I, std::size_t... J>
  void call(O& out, V& array, Tuple& all, std::index_sequence<I...>, std::index_sequence<J...>) {
    using Params = detail::user_parameters<F>;
    static_assert((std::is_convertible_v<detail::operand_element_t<std::tuple_element_t<I, Tuple>>,
                                         std::tuple_element_t<kFirst + 1 + I, Params>> &&
                   ...),
                  "hdsm::MapArray: an input's elements do not convert to the user function's parameter");
    const std::tuple<std::tuple_element_t<kFirst + 1 + Inputs + J, Params>...> u(
        std::get<Inputs + J>(all)...);
    const char* prefix = Indexed ? "hdsm::MapArrayIndex<" : "hdsm::MapArray<";
    detail::check_matrix_shapes(prefix, F::name, out, std::get<I>(all)...);  // not the array: any size
    run(detail::output_slice_of(out, prefix, F::name), detail::slice_of(array, prefix, F::name), u,
        detail::slice_of(std::get<I>(all), prefix, F::name)...);
  }

  template <class R, class A, class... U, class... T>
  void run(const detail::Slice<R>& out, const detail::Slice<A>& array, const std::tuple<U...>& u,
           const detail::Slice<T>&... in) {
    const char* prefix = Indexed ? "hdsm::MapArrayIndex<" : "hdsm::MapArray<";
    const auto name = [&] { return std::string(prefix) + F::name + ">"; };  // for errors only
    const std::size_t n = out.size();
    if constexpr (sizeof...(T) > 0)
      if (((in.size() != n) || ...))
        throw InvalidArgument(name() + ": an input has " + std::to_string(std::max({in.size()...})) +
                              " elements, the output " + std::to_string(n));
    const detail::SliceId o = out.id();
    if (o.overlaps(array.id()))
      throw InvalidArgument(name() + ": the output cannot overlap the array, which every element reads");
    detail::check_aliasing(prefix, F::name, std::array<detail::SliceId, 1>{o},
                           std::array<detail::SliceId, sizeof...(T)>{in.id()...});
    if (n == 0) return;
    Runtime& rt = out.core().runtime();
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const A* whole = array.host_range(0, array.size(), Access::read);
      const std::tuple<const T*...> src{in.host_range(0, n, Access::read)...};
      R* dst = out.host_range(0, n, Access::write);
      detail::host_for(rt, n, [&](std::size_t first, std::size_t last) {
        std::apply(
            [&](const T*... p) {
              std::apply(
                  [&](const U&... v) {
                    for (std::size_t i = first; i < last; ++i) {
                      if constexpr (Indexed)
                        dst[i] = F::call(std::uint64_t{i}, whole, p[i]..., v...);
                      else
                        dst[i] = F::call(whole, p[i]..., v...);
                    }
                  },
                  u);
            },
            src);
      });
      return;
    }
    const detail::Parts split_parts = this->parts(rt, n);
    const std::vector<unsigned>& devices = split_parts.devices;
    const Kernel& kernel = detail::MapArrayKernel<F, Indexed, R, A, T...>::template get<U...>();
    detail::held_launches([&](detail::HeldLaunches& run) {
      for (std::size_t part = 0; part < devices.size(); ++part) {
        const std::size_t first = split_parts.first(part);
        const std::size_t last = split_parts.last(part);
        if (first == last) continue;
        std::apply(
            [&](const U&... v) {
              run(devices[part], kernel, cover(last - first), hdsm::out(out.range(first, last - first)),
                  hdsm::in(array.whole()), hdsm::in(in.range(first, last - first))...,
                  std::uint64_t{last - first}, std::uint64_t{first}, v...);
            },
            u);
      }
    });
  }
};

/// MapArray whose user function also gets the element's index, first: out[i] = F(i, array, in0[i],
/// ..., uniforms...).
template <class F>
using MapArrayIndex = MapArray<F, true>;

/// What a MapOverlap element whose neighbourhood leaves the vector reads there: `none` computes no
/// such element (out keeps its value), `cyclic` wraps around, `duplicate` repeats the edge element,
/// `pad` reads the pad value.
enum class Edge : std::uint8_t { none, cyclic, duplicate, pad };

namespace detail {

/// The largest MapOverlap radius: the kernels keep the window in a fixed private array.
inline constexpr std::size_t kMaxOverlap = 32;

/// F's OpenCL C definition, `RETURN NAME(PARAMS) BODY`, split after NAME's opening parenthesis:
/// {"RETURN ", "PARAMS) BODY"}; empty where the text does not have that shape.
template <class F>
std::pair<std::string_view, std::string_view> opencl_definition_parts() {
  const std::string_view source = F::opencl_source;
  const std::string call = std::string(F::name) + "(";
  const std::size_t at = source.find(call);
  if (at == std::string_view::npos) return {};
  return {source.substr(0, at), source.substr(at + call.size())};
}

constexpr bool opencl_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// The name of F's first parameter (the window) in its OpenCL C definition; empty where the
/// definition does not have the expected shape.
template <class F>
std::string_view opencl_window_name() {
  const auto [head, rest] = opencl_definition_parts<F>();
  const std::size_t close = rest.find(')');
  if (head.empty() || close == std::string_view::npos) return {};
  std::string_view first = rest.substr(0, std::min(rest.find(','), close));
  while (!first.empty() && !opencl_word_char(first.back())) first.remove_suffix(1);
  std::size_t name_at = first.size();
  while (name_at > 0 && opencl_word_char(first[name_at - 1])) --name_at;
  return first.substr(name_at);
}

/// Whether F's OpenCL C definition can take its first parameter (the window) in global memory:
/// every use of that parameter in its body is an index, `w[...]`, so nothing turns it into a
/// private pointer, which OpenCL C 1.2 refuses. Such an F reads the elements away from the edges in
/// place, as on the other backends; any other reads a private copy of each window.
template <class F>
bool opencl_window_in_place() {
  const auto [head, rest] = opencl_definition_parts<F>();
  const std::string_view name = opencl_window_name<F>();
  if (name.empty()) return false;
  const auto word = opencl_word_char;
  const std::string_view body = rest.substr(rest.find(')') + 1);
  for (std::size_t at = body.find(name); at != std::string_view::npos; at = body.find(name, at + 1)) {
    if ((at > 0 && word(body[at - 1])) || (at + name.size() < body.size() && word(body[at + name.size()])))
      continue;  // part of a longer name
    std::size_t next = at + name.size();
    while (next < body.size() && (body[next] == ' ' || body[next] == '\t' || body[next] == '\n')) ++next;
    if (next >= body.size() || body[next] != '[') return false;
    // &w[k] (or &(w[k])) is a pointer into the window, which a private pointer variable may take.
    std::size_t before = at;
    while (before > 0 && (body[before - 1] == ' ' || body[before - 1] == '\t' || body[before - 1] == '\n' ||
                          body[before - 1] == '('))
      --before;
    if (before > 0 && body[before - 1] == '&' && (before < 2 || body[before - 2] != '&')) return false;
  }
  return true;
}

/// F's OpenCL C definition again, named F::name + "_global", its first parameter in global memory
/// (used where opencl_window_in_place<F>()).
template <class F>
std::string opencl_global_variant() {
  const auto [head, rest] = opencl_definition_parts<F>();
  return std::string(head) + F::name + "_global(__global " + std::string(rest) + "\n";
}

/// `text` with every `name[k]` reading `name[(long)(k) * hdsm_stride]`, the indices' own included
/// (their nesting is the user function's text: a few levels). Text that has `name` not followed by an
/// index is left as it is (opencl_window_in_place refuses such an F).
inline std::string opencl_strided_indices(std::string_view text, std::string_view name) {
  std::string out;
  std::size_t done = 0;
  for (std::size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const std::size_t after = at + name.size();
    if ((at > 0 && opencl_word_char(text[at - 1])) || (after < text.size() && opencl_word_char(text[after])))
      continue;
    std::size_t open = after;
    while (open < text.size() && (text[open] == ' ' || text[open] == '\t' || text[open] == '\n')) ++open;
    if (open >= text.size() || text[open] != '[') continue;
    std::size_t end = open + 1;
    for (int depth = 1; end < text.size(); ++end) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']' && --depth == 0) break;
    }
    if (end >= text.size()) break;
    out += std::string(text.substr(done, open + 1 - done)) + "(long)(" +
           opencl_strided_indices(text.substr(open + 1, end - open - 1), name) + ") * hdsm_stride";
    done = end;
    at = end;
  }
  return out + std::string(text.substr(done));
}

/// F's OpenCL C definition again, named F::name + "_strided", its window in global memory and every
/// `w[k]` reading `w[k * hdsm_stride]` (a second parameter): a column-wise MapOverlap's F on the
/// matrix's column in place, not on a private copy of it (used where opencl_window_in_place<F>()).
template <class F>
std::string opencl_strided_variant() {
  const auto [head, rest] = opencl_definition_parts<F>();
  const std::size_t close = rest.find(')');
  const std::size_t comma = std::min(rest.find(','), close);
  return std::string(head) + F::name + "_strided(__global " + std::string(rest.substr(0, comma)) +
         ", long hdsm_stride" + std::string(rest.substr(comma, close + 1 - comma)) +
         opencl_strided_indices(rest.substr(close + 1), opencl_window_name<F>()) + "\n";
}

/// The rows (or elements) of one part of a MapOverlap's input and its neighbours, as the kernels
/// get them: a row r of the matrix lies in `part` (rows [first, first + count)), `top` (rows [lo,
/// first)) or `bottom` (rows [first + count, ...)); beyond the matrix, cyclic, in `before` (its last
/// radius rows) or `after` (its first). The part has the extent of the output's part, so that a
/// step's output is the next step's input where it lies, with no copy; only the neighbours move.
/// Null for a row beyond the matrix that the edge mode pads.
template <class T>
HDSM_HOST_DEVICE const T* overlap_row(std::int64_t r, const T* part, const T* top, const T* bottom,
                                      const T* before, const T* after, std::int64_t n, std::int64_t first,
                                      std::int64_t count, std::int64_t lo, std::int64_t radius,
                                      std::uint64_t edge, std::int64_t width) {
  if (r < 0 || r >= n) {
    if (edge == 1) return r < 0 ? before + (r + radius) * width : after + (r - n) * width;
    if (edge != 2) return nullptr;
    r = r < 0 ? 0 : n - 1;
  }
  if (r < first) return top + (r - lo) * width;
  if (r >= first + count) return bottom + (r - first - count) * width;
  return part + (r - first) * width;
}

/// The OpenCL C text of overlap_row for element type `type`.
inline std::string opencl_overlap_row(const std::string& type) {
  return "__global const " + type + "* hdsm_overlap_row(long r, __global const " + type +
         "* part, __global const " + type + "* top, __global const " + type + "* bottom, __global const " +
         type + "* before, __global const " + type +
         "* after, long n, long first, long count, long lo, long radius, ulong edge, long width) {\n"
         "  if (r < 0 || r >= n) {\n"
         "    if (edge == 1) return r < 0 ? before + (r + radius) * width : after + (r - n) * width;\n"
         "    if (edge != 2) return 0;\n"
         "    r = r < 0 ? 0 : n - 1;\n  }\n"
         "  if (r < first) return top + (r - lo) * width;\n"
         "  if (r >= first + count) return bottom + (r - first - count) * width;\n"
         "  return part + (r - first) * width;\n}\n";
}

/// The kernel of one part of a MapOverlap: element first + t of the vector gets F(w, uniforms...),
/// w pointing at the element in a window of [g - radius, g + radius]. Away from the part's ends w is
/// the input itself; near them (and near the vector's, as the edge mode says) a private copy of the
/// window, gathered out of line so that the common path stays small.
template <class F, class T>
struct MapOverlapKernel {
  template <class... U>
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t t, T* out, const T* part, const T* top,
                                         const T* bottom, const T* before, const T* after, std::uint64_t n,
                                         std::uint64_t first, std::uint64_t count, std::uint64_t lo,
                                         std::uint64_t radius, std::uint64_t edge, T pad, U... u) {
      if (t >= count) return;
      const auto i = static_cast<std::int64_t>(t), r = static_cast<std::int64_t>(radius);
      if (i >= r && i + r < static_cast<std::int64_t>(count)) {
        out[t] = F::call(part + i, u...);
        return;
      }
      const std::int64_t g = static_cast<std::int64_t>(first) + i, size = static_cast<std::int64_t>(n);
      if (edge == 0 && (g < r || g + r >= size)) return;
      out[t] = gathered(g, part, top, bottom, before, after, size, static_cast<std::int64_t>(first),
                        static_cast<std::int64_t>(count), static_cast<std::int64_t>(lo), r, edge, pad, u...);
    }

    /// Elements [begin, end) of the part on the CPU (a sim block, a host chunk): the run whose
    /// windows lie in the part as a loop of F alone, which the compiler vectorizes (a per-element
    /// branch to the gathering call kept it scalar: 2.1x a hand-written loop), the ends by element.
    static void range(std::uint64_t begin, std::uint64_t end, T* out, const T* part, const T* top,
                      const T* bottom, const T* before, const T* after, std::uint64_t n, std::uint64_t first,
                      std::uint64_t count, std::uint64_t lo, std::uint64_t radius, std::uint64_t edge, T pad,
                      U... u) {
      end = std::min(end, count);
      if (begin >= end) return;
      const std::uint64_t inside_end = count > radius ? count - radius : 0;
      const std::uint64_t a = std::min(std::max(begin, radius), end);
      const std::uint64_t b = std::max(std::min(end, inside_end), a);
      for (std::uint64_t t = begin; t < a; ++t)
        element(t, out, part, top, bottom, before, after, n, first, count, lo, radius, edge, pad, u...);
      for (std::uint64_t t = a; t < b; ++t) out[t] = F::call(part + t, u...);
      for (std::uint64_t t = b; t < end; ++t)
        element(t, out, part, top, bottom, before, after, n, first, count, lo, radius, edge, pad, u...);
    }

    HDSM_DETAIL_NOINLINE HDSM_HOST_DEVICE static T gathered(std::int64_t g, const T* part, const T* top,
                                                            const T* bottom, const T* before, const T* after,
                                                            std::int64_t size, std::int64_t first,
                                                            std::int64_t count, std::int64_t lo,
                                                            std::int64_t r, std::uint64_t edge, T pad,
                                                            U... u) {
      T window[2 * kMaxOverlap + 1];
      for (std::int64_t k = -r; k <= r; ++k) {
        const T* at =
            overlap_row(g + k, part, top, bottom, before, after, size, first, count, lo, r, edge, 1);
        window[k + r] = at != nullptr ? *at : pad;
      }
      return F::call(window + r, u...);
    }
  };

  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      const std::string name = std::string("hdsm_mapoverlap_") + F::name;
      Kernel kernel =
          skeleton_kernel<Body<U...>, T*, const T*, const T*, const T*, const T*, const T*, std::uint64_t,
                          std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, T, U...>(
              name);
      // On the CPU, a block's elements as one range (Body::range), not thread by thread.
      kernel.host =
          per_block(name, [](Block& b, T* out, const T* part, const T* top, const T* bottom, const T* before,
                             const T* after, std::uint64_t n, std::uint64_t first, std::uint64_t count,
                             std::uint64_t lo, std::uint64_t radius, std::uint64_t edge, T pad, U... u) {
            const std::uint64_t begin = std::uint64_t{b.index().x} * b.size();
            Body<U...>::range(begin, begin + b.size(), out, part, top, bottom, before, after, n, first, count,
                              lo, radius, edge, pad, u...);
          }).host;
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  template <class... U>
  static std::string opencl() {
    const std::string type = opencl_type<T>();
    const bool in_place = opencl_window_in_place<F>();
    std::string s = opencl_prelude<T, U...>() + F::opencl_source + "\n" +
                    (in_place ? opencl_global_variant<F>() : std::string()) + opencl_overlap_row(type) +
                    "__kernel void hdsm_mapoverlap_" + F::name + "(__global " + type + "* out";
    for (const char* operand : {"part", "top", "bottom", "before", "after"})
      s += ", __global const " + type + "* " + operand;
    s += ", ulong n, ulong first, ulong count, ulong lo, ulong radius, ulong edge, " + type + " pad";
    const auto [uniform_params, tail] = opencl_uniforms<U...>();
    s += uniform_params;
    s += ") {\n  const ulong t = get_global_id(0);\n  if (t >= count) return;\n"
         "  const long i = (long)t, r = (long)radius;\n";
    if (in_place)
      s += "  if (i >= r && i + r < (long)count) {\n    out[t] = " + std::string(F::name) +
           "_global(part + i" + tail + ");\n    return;\n  }\n";
    s += "  const long g = (long)first + i, size = (long)n;\n"
         "  if (edge == 0 && (g < r || g + r >= size)) return;\n  " +
         type + " window[" + std::to_string(2 * kMaxOverlap + 1) +
         "];\n  for (long k = -r; k <= r; ++k) {\n"
         "    __global const " +
         type +
         "* at = hdsm_overlap_row(g + k, part, top, bottom, before, after, size, (long)first, (long)count, "
         "(long)lo, r, edge, 1);\n"
         "    window[k + r] = at != 0 ? *at : pad;\n  }\n  out[t] = " +
         F::name + "(window + r" + tail + ");\n}\n";
    return s;
  }
};

}  // namespace detail

namespace detail {

/// The largest radius of a MapOverlap2D, in each direction: the kernels keep the (2r + 1) x (2c + 1)
/// window in a fixed private array.
inline constexpr std::size_t kMaxOverlap2D = 8;

/// The kernel of one part of a MapOverlap on a matrix (R x C, row-major): element t of the part's
/// rows [first, first + count) gets F of its window, rows gi - rr .. gi + rr and columns gj - cr ..
/// gj + cr: row-wise (rr = 0), column-wise (cr = 0; both give F the window's centre, `const T*`, as
/// the 1D form) or 2D (F also gets the window's row stride). The rows come as overlap_row says. An
/// element whose window lies in the part's rows and the matrix's columns reads the input in place
/// (row-wise and 2D; the stride is then the matrix's row length); any other a private copy of its
/// window (stride 2 cr + 1), gathered out of line.
template <class F, class T, bool TwoD>
struct MapOverlapMatrixKernel {
  static constexpr std::size_t kWindow =
      TwoD ? (2 * kMaxOverlap2D + 1) * (2 * kMaxOverlap2D + 1) : 2 * kMaxOverlap + 1;

  template <class... U>
  struct Body {
    HDSM_HOST_DEVICE static void element(std::uint64_t x, std::uint64_t y, T* out, const T* part,
                                         const T* top, const T* bottom, const T* before, const T* after,
                                         std::uint64_t rows, std::uint64_t cols, std::uint64_t first,
                                         std::uint64_t count, std::uint64_t lo, std::uint64_t row_radius,
                                         std::uint64_t col_radius, std::uint64_t edge,
                                         std::uint64_t /*frame_only: OpenCL's alone*/, T pad, U... u) {
      if (x >= cols || y >= count) return;
      const std::int64_t nr = static_cast<std::int64_t>(rows), nc = static_cast<std::int64_t>(cols);
      const std::int64_t rr = static_cast<std::int64_t>(row_radius),
                         cr = static_cast<std::int64_t>(col_radius);
      const auto i = static_cast<std::int64_t>(y), gj = static_cast<std::int64_t>(x);
      const std::uint64_t t = y * cols + x;
      if ((TwoD || rr == 0) && i >= rr && i + rr < static_cast<std::int64_t>(count) && gj >= cr &&
          gj + cr < nc) {
        const T* centre = part + i * nc + gj;
        if constexpr (TwoD)
          out[t] = F::call(centre, static_cast<long>(nc), u...);
        else
          out[t] = F::call(centre, u...);
        return;
      }
      if constexpr (!TwoD) {
        // Column-wise inside the part: the column's elements straight from it.
        if (cr == 0 && i >= rr && i + rr < static_cast<std::int64_t>(count)) {
          T window[kWindow];
          for (std::int64_t di = -rr; di <= rr; ++di) window[di + rr] = part[(i + di) * nc + gj];
          out[t] = F::call(window + rr, u...);
          return;
        }
      }
      const std::int64_t gi = static_cast<std::int64_t>(first) + i;
      if (edge == 0 && (gi < rr || gi + rr >= nr || gj < cr || gj + cr >= nc)) return;
      // Column-wise, every element gathers (a column is not contiguous): in line, as the common path.
      if (!TwoD && cr == 0)
        out[t] = window_of(gi, gj, part, top, bottom, before, after, nr, nc, static_cast<std::int64_t>(first),
                           static_cast<std::int64_t>(count), static_cast<std::int64_t>(lo), rr, cr, edge, pad,
                           u...);
      else
        out[t] = gathered(gi, gj, part, top, bottom, before, after, nr, nc, static_cast<std::int64_t>(first),
                          static_cast<std::int64_t>(count), static_cast<std::int64_t>(lo), rr, cr, edge, pad,
                          u...);
    }

    HDSM_DETAIL_NOINLINE HDSM_HOST_DEVICE static T gathered(std::int64_t gi, std::int64_t gj, const T* part,
                                                            const T* top, const T* bottom, const T* before,
                                                            const T* after, std::int64_t nr, std::int64_t nc,
                                                            std::int64_t first, std::int64_t count,
                                                            std::int64_t lo, std::int64_t rr, std::int64_t cr,
                                                            std::uint64_t edge, T pad, U... u) {
      return window_of(gi, gj, part, top, bottom, before, after, nr, nc, first, count, lo, rr, cr, edge, pad,
                       u...);
    }

    HDSM_HOST_DEVICE static T window_of(std::int64_t gi, std::int64_t gj, const T* part, const T* top,
                                        const T* bottom, const T* before, const T* after, std::int64_t nr,
                                        std::int64_t nc, std::int64_t first, std::int64_t count,
                                        std::int64_t lo, std::int64_t rr, std::int64_t cr, std::uint64_t edge,
                                        T pad, U... u) {
      const std::int64_t stride = 2 * cr + 1;
      T window[kWindow];
      for (std::int64_t di = -rr; di <= rr; ++di) {
        const T* row =
            overlap_row(gi + di, part, top, bottom, before, after, nr, first, count, lo, rr, edge, nc);
        for (std::int64_t dj = -cr; dj <= cr; ++dj) {
          const std::int64_t j = gj + dj;
          T v = pad;
          if (row != nullptr) {
            if (j >= 0 && j < nc)
              v = row[j];
            else if (edge == 1)
              v = row[j < 0 ? j + nc : j - nc];
            else if (edge == 2)
              v = row[j < 0 ? 0 : nc - 1];
          }
          window[(di + rr) * stride + dj + cr] = v;
        }
      }
      const T* centre = window + rr * stride + cr;
      if constexpr (TwoD)
        return F::call(centre, static_cast<long>(stride), u...);
      else
        return F::call(centre, u...);
    }
  };

  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel =
          skeleton_kernel_rows<Body<U...>, T*, const T*, const T*, const T*, const T*, const T*,
                               std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t,
                               std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, T, U...>(name());
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  static std::string name() {
    return std::string(TwoD ? "hdsm_mapoverlap2d_" : "hdsm_mapoverlap_matrix_") + F::name;
  }

  template <class... U>
  static std::string opencl() {
    const std::string type = opencl_type<T>();
    const bool in_place = opencl_window_in_place<F>();
    std::string s = opencl_prelude<T, U...>() + F::opencl_source + "\n" +
                    (in_place ? opencl_global_variant<F>() : std::string()) + opencl_overlap_row(type) +
                    "__kernel void " + name() + "(__global " + type + "* out";
    for (const char* operand : {"part", "top", "bottom", "before", "after"})
      s += ", __global const " + type + "* " + operand;
    s += ", ulong rows, ulong cols, ulong first, ulong count, ulong lo, ulong row_radius, ulong col_radius, "
         "ulong edge, ulong frame_only, " +
         type + " pad";
    const auto [uniform_params, tail] = opencl_uniforms<U...>();
    s += uniform_params;
    std::string params;  // of the gathering function, after the row and column
    for (const char* operand : {"part", "top", "bottom", "before", "after"})
      params += ", __global const " + type + "* " + operand;
    params +=
        ", long nr, long nc, long first, long count, long lo, long rr, long cr, ulong edge, " + type + " pad";
    params += uniform_params;
    // The window of an element near an edge, gathered in a function of its own: in the kernel's body
    // it kept the interior's loop from being vectorized across work-items.
    const std::string gather =
        "__attribute__((noinline)) " + type + " hdsm_overlap_gather(long gi, long gj" + params +
        ") {\n  const long stride = 2 * cr + 1;\n  " + type + " window[" + std::to_string(kWindow) +
        "];\n  for (long di = -rr; di <= rr; ++di) {\n    __global const " + type +
        "* row = hdsm_overlap_row(gi + di, part, top, bottom, before, after, nr, first, count, lo, rr, edge, "
        "nc);\n"
        "    for (long dj = -cr; dj <= cr; ++dj) {\n      const long j = gj + dj;\n      " +
        type +
        " v = pad;\n      if (row != 0) {\n        if (j >= 0 && j < nc) v = row[j];\n"
        "        else if (edge == 1) v = row[j < 0 ? j + nc : j - nc];\n"
        "        else if (edge == 2) v = row[j < 0 ? 0 : nc - 1];\n      }\n"
        "      window[(di + rr) * stride + dj + cr] = v;\n    }\n  }\n  return " +
        F::name + (TwoD ? "(window + rr * stride + cr, stride" : "(window + rr * stride + cr") + tail +
        ");\n}\n";
    const std::size_t kernel_at = s.find("__kernel void ");
    s.insert(kernel_at, gather);
    // frame_only: a 1-D launch over the part's frame, the elements MapOverlapMatrixInterior leaves:
    // the top and bottom row_radius rows, then col_radius elements at each end of the rows between.
    s += ") {\n  ulong x = get_global_id(0), y = get_global_id(2) * get_global_size(1) + get_global_id(1);\n"
         "  if (frame_only) {\n    ulong e = x;\n    const ulong band = row_radius * cols;\n"
         "    if (e < 2 * band) {\n      y = e / cols;\n      x = e - y * cols;\n"
         "      if (y >= row_radius) y += count - 2 * row_radius;\n"
         "    } else {\n      e -= 2 * band;\n      const ulong side = 2 * col_radius;\n"
         "      if (side == 0 || e >= (count - 2 * row_radius) * side) return;\n"
         "      y = row_radius + e / side;\n      x = e % side;\n"
         "      if (x >= col_radius) x += cols - side;\n    }\n  }\n"
         "  if (x >= cols) return;\n"
         "  const long nr = (long)rows, nc = (long)cols, gj = (long)x;\n"
         "  const long rr = (long)row_radius, cr = (long)col_radius;\n"
         "  {\n    if (y >= count) return;\n"
         "    const long i = (long)y;\n    const ulong t = y * cols + x;\n";
    if (!TwoD)  // column-wise inside the part: the column's elements straight from it
      s += "    if (cr == 0 && i >= rr && i + rr < (long)count) {\n      " + type + " window[" +
           std::to_string(kWindow) +
           "];\n      for (long di = -rr; di <= rr; ++di) window[di + rr] = part[(i + di) * nc + gj];\n"
           "      out[t] = " +
           F::name + "(window + rr" + tail + ");\n      return;\n    }\n";
    if (in_place)
      s += std::string("    if (") + (TwoD ? "" : "rr == 0 && ") +
           "i >= rr && i + rr < (long)count && gj >= cr && gj + cr < nc) {\n      out[t] = " + F::name +
           "_global(part + i * nc + gj" + (TwoD ? ", nc" : "") + tail + ");\n      return;\n    }\n";
    s += "    const long gi = (long)first + i;\n"
         "    if (edge == 0 && (gi < rr || gi + rr >= nr || gj < cr || gj + cr >= nc)) return;\n";
    if (!TwoD)  // column-wise, every element gathers its column: in line, as the common path
      s += "    if (cr == 0) {\n      " + type + " window[" + std::to_string(kWindow) +
           "];\n      for (long di = -rr; di <= rr; ++di) {\n        __global const " + type +
           "* row = hdsm_overlap_row(gi + di, part, top, bottom, before, after, nr, (long)first, "
           "(long)count, (long)lo, rr, edge, nc);\n        window[di + rr] = row != 0 ? row[gj] : pad;\n"
           "      }\n      out[t] = " +
           F::name + "(window + rr" + tail + ");\n      return;\n    }\n";
    s += "    out[t] = hdsm_overlap_gather(gi, gj, part, top, bottom, before, after, nr, nc, (long)first, "
         "(long)count, (long)lo, rr, cr, edge, pad" +
         tail + ");\n  }\n}\n";
    return s;
  }
};

/// The interior of one part of a MapOverlap on a matrix, on OpenCL devices: the elements whose window
/// lies in the part's rows and the matrix's columns, F on the input in place (or, column-wise, on the
/// column's elements from it), with no test for an edge. MapOverlapMatrixKernel then does the frame
/// alone (frame_only). In one kernel the edges' gathering kept PoCL from vectorizing the interior as
/// it does a plain stencil (1.8-1.9x a hand-written kernel's time, 513 x 513 Jacobi). Launched over
/// (count - 2 rr) rows of (cols - 2 cr) elements (rows_launch).
template <class F, class T, bool TwoD>
struct MapOverlapMatrixInterior {
  template <class... U>
  static const Kernel& get() {
    static const Kernel k = [] {
      Kernel kernel;
      kernel.name = name();
      kernel.opencl_source = opencl<U...>();
      return kernel;
    }();
    return k;
  }

  static std::string name() {
    return std::string(TwoD ? "hdsm_mapoverlap2d_interior_" : "hdsm_mapoverlap_matrix_interior_") + F::name;
  }

  /// Whether the interior kernel serves a call of these radii: F takes the input in place (its
  /// window only indexed), or the call is column-wise.
  static bool serves(std::size_t rr, std::size_t cr) {
    return (!TwoD && cr == 0 && rr > 0) || opencl_window_in_place<F>();
  }

  template <class... U>
  static std::string opencl() {
    const std::string type = opencl_type<T>();
    const bool in_place = opencl_window_in_place<F>();
    std::string s = opencl_prelude<T, U...>() + F::opencl_source + "\n" +
                    (in_place ? opencl_global_variant<F>() : std::string()) +
                    (in_place && !TwoD ? opencl_strided_variant<F>() : std::string()) + "__kernel void " +
                    name() + "(__global " + type + "* out, __global const " + type +
                    "* part, ulong cols, ulong count, ulong row_radius, ulong col_radius";
    const auto [uniform_params, tail] = opencl_uniforms<U...>();
    s += uniform_params;
    s += ") {\n  const ulong x = get_global_id(0) + col_radius;\n  if (x + col_radius >= cols) return;\n"
         "  const ulong y = get_global_id(2) * get_global_size(1) + get_global_id(1) + row_radius;\n"
         "  if (y + row_radius >= count) return;\n  const long nc = (long)cols;\n";
    if (TwoD)
      s += std::string("  out[y * cols + x] = ") + F::name + "_global(part + y * nc + x, nc" + tail +
           ");\n}\n";
    else
      s += "  if (col_radius == 0 && row_radius > 0) {\n" +
           (in_place ? "    out[y * cols + x] = " + std::string(F::name) + "_strided(part + y * nc + x, nc" +
                           tail + ");\n    return;\n"
                     : "    const long rr = (long)row_radius;\n    " + type + " window[" +
                           std::to_string(2 * kMaxOverlap + 1) +
                           "];\n    for (long di = -rr; di <= rr; ++di) window[di + rr] = part[((long)y + "
                           "di) * nc + "
                           "(long)x];\n    out[y * cols + x] = " +
                           F::name + "(window + rr" + tail + ");\n    return;\n") +
           "  }\n" +
           (opencl_window_in_place<F>() ? std::string("  out[y * cols + x] = ") + F::name +
                                              "_global(part + y * nc + x" + tail + ");\n"
                                        : std::string()) +
           "}\n";
    return s;
  }
};

/// MapOverlap on a matrix: runs MapOverlapMatrixKernel<F, T, TwoD> over `out` from `in` with radii
/// rr (rows) and cr (columns), on the host or split by rows over devices (each part reading its rows
/// and rr more on each side, and in cyclic mode the part at an end also the other end's rr rows).
template <class F, bool TwoD, class T, class... U>
void run_overlap_matrix(const std::string& name, std::optional<SkeletonBackend> backend_chosen,
                        const std::vector<unsigned>& chosen, const SplitChoice& split, Matrix<T>& out,
                        Matrix<T>& in, std::size_t rr, std::size_t cr, Edge edge, T pad,
                        const std::tuple<U...>& u) {
  if (&out == &in) throw InvalidArgument(name + ": out and in must be different matrices");
  if (out.rows() != in.rows() || out.cols() != in.cols())
    throw InvalidArgument(name + ": out is " + std::to_string(out.rows()) + " x " +
                          std::to_string(out.cols()) + ", in " + std::to_string(in.rows()) + " x " +
                          std::to_string(in.cols()));
  const std::size_t rows = in.rows(), cols = in.cols();
  if (rows == 0 || cols == 0) return;
  if (rr > rows || cr > cols) {
    // Rows-wise and column-wise forms have one radius: name only that one.
    const std::string radius = rr == 0 ? std::to_string(cr) + " columns"
                               : cr == 0
                                   ? std::to_string(rr) + " rows"
                                   : std::to_string(rr) + " rows and " + std::to_string(cr) + " columns";
    throw InvalidArgument(name + ": a radius of " + radius + " is larger than the " + std::to_string(rows) +
                          " x " + std::to_string(cols) + " matrix (a matrix's radius is at most its size)");
  }
  using Kernel_ = MapOverlapMatrixKernel<F, T, TwoD>;
  using Interior = MapOverlapMatrixInterior<F, T, TwoD>;
  using Body = typename Kernel_::template Body<U...>;
  const auto e = static_cast<std::uint64_t>(edge);
  Runtime& rt = in.core().runtime();
  if (skeleton_backend(rt, backend_chosen) == SkeletonBackend::host) {
    const T* src = in.host_range(0, in.size(), Access::read);
    T* dst = out.host_range(0, out.size(), edge == Edge::none ? Access::read_write : Access::write);
    host_for(rt, rows * cols, [&](std::size_t first, std::size_t last) {
      std::apply(
          [&](const U&... v) {
            std::size_t y = first / cols, x = first % cols;
            for (std::size_t t = first; t < last; ++t) {
              Body::element(x, y, dst, src, src, src, src + (rows - rr) * cols, src, rows, cols, 0, rows, 0,
                            rr, cr, e, 0, pad, v...);
              if (++x == cols) {
                x = 0;
                ++y;
              }
            }
          },
          u);
    });
    return;
  }
  const Parts split_parts = skeleton_parts(rt, skeleton_devices(rt, chosen), split, rows);
  const std::vector<unsigned>& devices = split_parts.devices;
  const Kernel& kernel = Kernel_::template get<U...>();
  const bool cyclic = edge == Edge::cyclic && rr > 0;
  held_launches([&](HeldLaunches& run) {
    for (std::size_t part = 0; part < devices.size(); ++part) {
      const std::size_t first = split_parts.first(part);
      const std::size_t last = split_parts.last(part);
      if (first == last) continue;
      const std::size_t lo = first > rr ? first - rr : 0;
      const std::size_t hi = std::min(rows, last + rr);
      // The input's part has the output part's extent: last step's output part on this device is this
      // step's input part, with no copy; the rr rows on each side come from their neighbours.
      const auto part_in = in.submatrix(first, 0, last - first, cols);
      const auto top = lo < first ? in.submatrix(lo, 0, first - lo, cols) : part_in;
      const auto bottom = hi > last ? in.submatrix(last, 0, hi - last, cols) : part_in;
      const auto before = cyclic && first < rr ? in.submatrix(rows - rr, 0, rr, cols) : part_in;
      const auto after = cyclic && last + rr > rows ? in.submatrix(0, 0, rr, cols) : part_in;
      const auto mine = out.submatrix(first, 0, last - first, cols);
      auto args =
          std::tuple_cat(std::make_tuple(hdsm::in(part_in), hdsm::in(top), hdsm::in(bottom), hdsm::in(before),
                                         hdsm::in(after), std::uint64_t{rows}, std::uint64_t{cols},
                                         std::uint64_t{first}, std::uint64_t{last - first}, std::uint64_t{lo},
                                         std::uint64_t{rr}, std::uint64_t{cr}, e, std::uint64_t{0}, pad),
                         u);
      const std::size_t count = last - first;
      // On OpenCL, the interior by a kernel of its own, then the frame (MapOverlapMatrixInterior).
      if (rt.devices()[devices[part]]->properties().backend == Backend::opencl && count > 2 * rr &&
          cols > 2 * cr && Interior::serves(rr, cr)) {
        std::apply(
            [&](const U&... v) {
              const Launch inner = rows_launch(count - 2 * rr, cols - 2 * cr);
              if (edge == Edge::none)
                run(devices[part], Interior::template get<U...>(), inner, hdsm::inout(mine),
                    hdsm::in(part_in), std::uint64_t{cols}, std::uint64_t{count}, std::uint64_t{rr},
                    std::uint64_t{cr}, v...);
              else
                run(devices[part], Interior::template get<U...>(), inner, hdsm::out(mine), hdsm::in(part_in),
                    std::uint64_t{cols}, std::uint64_t{count}, std::uint64_t{rr}, std::uint64_t{cr}, v...);
            },
            u);
        std::get<13>(args) = 1;  // frame_only: the other kernel wrote the interior
        const std::uint64_t frame = 2 * rr * cols + (count - 2 * rr) * 2 * cr;
        if (frame != 0)
          std::apply(
              [&](auto&... a) { run(devices[part], kernel, cover(frame, 64), hdsm::inout(mine), a...); },
              args);
        continue;
      }
      // Edge::none leaves the edge elements as they are: the output is read too.
      std::apply(
          [&](auto&... a) {
            if (edge == Edge::none)
              run(devices[part], kernel, rows_launch(count, cols), hdsm::inout(mine), a...);
            else
              run(devices[part], kernel, rows_launch(count, cols), hdsm::out(mine), a...);
          },
          args);
    }
  });
}

}  // namespace detail

namespace detail {

/// What MapOverlap and MapOverlap2D are told beyond where they run: the edge mode and the pad value.
template <class Derived>
// NOLINTNEXTLINE(bugprone-crtp-constructor-accessibility): MapOverlap and MapOverlap2D derive from it
class EdgeOptions : public SkeletonOptions<Derived> {
 public:
  Derived& edge(Edge edge) {
    edge_ = edge;
    return static_cast<Derived&>(*this);
  }
  /// The value Edge::pad reads beyond the data (kept as a double: exact for integers up to 2^53).
  template <class T>
  Derived& pad(const T& value) {
    pad_ = static_cast<double>(value);
    return static_cast<Derived&>(*this);
  }

 protected:
  Edge edge_ = Edge::duplicate;
  double pad_ = 0;
};

}  // namespace detail

/// MapOverlap (1D): out[i] = F(w, uniforms...) where w points at element i of a window of the input,
/// w[-radius] .. w[radius] (F's first parameter is `const T*`, no HDSM_GLOBAL: the input itself
/// where the window lies in the part, a private copy of it near the ends; F reads nothing beyond it).
/// `.overlap(r)` sets the radius (default 1, at most 32), `.edge(mode)` what the window holds beyond the
/// vector's ends (default Edge::duplicate; Edge::pad reads `.pad(value)`). On N devices each part reads its
/// elements and `radius` more on each side (and, cyclic, the other end's `radius` elements): the containers
/// fetch these halos from where they are valid. The output is a different vector of the same size. Calls are
/// asynchronous on devices.
template <class F>
class MapOverlap : public detail::EdgeOptions<MapOverlap<F>> {
 public:
  MapOverlap& overlap(std::size_t radius) {
    if (radius > detail::kMaxOverlap)
      throw InvalidArgument(std::string("hdsm::MapOverlap<") + F::name + ">: overlap " +
                            std::to_string(radius) + " is above the largest, " +
                            std::to_string(detail::kMaxOverlap));
    radius_ = radius;
    return *this;
  }

  /// Row-wise on a matrix: out(i, j) = F(w, uniforms...), w[-r] .. w[r] the elements of row i of
  /// `in` around column j (beyond its ends as the edge mode says). On N devices the rows are split.
  template <class T, class... Args>
  void rows(Matrix<T>& out, Matrix<T>& in, Args&&... uniforms) {
    on_matrix(true, out, in, std::make_index_sequence<sizeof...(Args)>{}, std::forward<Args>(uniforms)...);
  }
  /// Column-wise on a matrix: w[-r] .. w[r] the elements of column j around row i. On N devices the
  /// rows are split, each part reading r more rows on each side.
  template <class T, class... Args>
  void cols(Matrix<T>& out, Matrix<T>& in, Args&&... uniforms) {
    on_matrix(false, out, in, std::make_index_sequence<sizeof...(Args)>{}, std::forward<Args>(uniforms)...);
  }

  template <class O, class V, class... Args>
  requires(detail::is_operand<O>&& detail::is_operand<V>) void operator()(O&& out, V&& in,
                                                                          Args&&... uniforms) {
    using T = detail::operand_element_t<V>;
    static_assert(std::is_same_v<detail::operand_element_t<O>, T>,
                  "hdsm::MapOverlap: out and in have one element type");
    // A window over a matrix's elements in row-major order would run across the rows' ends.
    static_assert(
        !detail::is_matrix<std::remove_cvref_t<O>> && !detail::is_matrix<std::remove_cvref_t<V>>,
        "hdsm::MapOverlap: a whole matrix takes a matrix form: mo.rows(out, in) or mo.cols(out, in) "
        "(windows along rows or columns), or hdsm::MapOverlap2D; a row is a 1D operand (m.row(i))");
    using Params = detail::user_parameters<F>;
    static_assert(std::tuple_size_v<Params> == 1 + sizeof...(Args),
                  "hdsm::MapOverlap: the user function takes the window, then one argument per uniform");
    static_assert(
        std::is_same_v<std::tuple_element_t<0, Params>, const T*>,
        "hdsm::MapOverlap: the user function's first parameter is const T*, T the vector's element type");
    call(detail::output_slice_of(out, "hdsm::MapOverlap<", F::name),
         detail::slice_of(in, "hdsm::MapOverlap<", F::name), std::make_index_sequence<sizeof...(Args)>{},
         std::forward<Args>(uniforms)...);
  }

 private:
  template <class T, std::size_t... J, class... Args>
  void call(const detail::Slice<T>& out, const detail::Slice<T>& in, std::index_sequence<J...>,
            Args&&... uniforms) {
    using Params = detail::user_parameters<F>;
    const std::tuple<std::tuple_element_t<1 + J, Params>...> u(std::forward<Args>(uniforms)...);
    const std::string name = std::string("hdsm::MapOverlap<") + F::name + ">";
    if (out.id().overlaps(in.id()))
      throw InvalidArgument(name + ": out and in must be different vectors (or ranges apart)");
    if (out.size() != in.size())
      throw InvalidArgument(name + ": out has " + std::to_string(out.size()) + " elements, in " +
                            std::to_string(in.size()));
    const std::size_t n = in.size();
    const std::size_t r = radius_;
    if (n == 0) return;
    if (this->edge_ == Edge::cyclic && r > n)
      throw InvalidArgument(name + ": a cyclic overlap of " + std::to_string(r) +
                            " needs at least as many elements, not " + std::to_string(n));
    const T pad = static_cast<T>(this->pad_);
    Runtime& rt = in.core().runtime();
    const auto e = static_cast<std::uint64_t>(this->edge_);
    using Body =
        typename detail::MapOverlapKernel<F, T>::template Body<std::tuple_element_t<1 + J, Params>...>;
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const T* src = in.host_range(0, n, Access::read);
      T* dst = out.host_range(0, n, this->edge_ == Edge::none ? Access::read_write : Access::write);
      detail::host_for(rt, n, [&](std::size_t first, std::size_t last) {
        std::apply(
            [&](const auto&... v) {
              Body::range(first, last, dst, src, src, src, r <= n ? src + (n - r) : src, src, n, 0, n, 0, r,
                          e, pad, v...);
            },
            u);
      });
      return;
    }
    const detail::Parts split_parts = this->parts(rt, n);
    const std::vector<unsigned>& devices = split_parts.devices;
    const Kernel& kernel =
        detail::MapOverlapKernel<F, T>::template get<std::tuple_element_t<1 + J, Params>...>();
    const bool cyclic = this->edge_ == Edge::cyclic && r > 0;
    detail::held_launches([&](detail::HeldLaunches& run) {
      for (std::size_t part = 0; part < devices.size(); ++part) {
        const std::size_t first = split_parts.first(part);
        const std::size_t last = split_parts.last(part);
        if (first == last) continue;
        const std::size_t lo = first > r ? first - r : 0;
        const std::size_t hi = std::min(n, last + r);
        // The input's part has the output part's extent (last step's output there is this step's input,
        // with no copy); the r elements on each side, and the wrapped ones only where a cyclic window
        // leaves the vector, are their own operands.
        auto part_in = in.range(first, last - first);
        auto top = lo < first ? in.range(lo, first - lo) : part_in;
        auto bottom = hi > last ? in.range(last, hi - last) : part_in;
        auto before = cyclic && first < r ? in.range(n - r, r) : part_in;
        auto after = cyclic && last + r > n ? in.range(0, r) : part_in;
        // Edge::none leaves the edge elements as they are: the output is read too.
        const auto go = [&](auto&& result) {
          std::apply(
              [&](const auto&... v) {
                run(devices[part], kernel, cover(last - first), result, hdsm::in(part_in), hdsm::in(top),
                    hdsm::in(bottom), hdsm::in(before), hdsm::in(after), std::uint64_t{n},
                    std::uint64_t{first}, std::uint64_t{last - first}, std::uint64_t{lo}, std::uint64_t{r}, e,
                    pad, v...);
              },
              u);
        };
        if (this->edge_ == Edge::none)
          go(hdsm::inout(out.range(first, last - first)));
        else
          go(hdsm::out(out.range(first, last - first)));
      }
    });
  }

  template <class T, std::size_t... J, class... Args>
  void on_matrix(bool by_rows, Matrix<T>& out, Matrix<T>& in, std::index_sequence<J...>, Args&&... uniforms) {
    using Params = detail::user_parameters<F>;
    static_assert(std::tuple_size_v<Params> == 1 + sizeof...(Args),
                  "hdsm::MapOverlap: the user function takes the window, then one argument per uniform");
    static_assert(
        std::is_same_v<std::tuple_element_t<0, Params>, const T*>,
        "hdsm::MapOverlap: the user function's first parameter is const T*, T the matrix's element type");
    const std::tuple<std::tuple_element_t<1 + J, Params>...> u(std::forward<Args>(uniforms)...);
    detail::run_overlap_matrix<F, false>(
        std::string("hdsm::MapOverlap<") + F::name + ">::" + (by_rows ? "rows" : "cols"), this->backend_,
        this->devices_, this->split_, out, in, by_rows ? 0 : radius_, by_rows ? radius_ : 0, this->edge_,
        static_cast<T>(this->pad_), u);
  }

  std::size_t radius_ = 1;
};

/// MapOverlap2D: out(i, j) = F(w, stride, uniforms...) for a matrix, where w points at element (i,
/// j) of a window of `in`: w[di * stride + dj] is in(i + di, j + dj) for |di| <= the row radius and
/// |dj| <= the column radius (F's first two parameters are `const T*` and `long`: the input itself
/// and its row length where the window lies in the part, a private copy and 2 * column radius + 1
/// near the edges; F indexes with the stride it gets). `.overlap(rows, cols)` sets the radii (default 1 and
/// 1, each at most 8), `.edge(mode)` and `.pad(value)` what the window holds beyond the matrix, as
/// MapOverlap's. On N devices the rows are split, and each part reads its rows and `rows` radius more on each
/// side from wherever they are valid. Calls are asynchronous on devices.
template <class F>
class MapOverlap2D : public detail::EdgeOptions<MapOverlap2D<F>> {
 public:
  MapOverlap2D& overlap(std::size_t row_radius, std::size_t col_radius) {
    if (row_radius > detail::kMaxOverlap2D || col_radius > detail::kMaxOverlap2D)
      throw InvalidArgument(std::string("hdsm::MapOverlap2D<") + F::name + ">: overlap " +
                            std::to_string(row_radius) + " x " + std::to_string(col_radius) +
                            " is above the largest, " + std::to_string(detail::kMaxOverlap2D) + " each way");
    row_radius_ = row_radius;
    col_radius_ = col_radius;
    return *this;
  }

  template <class T, class... Args>
  void operator()(Matrix<T>& out, Matrix<T>& in, Args&&... uniforms) {
    using Params = detail::user_parameters<F>;
    static_assert(
        std::tuple_size_v<Params> == 2 + sizeof...(Args),
        "hdsm::MapOverlap2D: the user function takes the window and its row stride, then one argument "
        "per uniform");
    static_assert(std::is_same_v<std::tuple_element_t<0, Params>, const T*> &&
                      std::is_same_v<std::tuple_element_t<1, Params>, long>,
                  "hdsm::MapOverlap2D: the user function's first parameters are const T* (T the matrix's "
                  "element type) and long (the window's row stride)");
    call(out, in, std::make_index_sequence<sizeof...(Args)>{}, std::forward<Args>(uniforms)...);
  }

 private:
  template <class T, std::size_t... J, class... Args>
  void call(Matrix<T>& out, Matrix<T>& in, std::index_sequence<J...>, Args&&... uniforms) {
    using Params = detail::user_parameters<F>;
    const std::tuple<std::tuple_element_t<2 + J, Params>...> u(std::forward<Args>(uniforms)...);
    detail::run_overlap_matrix<F, true>(std::string("hdsm::MapOverlap2D<") + F::name + ">", this->backend_,
                                        this->devices_, this->split_, out, in, row_radius_, col_radius_,
                                        this->edge_, static_cast<T>(this->pad_), u);
  }

  std::size_t row_radius_ = 1;
  std::size_t col_radius_ = 1;
};

/// MapReduce: R over M(in0[i], in1[i], ..., uniforms...) for every i, without storing the mapped
/// vector: Reduce<R> of Map<M>'s output, in one pass. R is associative and takes two of M's results;
/// the inputs (1 to N vectors of one size) and uniforms are checked against M as Map's are. Chunks
/// are combined in element order, as Reduce's: an exact R gives the same result on any number of
/// devices. The call waits for the result.
template <class M, class R>
class MapReduce : public detail::SkeletonOptions<MapReduce<M, R>> {
 public:
  using result_type = typename detail::function_traits<decltype(&M::call)>::result;

  /// Chunks per device part (threads of the kernel); default 256.
  MapReduce& chunks(std::size_t chunks) {
    chunks_ = chunks == 0 ? 1 : chunks;
    return *this;
  }
  /// The value the reduction starts from: the result is R(start, ...), and start for empty inputs
  /// (which are an InvalidArgument without one).
  MapReduce& start_value(const result_type& start) {
    start_ = start;
    has_start_ = true;
    return *this;
  }

  /// The reduction; waits for it.
  template <class... A>
  result_type operator()(A&&... args) {
    return async(std::forward<A>(args)...).get();
  }

  /// The same, returning once the devices' kernels are enqueued (see Reduce::async).
  template <class... A>
  Future<result_type> async(A&&... args) {
    constexpr std::size_t inputs = detail::leading_vectors<A...>();
    using Params = detail::user_parameters<M>;
    using RParams = detail::user_parameters<R>;
    static_assert(inputs >= 1, "hdsm::MapReduce: give at least one input vector");
    static_assert(std::tuple_size_v<Params> == sizeof...(A),
                  "hdsm::MapReduce: the map function takes one argument per input vector and per uniform");
    static_assert(std::tuple_size_v<RParams> == 2 &&
                      std::is_same_v<std::tuple_element_t<0, RParams>, result_type> &&
                      std::is_same_v<std::tuple_element_t<1, RParams>, result_type>,
                  "hdsm::MapReduce: the reduce function takes two results of the map function");
    auto all = std::forward_as_tuple(args...);
    return call<inputs>(all, std::make_index_sequence<inputs>{},
                        std::make_index_sequence<sizeof...(A) - inputs>{});
  }

 private:
  template <std::size_t Inputs, class Tuple, std::size_t... I, std::size_t... J>
  Future<result_type> call(Tuple& all, std::index_sequence<I...>, std::index_sequence<J...>) {
    using Params = detail::user_parameters<M>;
    static_assert((std::is_same_v<detail::operand_element_t<std::tuple_element_t<I, Tuple>>,
                                  std::tuple_element_t<I, Params>> &&
                   ...),
                  "hdsm::MapReduce: an input's elements are not of the map function's parameter type");
    const std::tuple<std::tuple_element_t<Inputs + J, Params>...> u(std::get<Inputs + J>(all)...);
    detail::check_matrix_shapes("hdsm::MapReduce<", M::name, std::get<I>(all)...);
    return run(u, detail::slice_of(std::get<I>(all), "hdsm::MapReduce<", M::name)...);
  }

  template <class... U, class... T>
  Future<result_type> run(const std::tuple<U...>& u, const detail::Slice<T>&... in) {
    const std::size_t n = std::get<0>(std::tie(in...)).size();
    if (((in.size() != n) || ...))
      throw InvalidArgument(std::string("hdsm::MapReduce<") + M::name + ", " + R::name + ">: inputs of " +
                            std::to_string(std::min({in.size()...})) + " and " +
                            std::to_string(std::max({in.size()...})) + " elements");
    if (n == 0) {
      if (has_start_) return Future<result_type>(start_);
      throw InvalidArgument(std::string("hdsm::MapReduce<") + M::name + ", " + R::name +
                            ">: empty inputs have no reduction (give a start value)");
    }
    Runtime& rt = std::get<0>(std::tie(in...)).core().runtime();
    std::vector<result_type> partial;
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const std::tuple<const T*...> src{in.host_range(0, n, Access::read)...};
      partial.resize(detail::host_chunk_count(rt, n));
      std::vector<char> used(partial.size(), 0);
      detail::host_chunks(rt, n, [&](std::size_t c, std::size_t first, std::size_t last) {
        std::apply(
            [&](const T*... p) {
              std::apply(
                  [&](const U&... v) {
                    result_type acc = M::call(p[first]..., v...);
                    for (std::size_t i = first + 1; i < last; ++i) acc = R::call(acc, M::call(p[i]..., v...));
                    partial[c] = acc;
                  },
                  u);
            },
            src);
        used[c] = 1;
      });
      std::vector<result_type> kept;
      for (std::size_t c = 0; c < partial.size(); ++c)
        if (used[c]) kept.push_back(partial[c]);
      return Future<result_type>(combine(kept, has_start_, start_));
    }
    const detail::Parts split_parts = this->parts(rt, n);
    const std::vector<unsigned>& devices = split_parts.devices;
    auto partials = std::make_shared<std::vector<Vector<result_type>>>();
    for (std::size_t part = 0; part < devices.size(); ++part) {
      const std::size_t first = split_parts.first(part);
      const std::size_t last = split_parts.last(part);
      if (first == last) continue;
      const std::size_t chunk = detail::ceil_div(last - first, chunks_);  // no wrap for a huge chunks()
      const std::size_t count = (last - first + chunk - 1) / chunk;
      partials->emplace_back(count, ContainerOptions{&rt});
      auto args = std::tuple_cat(std::make_tuple(hdsm::out(partials->back())),
                                 std::make_tuple(hdsm::in(in.range(first, last - first))...),
                                 std::make_tuple(std::uint64_t{last - first}, std::uint64_t{chunk}), u);
      std::apply(
          [&](auto&... a) {
            launch(devices[part], detail::MapReduceKernel<M, R, result_type, T...>::template get<U...>(),
                   cover(count), a...);
          },
          args);
    }
    return Future<result_type>(
        std::function<result_type()>([partials, has_start = has_start_, start = start_] {
          std::vector<result_type> all;
          for (Vector<result_type>& p : *partials) {
            const result_type* r = p.host_range(0, p.size(), Access::read);
            all.insert(all.end(), r, r + p.size());
          }
          return combine(all, has_start, start);
        }));
  }

  static result_type combine(const std::vector<result_type>& partial, bool has_start,
                             const result_type& start) {
    result_type acc = has_start ? R::call(start, partial.front()) : partial.front();
    for (std::size_t i = 1; i < partial.size(); ++i) acc = R::call(acc, partial[i]);
    return acc;
  }

  std::size_t chunks_ = 256;
  result_type start_{};
  bool has_start_ = false;
};

/// Whether a scan's element i includes in[i] (inclusive) or ends just before it (exclusive).
enum class ScanMode : std::uint8_t { inclusive, exclusive };

namespace detail {

/// Scan's two kernels over one part in chunks: `local` scans chunk j of `in` into `out` (inclusive,
/// from the chunk's first element) and leaves its total in totals[j]; `apply` combines chunk j with
/// offsets[j], the scan of everything before it (skipping chunk 0 when `skip_first`), and for an
/// exclusive scan shifts it by one element, offsets[j] first.
template <class F, class T>
struct ScanKernels {
  struct Local {
    HDSM_HOST_DEVICE static void element(std::uint64_t j, const T* in, T* out, T* totals, std::uint64_t n,
                                         std::uint64_t chunk) {
      const std::uint64_t first = j * chunk;
      if (first >= n) return;
      const std::uint64_t last = first + chunk < n ? first + chunk : n;
      T acc = in[first];
      out[first] = acc;
      for (std::uint64_t i = first + 1; i < last; ++i) out[i] = acc = F::call(acc, in[i]);
      totals[j] = acc;
    }
  };
  struct Apply {
    HDSM_HOST_DEVICE static void element(std::uint64_t j, T* out, const T* offsets, std::uint64_t n,
                                         std::uint64_t chunk, std::uint64_t skip_first,
                                         std::uint64_t exclusive) {
      const std::uint64_t first = j * chunk;
      if (first >= n) return;
      const std::uint64_t last = first + chunk < n ? first + chunk : n;
      if (exclusive != 0) {
        for (std::uint64_t i = last - 1; i > first; --i) out[i] = F::call(offsets[j], out[i - 1]);
        out[first] = offsets[j];
      } else if (j != 0 || skip_first == 0) {
        for (std::uint64_t i = first; i < last; ++i) out[i] = F::call(offsets[j], out[i]);
      }
    }
  };

  static const Kernel& local() {
    static const Kernel k = [] {
      Kernel kernel = skeleton_kernel<Local, const T*, T*, T*, std::uint64_t, std::uint64_t>(
          std::string("hdsm_scan_local_") + F::name);
      const std::string type = opencl_type<T>();
      kernel.opencl_source =
          opencl_prelude<T>() + F::opencl_source + "\n__kernel void hdsm_scan_local_" + F::name +
          "(__global const " + type + "* in, __global " + type + "* out, __global " + type +
          "* totals, ulong n, ulong chunk) {\n  const ulong j = get_global_id(0);\n  const ulong first = j * "
          "chunk;\n"
          "  if (first >= n) return;\n  const ulong last = first + chunk < n ? first + chunk : n;\n  " +
          type +
          " acc = in[first];\n  out[first] = acc;\n  for (ulong i = first + 1; i < last; ++i) out[i] = acc "
          "= " +
          F::name + "(acc, in[i]);\n  totals[j] = acc;\n}\n";
      return kernel;
    }();
    return k;
  }

  static const Kernel& apply() {
    static const Kernel k = [] {
      Kernel kernel =
          skeleton_kernel<Apply, T*, const T*, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>(
              std::string("hdsm_scan_apply_") + F::name);
      const std::string type = opencl_type<T>();
      kernel.opencl_source =
          opencl_prelude<T>() + F::opencl_source + "\n__kernel void hdsm_scan_apply_" + F::name +
          "(__global " + type + "* out, __global const " + type +
          "* offsets, ulong n, ulong chunk, ulong skip_first, ulong exclusive) {\n"
          "  const ulong j = get_global_id(0);\n  const ulong first = j * chunk;\n  if (first >= n) return;\n"
          "  const ulong last = first + chunk < n ? first + chunk : n;\n"
          "  if (exclusive != 0) {\n    for (ulong i = last - 1; i > first; --i) out[i] = " +
          F::name +
          "(offsets[j], out[i - 1]);\n    out[first] = offsets[j];\n"
          "  } else if (j != 0 || skip_first == 0) {\n    for (ulong i = first; i < last; ++i) out[i] = " +
          F::name + "(offsets[j], out[i]);\n  }\n}\n";
      return kernel;
    }();
    return k;
  }
};

}  // namespace detail

/// Scan: out[i] = F(in[0], ..., in[i]) (inclusive) or F(start, in[0], ..., in[i - 1]) (exclusive,
/// out[0] = start) for an associative F taking two elements. In chunks, on the host's worker threads
/// or on each device's part: every chunk is scanned on its own, the chunks' totals are combined on
/// the host in element order, and each chunk then takes the scan of all before it; an exact F gives
/// the same result on any number of devices. The call returns once its kernels are done.
template <class F>
class Scan : public detail::SkeletonOptions<Scan<F>> {
 public:
  Scan& mode(ScanMode mode) {
    mode_ = mode;
    return *this;
  }
  /// Chunks per device part; default 256.
  Scan& chunks(std::size_t chunks) {
    chunks_ = chunks == 0 ? 1 : chunks;
    return *this;
  }

  /// Inclusive scan of `in` into `out` (the same size; different vectors). An exclusive scan needs a
  /// start value: InvalidArgument without one.
  template <class O, class V>
  requires(detail::is_operand<O>&& detail::is_operand<V>) void operator()(O&& out, V&& in) {
    using T = detail::operand_element_t<V>;
    if (mode_ == ScanMode::exclusive)
      throw InvalidArgument(std::string("hdsm::Scan<") + F::name +
                            ">: an exclusive scan starts from a value: give one, scan(out, in, start)");
    detail::check_matrix_shapes("hdsm::Scan<", F::name, out, in);
    run(detail::output_slice_of(out, "hdsm::Scan<", F::name), detail::slice_of(in, "hdsm::Scan<", F::name),
        static_cast<const T*>(nullptr));
  }
  /// The scan starting from `start`: out[i] = F(start, in[0], ..., in[i]) inclusive, or the exclusive
  /// scan with out[0] = start.
  template <class O, class V>
  requires(detail::is_operand<O>&& detail::is_operand<V>) void operator()(
      O&& out, V&& in, const detail::operand_element_t<V>& start) {
    detail::check_matrix_shapes("hdsm::Scan<", F::name, out, in);
    run(detail::output_slice_of(out, "hdsm::Scan<", F::name), detail::slice_of(in, "hdsm::Scan<", F::name),
        &start);
  }

 private:
  template <class T, class U>
  void run(const detail::Slice<U>& out, const detail::Slice<T>& in, const T* start) {
    static_assert(std::is_same_v<T, U>, "hdsm::Scan: out and in have one element type");
    using Params = detail::user_parameters<F>;
    static_assert(std::tuple_size_v<Params> == 2 && std::is_same_v<std::tuple_element_t<0, Params>, T> &&
                      std::is_same_v<std::tuple_element_t<1, Params>, T>,
                  "hdsm::Scan: the user function takes two elements of the vectors' type");
    const std::string name = std::string("hdsm::Scan<") + F::name + ">";
    if (out.id().overlaps(in.id()))
      throw InvalidArgument(name + ": out and in must be different vectors (or ranges apart)");
    if (out.size() != in.size())
      throw InvalidArgument(name + ": out has " + std::to_string(out.size()) + " elements, in " +
                            std::to_string(in.size()));
    const std::size_t n = in.size();
    if (n == 0) return;
    const bool exclusive = mode_ == ScanMode::exclusive;
    Runtime& rt = in.core().runtime();
    if (detail::skeleton_backend(rt, this->backend_) == SkeletonBackend::host) {
      const T* src = in.host_range(0, n, Access::read);
      T* dst = out.host_range(0, n, Access::write);
      std::vector<T> totals(detail::host_chunk_count(rt, n));
      std::vector<std::pair<std::size_t, std::size_t>> bounds(totals.size(), {0, 0});
      detail::host_chunks(rt, n, [&](std::size_t c, std::size_t first, std::size_t last) {
        T acc = src[first];
        dst[first] = acc;
        for (std::size_t i = first + 1; i < last; ++i) dst[i] = acc = F::call(acc, src[i]);
        totals[c] = acc;
        bounds[c] = {first, last};
      });
      const std::vector<T> offsets = offsets_of(totals, bounds, start);
      detail::host_chunks(rt, n, [&](std::size_t c, std::size_t first, std::size_t last) {
        if (exclusive) {
          for (std::size_t i = last - 1; i > first; --i) dst[i] = F::call(offsets[c], dst[i - 1]);
          dst[first] = offsets[c];
        } else if (c != 0 || start != nullptr) {
          for (std::size_t i = first; i < last; ++i) dst[i] = F::call(offsets[c], dst[i]);
        }
      });
      return;
    }
    const detail::Parts split_parts = this->parts(rt, n);
    const std::vector<unsigned>& devices = split_parts.devices;
    // Each part scans its chunks (local), the host turns the chunks' totals into offsets, and each
    // part adds its chunks' offsets (apply). Every operand of both launches is held from the start: out
    // is not evicted between them (and so cannot fail to come back), and one that does not fit fails
    // the call with out as it was.
    struct Part {
      unsigned device;
      std::size_t first, last, chunk, count;
      Vector<T> totals, offsets;
    };
    std::vector<Part> parts;
    parts.reserve(devices.size());
    for (std::size_t p = 0; p < devices.size(); ++p) {
      const std::size_t first = split_parts.first(p);
      const std::size_t last = split_parts.last(p);
      if (first == last) continue;
      const std::size_t chunk = detail::ceil_div(last - first, chunks_);  // no wrap for a huge chunks()
      const std::size_t count = (last - first + chunk - 1) / chunk;
      parts.push_back({devices[p], first, last, chunk, count, Vector<T>(count, ContainerOptions{&rt}),
                       Vector<T>(count, ContainerOptions{&rt})});
    }
    detail::DeviceHolds holds;  // after the parts: it goes first
    for (Part& part : parts)
      holds.add(part.device, hdsm::in(in.range(part.first, part.last - part.first)),
                hdsm::out(out.range(part.first, part.last - part.first)), hdsm::out(part.totals),
                hdsm::in(part.offsets));
    for (Part& part : parts)
      launch(part.device, detail::ScanKernels<F, T>::local(), cover(part.count),
             hdsm::in(in.range(part.first, part.last - part.first)),
             hdsm::out(out.range(part.first, part.last - part.first)), hdsm::out(part.totals),
             std::uint64_t{part.last - part.first}, std::uint64_t{part.chunk});
    // Every chunk's total, in element order, gives each chunk the scan of all before it.
    std::vector<T> totals;
    std::vector<std::pair<std::size_t, std::size_t>> bounds;
    for (Part& part : parts) {
      const T* t = part.totals.host_range(0, part.count, Access::read);
      for (std::size_t j = 0; j < part.count; ++j) {
        totals.push_back(t[j]);
        bounds.emplace_back(j, j + 1);  // every chunk holds elements
      }
    }
    const std::vector<T> offsets = offsets_of(totals, bounds, start);
    std::size_t at = 0;
    for (Part& part : parts) {
      std::copy_n(offsets.begin() + static_cast<std::ptrdiff_t>(at), part.count,
                  part.offsets.host_range(0, part.count, Access::write));
      launch(part.device, detail::ScanKernels<F, T>::apply(), cover(part.count),
             hdsm::inout(out.range(part.first, part.last - part.first)), hdsm::in(part.offsets),
             std::uint64_t{part.last - part.first}, std::uint64_t{part.chunk},
             std::uint64_t{at == 0 && start == nullptr ? 1u : 0u}, std::uint64_t{exclusive ? 1u : 0u});
      at += part.count;
    }
  }

  /// offsets[c]: the scan of every element before chunk c (start first where given); chunks without
  /// elements (bounds first == last) are skipped. offsets[0] is start (or unused without one).
  template <class T>
  static std::vector<T> offsets_of(const std::vector<T>& totals,
                                   const std::vector<std::pair<std::size_t, std::size_t>>& bounds,
                                   const T* start) {
    std::vector<T> offsets(totals.size());
    bool have = start != nullptr;
    T acc = have ? *start : T{};
    for (std::size_t c = 0; c < totals.size(); ++c) {
      if (bounds[c].first == bounds[c].second) continue;
      offsets[c] = acc;
      acc = have ? F::call(acc, totals[c]) : totals[c];
      have = true;
    }
    return offsets;
  }

  ScanMode mode_ = ScanMode::inclusive;
  std::size_t chunks_ = 256;
};

/// Where a Farm task runs: on a device (`device`, a runtime device index) or on the host.
struct FarmPlace {
  SkeletonBackend backend = SkeletonBackend::host;
  unsigned device = 0;
  /// The skeleton options that run a skeleton here: skeleton.backend(p.backend).devices({p.device}).
  template <class S>
  S& on(S& skeleton) const {
    skeleton.backend(backend);
    if (backend == SkeletonBackend::devices) skeleton.devices({device});
    return skeleton;
  }
};

/// Farm: independent tasks run in parallel, one worker per device of the call (.devices(...), else
/// HDSM_SKELETON_DEVICES) and one on the host (unless .host(false); only the host with
/// .backend(SkeletonBackend::host)). A worker takes the next task as soon as its last is done, so
/// faster places take more tasks; each task gets its place and runs skeletons, kernels or host code
/// there (FarmPlace::on). The call returns once every task is done, and rethrows the first task's
/// exception after the others have finished.
class Farm : public detail::SkeletonOptions<Farm> {
 public:
  using Task = std::function<void(const FarmPlace&)>;
  Farm& host(bool with_host) {
    host_ = with_host;
    return *this;
  }
  /// Runs `tasks` on the places of `runtime`; returns how many tasks each place ran, in the order
  /// devices first (as chosen), then the host.
  std::vector<std::size_t> operator()(Runtime& runtime, const std::vector<Task>& tasks);

 private:
  bool host_ = true;
};

}  // namespace hdsm
HDSM_VISIBLE_END
