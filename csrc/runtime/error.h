// Errors raised by the runtime: one exception type per failure class and one checking macro
// that formats an actionable message (what failed, where, the offending value).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace neuron::rt {

// Base class of every error the runtime reports to its callers.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A device allocation that does not fit in the logical core's HBM capacity.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& msg) : Error(msg) {}
};

// A bad value in an environment variable or configuration (names the variable and value).
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& msg) : Error(msg) {}
};

// The process was forked after the runtime started; the child may not use the device.
class BadForkError : public Error {
 public:
  explicit BadForkError(const std::string& msg) : Error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<<.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

}  // namespace neuron::rt

// NEURON_RT_CHECK(cond, parts...): throws neuron::rt::Error(str(parts...)) when cond is false.
#define NEURON_RT_CHECK(cond, ...)                                  \
  do {                                                              \
    if (!(cond)) [[unlikely]] {                                     \
      throw ::neuron::rt::Error(::neuron::rt::str(__VA_ARGS__));    \
    }                                                               \
  } while (0)

#define NEURON_RT_CHECK_T(ErrType, cond, ...)                       \
  do {                                                              \
    if (!(cond)) [[unlikely]] {                                     \
      throw ::neuron::rt::ErrType(::neuron::rt::str(__VA_ARGS__));  \
    }                                                               \
  } while (0)
