// The compiler's content hashes are the runtime's (one implementation: runtime/hash.h).
#pragma once

#include "runtime/hash.h"

namespace neuron::cc {
using rt::hash64;
using rt::Hasher;
}  // namespace neuron::cc
