// hdsm::Vector<T>: a std::vector-like container whose elements live in host memory (the main copy)
// and in any number of partial copies on devices, kept coherent by hdsm. Kernels take a vector, or a
// range of it, through in(), out() and inout() in hdsm::launch; the host reads and writes elements
// through v[i], which makes the accessed element current first. See docs/containers.md.
//
//   hdsm::Vector<float> v(1 << 20, 1.0f);
//   hdsm::launch(0, scale, hdsm::cover(v.size()), hdsm::inout(v), v.size(), 2.0f);  // scale(p, n, a)
//   float x = v[7];  // waits for the kernel and copies back what it needs
#pragma once

#include <hdsm/export.h>
#include <hdsm/container.hpp>
#include <hdsm/error.hpp>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>

HDSM_VISIBLE_BEGIN
namespace hdsm {

template <class T>
class Vector;

/// A random-access iterator over a vector's elements; *it is the vector's element proxy. `v.begin() +
/// k` to `v.end()` also names a part of the vector for a kernel: in(first, last).
template <class T>
class VectorIterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  using reference = typename Vector<T>::reference;
  using pointer = void;

  VectorIterator() = default;
  VectorIterator(Vector<T>* v, std::size_t i) : v_(v), i_(i) {}
  reference operator*() const { return (*v_)[i_]; }
  reference operator[](difference_type d) const { return (*v_)[i_ + static_cast<std::size_t>(d)]; }
  VectorIterator& operator++() {
    ++i_;
    return *this;
  }
  VectorIterator operator++(int) {
    VectorIterator t = *this;
    ++i_;
    return t;
  }
  VectorIterator& operator--() {
    --i_;
    return *this;
  }
  VectorIterator operator--(int) {
    VectorIterator t = *this;
    --i_;
    return t;
  }
  // Modulo 2^64, as an index moved back and forth must be (a negative d adds its two's complement).
  VectorIterator& operator+=(difference_type d) {
    i_ += static_cast<std::size_t>(d);
    return *this;
  }
  VectorIterator& operator-=(difference_type d) {
    i_ -= static_cast<std::size_t>(d);
    return *this;
  }
  friend VectorIterator operator+(VectorIterator it, difference_type d) { return it += d; }
  friend VectorIterator operator+(difference_type d, VectorIterator it) { return it += d; }
  friend VectorIterator operator-(VectorIterator it, difference_type d) { return it -= d; }
  friend difference_type operator-(const VectorIterator& a, const VectorIterator& b) {
    return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
  }
  friend bool operator==(const VectorIterator& a, const VectorIterator& b) {
    return a.i_ == b.i_ && a.v_ == b.v_;
  }
  friend auto operator<=>(const VectorIterator& a, const VectorIterator& b) { return a.i_ <=> b.i_; }

  Vector<T>* container() const { return v_; }
  std::size_t index() const { return i_; }

 private:
  Vector<T>* v_ = nullptr;
  std::size_t i_ = 0;
};

template <class T>
class Vector : public detail::TypedContainer<T> {
  using Base = detail::TypedContainer<T>;

 public:
  using typename Base::reference;
  using iterator = VectorIterator<T>;
  using difference_type = std::ptrdiff_t;

  Vector() : Vector(0) {}
  /// `n` value-initialized elements.
  explicit Vector(std::size_t n, const ContainerOptions& options = {}) : Base("vector", options, n, n) {
    this->construct(0, n);
  }
  Vector(std::size_t n, const T& value, const ContainerOptions& options = {})
      : Base("vector", options, n, n) {
    std::fill_n(this->host(), n, value);
  }
  Vector(std::initializer_list<T> values, const ContainerOptions& options = {})
      : Base("vector", options, values.size(), values.size()) {
    std::copy(values.begin(), values.end(), this->host());
  }
  template <std::input_iterator It>
  Vector(It first, It last, const ContainerOptions& options = {}) : Base("vector", options, 0, 0) {
    if constexpr (std::forward_iterator<It>) {  // one allocation, not one resize per element
      const auto n = static_cast<std::size_t>(std::distance(first, last));
      this->resize_core(n, n);
      std::transform(first, last, this->host(), [](const auto& x) { return static_cast<T>(x); });
    } else {
      for (; first != last; ++first) push_back(static_cast<T>(*first));
    }
  }
  /// A copy of `other`'s current contents (in host memory; no device copies).
  Vector(const Vector& other) : Vector(other.size(), Base::options_of(other)) { this->copy_contents(other); }
  /// `other`'s current contents, on this vector's runtime and with its options.
  Vector& operator=(const Vector& other) {
    if (this != &other) {
      Vector copy(other.size(), this->assigned_options(other));
      copy.copy_contents(other);
      swap(copy);
    }
    return *this;
  }
  /// Moves keep the device copies; the moved-from vector throws on use.
  Vector(Vector&&) noexcept = default;
  Vector& operator=(Vector&&) noexcept = default;
  ~Vector() = default;

