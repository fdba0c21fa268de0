// The IR verifier: structural and type rules every graph must satisfy between passes.
// Throws VerifyError naming the graph, the node (printed) and the violated rule.
#pragma once

#include <string>

#include "ir.h"

namespace neuron::cc {

// Checks `g`; `stage` (e.g. "after pass 'fuse_elementwise'") is prefixed to the message.
void verify(const Graph& g, const std::string& stage = "");

}  // namespace neuron::cc
