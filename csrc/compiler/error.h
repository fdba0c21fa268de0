// Errors of the graph compiler: one exception type per failure class and one checking macro
// (NEURON_CC_CHECK) that formats an actionable message.
#pragma once

#include "runtime/error.h"

namespace neuron::cc {

// A graph or program the compiler cannot handle (bad input, unsupported op/dtype/shape).
class CompileError : public rt::Error {
 public:
  explicit CompileError(const std::string& msg) : rt::Error(msg) {}
};

// The IR verifier found a malformed graph; the message names the node and the rule.
class VerifyError : public CompileError {
 public:
  explicit VerifyError(const std::string& msg) : CompileError(msg) {}
};

// A NEFF file that is truncated, corrupted or from an incompatible compiler/format version.
class NeffError : public rt::Error {
 public:
  explicit NeffError(const std::string& msg) : rt::Error(msg) {}
};

// A failure while running a compiled program (bad index, shape mismatch at run time, ...).
class ExecError : public rt::Error {
 public:
  explicit ExecError(const std::string& msg) : rt::Error(msg) {}
};

}  // namespace neuron::cc

#define NEURON_CC_CHECK(cond, ...)                                      \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      throw ::neuron::cc::CompileError(::neuron::rt::str(__VA_ARGS__)); \
    }                                                                   \
  } while (0)

#define NEURON_CC_CHECK_T(ErrType, cond, ...)                      \
  do {                                                             \
    if (!(cond)) [[unlikely]] {                                    \
      throw ::neuron::cc::ErrType(::neuron::rt::str(__VA_ARGS__)); \
    }                                                              \
  } while (0)
