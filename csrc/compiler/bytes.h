// Little-endian binary writer/reader used by the IR serializer, the Program format and NEFF.
// The reader checks every read against the end of the buffer and throws NeffError with the
// field name, so a truncated or corrupted file never reads out of bounds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "error.h"

namespace neuron::cc {

class ByteWriter {
 public:
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void u8(uint8_t v) { pod(v); }
  void u32(uint32_t v) { pod(v); }
  void i32(int32_t v) { pod(v); }
  void u64(uint64_t v) { pod(v); }
  void i64(int64_t v) { pod(v); }
  void f64(double v) { pod(v); }
  void str(std::string_view s) {
    u64(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void bytes(const void* data, size_t n) {
    u64(n);
    raw(data, n);
  }
  void raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + n);
  }
  void i64s(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t x : v) i64(x);
  }
  void i32s(const std::vector<int>& v) {
    u64(v.size());
    for (int x : v) i32(x);
  }
  size_t size() const { return buf_.size(); }
  std::vector<uint8_t>& buffer() { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string what)
      : p_(data), end_(data + size), what_(std::move(what)) {}

  template <typename T>
  T pod(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  uint8_t u8(const char* f) { return pod<uint8_t>(f); }
  uint32_t u32(const char* f) { return pod<uint32_t>(f); }
  int32_t i32(const char* f) { return pod<int32_t>(f); }
  uint64_t u64(const char* f) { return pod<uint64_t>(f); }
  int64_t i64(const char* f) { return pod<int64_t>(f); }
  double f64(const char* f) { return pod<double>(f); }
  // A count of items of at least `item_size` bytes each that must fit in what is left.
  uint64_t count(const char* f, size_t item_size) {
    const uint64_t n = u64(f);
    if (item_size && n > remaining() / item_size) fail(f, "count exceeds the remaining bytes");
    return n;
  }
  std::string str(const char* f) {
    const uint64_t n = count(f, 1);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<uint8_t> bytes(const char* f) {
    const uint64_t n = count(f, 1);
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  const uint8_t* raw(size_t n, const char* f) {
    need(n, f);
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }
  std::vector<int64_t> i64s(const char* f) {
    const uint64_t n = count(f, 8);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = i64(f);
    return v;
  }
  std::vector<int> i32s(const char* f) {
    const uint64_t n = count(f, 4);
    std::vector<int> v(n);
    for (auto& x : v) x = i32(f);
    return v;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool done() const { return p_ == end_; }
  [[noreturn]] void fail(const char* field, const char* why) const {
    throw NeffError(rt::str(what_, ": ", why, " while reading '", field, "'"));
  }

 private:
  void need(size_t n, const char* f) const {
    if (remaining() < n) fail(f, "unexpected end of data (truncated)");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
};

}  // namespace neuron::cc
