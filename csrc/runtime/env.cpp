#include "runtime/env.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "runtime/error.h"

namespace neuron::rt {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::optional<std::string> getenv_str(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

int64_t getenv_int(const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  auto v = getenv_str(name);
  if (!v || trim(*v).empty()) return dflt;
  return parse_int(name, *v, lo, hi);
}

bool getenv_bool(const char* name, bool dflt) {
  auto v = getenv_str(name);
  if (!v || trim(*v).empty()) return dflt;
  return parse_bool(name, *v);
}

int64_t parse_int(const char* name, const std::string& value, int64_t lo, int64_t hi) {
  const std::string t = trim(value);
  bool ok = !t.empty();
  int64_t result = 0;
  if (ok) {
    // strtoll alone accepts "12abc" and leading blanks inside; insist on the whole string.
    size_t i = (t[0] == '+' || t[0] == '-') ? 1 : 0;
    ok = i < t.size();
    for (size_t j = i; ok && j < t.size(); ++j) ok = std::isdigit(static_cast<unsigned char>(t[j]));
    if (ok) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(t.c_str(), &end, 10);
      ok = errno == 0 && end == t.c_str() + t.size();
      result = v;
    }
  }
  NEURON_RT_CHECK_T(ConfigError, ok && result >= lo && result <= hi, name, "=", value,
                    ": expected an integer in [", lo, ", ", hi, "]");
  return result;
}

double parse_double(const char* name, const std::string& value, double lo, double hi) {
  const std::string t = trim(value);
  bool ok = !t.empty();
  double result = 0;
  if (ok) {
    errno = 0;
    char* end = nullptr;
    result = std::strtod(t.c_str(), &end);
    ok = errno == 0 && end == t.c_str() + t.size() && std::isfinite(result);
  }
  NEURON_RT_CHECK_T(ConfigError, ok && result >= lo && result <= hi, name, "=", value,
                    ": expected a number in [", lo, ", ", hi, "]");
  return result;
}

bool parse_bool(const char* name, const std::string& value) {
  const std::string t = lower(trim(value));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw ConfigError(
      str(name, "=", value, ": expected a boolean (1, 0, true, false, yes, no, on, off)"));
}

}  // namespace neuron::rt
