// hdsm::Matrix<T>: a row-major matrix with a main copy in host memory and device copies of any
// submatrix (stored contiguously on the device), kept coherent by hdsm. See docs/containers.md.
#pragma once

#include <hdsm/export.h>
#include <hdsm/container.hpp>
#include <hdsm/error.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

template <class T>
class Matrix : public detail::TypedContainer<T> {
  using Base = detail::TypedContainer<T>;

 public:
  using typename Base::reference;

  Matrix() : Matrix(0, 0) {}
  /// rows x cols value-initialized elements.
  Matrix(std::size_t rows, std::size_t cols, const ContainerOptions& options = {})
      : Base("matrix", options, checked_count(rows, cols), cols), rows_(rows), cols_(cols) {
    this->construct(0, rows * cols);
  }
  Matrix(std::size_t rows, std::size_t cols, const T& value, const ContainerOptions& options = {})
      : Base("matrix", options, checked_count(rows, cols), cols), rows_(rows), cols_(cols) {
    std::fill_n(this->host(), rows * cols, value);
  }
  /// A copy of `other`'s current contents (in host memory; no device copies), as Vector's.
  Matrix(const Matrix& other) : Matrix(other.rows(), other.cols(), Base::options_of(other)) {
    this->copy_contents(other);
  }
  /// `other`'s shape and current contents, on this matrix's runtime and with its options.
  Matrix& operator=(const Matrix& other) {
    if (this != &other) {
      Matrix copy(other.rows(), other.cols(), this->assigned_options(other));
      copy.copy_contents(other);
      *this = std::move(copy);
    }
    return *this;
  }
  Matrix(Matrix&&) noexcept = default;
  Matrix& operator=(Matrix&&) noexcept = default;
  ~Matrix() = default;

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }

  /// Checked element access (as Vector's operator[]).
  reference at(std::size_t row, std::size_t col) { return reference(this, index(row, col)); }
  T at(std::size_t row, std::size_t col) const { return this->read(index(row, col)); }
  /// Unchecked element access.
  T& operator()(std::size_t row, std::size_t col) { return this->host_[row * cols_ + col]; }
  const T& operator()(std::size_t row, std::size_t col) const { return this->host_[row * cols_ + col]; }

  /// The whole matrix and parts of it, for in(), out() and inout().
  Extent whole() const { return Extent{0, rows_, cols_, std::max<std::size_t>(cols_, 1)}; }
  ContainerPart<T> row(std::size_t r) { return submatrix(r, 0, 1, cols_); }
  ContainerPart<T> col(std::size_t c) { return submatrix(0, c, rows_, 1); }
  /// rows x cols elements from (row, col).
  ContainerPart<T> submatrix(std::size_t row, std::size_t col, std::size_t rows, std::size_t cols) {
    return {&this->core(), part(row, col, rows, cols)};
  }
  /// The same of a const matrix, for in() and a skeleton's inputs.
  ContainerPart<T, false> row(std::size_t r) const { return submatrix(r, 0, 1, cols_); }
  ContainerPart<T, false> col(std::size_t c) const { return submatrix(0, c, rows_, 1); }
  ContainerPart<T, false> submatrix(std::size_t row, std::size_t col, std::size_t rows,
                                    std::size_t cols) const {
    return {&this->core(), part(row, col, rows, cols)};
  }
  /// A submatrix current on `device` for `access`, for a kernel enqueued by hand.
  DeviceView device_view(unsigned device, const ContainerPart<T>& part, Access access) {
    if (part.core != &this->core())
      throw InvalidArgument("device_view: the part belongs to another container");
    return DeviceView(this->core(), device, part.extent, access);
  }

  /// New shape; element (i, j) keeps its value where both shapes have it, new elements are
  /// value-initialized. Device copies are written back and freed.
  void resize(std::size_t rows, std::size_t cols) {
    const std::size_t n = checked_count(rows, cols);
    const T* old = this->host_range(0, this->size(), Access::read);
    std::vector<T> kept(old, old + this->size());
    this->resize_core(n, cols);
    T* p = this->host();
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j)
        p[i * cols + j] = i < rows_ && j < cols_ ? kept[i * cols_ + j] : T();
    rows_ = rows;
    cols_ = cols;
  }

  /// Exchanges the two matrices, shapes, elements and device copies (calls in flight go on with the
  /// containers they were given): the pointer swap of a stencil's time steps.
  void swap(Matrix& other) noexcept {
    this->swap_with(other);
    std::swap(rows_, other.rows_);
    std::swap(cols_, other.cols_);
  }
  friend void swap(Matrix& a, Matrix& b) noexcept { a.swap(b); }

 private:
  Extent part(std::size_t row, std::size_t col, std::size_t rows, std::size_t cols) const {
    if (row > rows_ || col > cols_ || rows > rows_ - row || cols > cols_ - col || rows == 0 || cols == 0)
      throw InvalidArgument("submatrix " + std::to_string(rows) + " x " + std::to_string(cols) + " at (" +
                            std::to_string(row) + ", " + std::to_string(col) + ") outside the " +
                            this->core().name());
    return Extent{row * cols_ + col, rows, cols, cols_};
  }
  static std::size_t checked_count(std::size_t rows, std::size_t cols) {
    if (cols != 0 && rows > static_cast<std::size_t>(-1) / cols)
      throw InvalidArgument("matrix of " + std::to_string(rows) + " x " + std::to_string(cols) +
                            ": too large");
    return rows * cols;
  }
  std::size_t index(std::size_t row, std::size_t col) const {
    if (row >= rows_ || col >= cols_) [[unlikely]]
      throw InvalidArgument("element (" + std::to_string(row) + ", " + std::to_string(col) +
                            ") outside the " + this->core().name());
    return row * cols_ + col;
  }

  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
};

}  // namespace hdsm
HDSM_VISIBLE_END
