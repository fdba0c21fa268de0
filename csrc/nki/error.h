// The one error type of the NeuronCore model: a violated hardware rule or a bad kernel, named
// by the instruction, the kernel source location (file:line, captured at trace time), the
// rule and the offending values.
#pragma once

#include <string>

#include "runtime/error.h"

namespace neuron::nki {

class NkiError : public rt::Error {
 public:
  // kind: "validation" (a static rule), "uninitialized" (data derived from never-written
  // SBUF/PSUM reached HBM or a register), "runtime" (dynamic bounds, loop limits).
  NkiError(std::string kind, std::string instruction, std::string location, std::string message,
           std::string rule)
      : rt::Error(format(instruction, location, message, rule)),
        kind_(std::move(kind)),
        instruction_(std::move(instruction)),
        location_(std::move(location)),
        message_(std::move(message)),
        rule_(std::move(rule)) {}

  const std::string& kind() const { return kind_; }
  const std::string& instruction() const { return instruction_; }
  const std::string& location() const { return location_; }
  const std::string& message() const { return message_; }
  const std::string& rule() const { return rule_; }

  static std::string format(const std::string& instr, const std::string& loc,
                            const std::string& msg, const std::string& rule) {
    std::string s = instr;
    if (!loc.empty()) s += " at " + loc;
    s += ": " + msg;
    if (!rule.empty()) s += " [rule: " + rule + "]";
    return s;
  }

 private:
  std::string kind_, instruction_, location_, message_, rule_;
};

}  // namespace neuron::nki