  std::size_t capacity() const { return this->core().capacity(); }

  /// Checked element access: makes element i current for the access the proxy sees.
  reference operator[](std::size_t i) { return reference(this, i); }
  T operator[](std::size_t i) const { return this->read(i); }
  /// Unchecked element access: no coherence and no bounds check (after update_host(), or between
  /// host_range() and the next device access).
  T& operator()(std::size_t i) { return this->host_[i]; }
  const T& operator()(std::size_t i) const { return this->host_[i]; }
  T front() const { return (*this)[0]; }
  T back() const { return (*this)[this->size() - 1]; }

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, this->size()); }
  /// Read-only iteration, as over a std::vector: the main copy made current once (a read of every
  /// element), then plain pointers, valid until the vector is next written or resized.
  using const_iterator = const T*;
  const_iterator begin() const { return this->data(); }
  const_iterator end() const { return this->data() + this->size(); }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }

  /// The whole vector and parts of it, for in(), out() and inout().
  Extent whole() const { return Extent::range(0, this->size()); }
  ContainerPart<T> range(std::size_t first, std::size_t n) {
    this->core().check_range(first, n, "range");
    return {&this->core(), Extent::range(first, n)};
  }
  ContainerPart<T, false> range(std::size_t first, std::size_t n) const {
    this->core().check_range(first, n, "range");
    return {&this->core(), Extent::range(first, n)};
  }

  /// Elements [first, first + n) current on `device` for `access`, for a kernel enqueued by hand.
  DeviceView device_view(unsigned device, std::size_t first, std::size_t n, Access access) {
    this->core().check_range(first, n, "device_view");
    return DeviceView(this->core(), device, Extent::range(first, n), access);
  }

  /// As std::vector; a change of size writes modified device copies back and frees them all.
  void resize(std::size_t n) {
    const std::size_t old = this->size();
    this->resize_core(n, n);
    if (n > old) this->construct(old, n);
  }
  void resize(std::size_t n, const T& value) {
    const T fill = value;  // `value` may be an element, which the resize moves
    const std::size_t old = this->size();
    this->resize_core(n, n);
    if (n > old) std::fill(this->host() + old, this->host() + n, fill);
  }
  void reserve(std::size_t n) {
    if (n <= capacity()) return;
    const std::size_t old = this->size();
    this->resize_core(n, n);
    this->resize_core(old, old);
  }
  void push_back(const T& value) {
    const T element = value;  // `value` may be an element, which the resize moves
    const std::size_t n = this->size();
    this->resize_core(n + 1, n + 1);
    this->host()[n] = element;
  }
  void pop_back() {
    if (this->size() == 0) throw InvalidArgument("pop_back of an empty " + this->core().name());
    resize(this->size() - 1);
  }
  void clear() { resize(0); }
  /// Removes elements [first, last); returns an iterator to the element after them.
  iterator erase(iterator first, iterator last) {
    const std::size_t a = first.index();
    const std::size_t b = last.index();
    if (b < a)
      throw InvalidArgument("erase of elements [" + std::to_string(a) + ", " + std::to_string(b) +
                            ") of the " + this->core().name() + ": the last comes before the first");
    this->core().check_range(a, b - a, "erase");
    if (a == b) return iterator(this, a);
    // Refused before any element moves: the resize after the move would refuse it then.
    this->core().check_no_views("erase");
    T* p = this->host_range(0, this->size(), Access::read_write);
    std::memmove(p + a, p + b, (this->size() - b) * sizeof(T));
    this->resize_core(this->size() - (b - a), this->size() - (b - a));
    return iterator(this, a);
  }
  iterator erase(iterator at) { return erase(at, at + 1); }
  void swap(Vector& other) noexcept { this->swap_with(other); }
  friend void swap(Vector& a, Vector& b) noexcept { a.swap(b); }
};

/// Elements [first, last) of a vector, for a kernel: in(v.begin() + 5, v.end()).
template <class T>
ContainerRef<T> in(VectorIterator<T> first, VectorIterator<T> last) {
  return in(first.container()->range(first.index(), static_cast<std::size_t>(last - first)));
}
template <class T>
ContainerRef<T> out(VectorIterator<T> first, VectorIterator<T> last) {
  return out(first.container()->range(first.index(), static_cast<std::size_t>(last - first)));
}
template <class T>
ContainerRef<T> inout(VectorIterator<T> first, VectorIterator<T> last) {
  return inout(first.container()->range(first.index(), static_cast<std::size_t>(last - first)));
}

}  // namespace hdsm
HDSM_VISIBLE_END
