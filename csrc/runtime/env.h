// Typed access to environment variables with errors that name the variable, the value and
// what is allowed. Stateless; thread-safe as long as nobody calls setenv concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace neuron::rt {

// The variable's value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> getenv_str(const char* name);

// Parses an integer in [lo, hi]; throws ConfigError("NAME=value: expected an integer in
// [lo, hi]") otherwise. Returns `dflt` when unset or empty.
int64_t getenv_int(const char* name, int64_t dflt, int64_t lo, int64_t hi);

// Parses 1/0/true/false/yes/no/on/off (case-insensitive); throws ConfigError otherwise.
bool getenv_bool(const char* name, bool dflt);

// Same parsers on a given value (for tests and for values that come from an EnvMap).
int64_t parse_int(const char* name, const std::string& value, int64_t lo, int64_t hi);
double parse_double(const char* name, const std::string& value, double lo, double hi);
bool parse_bool(const char* name, const std::string& value);

}  // namespace neuron::rt
