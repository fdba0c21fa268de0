#include "runtime/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace neuron::rt {

namespace {

struct TracerState {
  std::atomic<bool> enabled{false};
  std::mutex mu;
  std::vector<TraceEvent> events;
};

// Leaked on purpose: stream workers may still record while static destructors run at exit.
TracerState& state() {
  static TracerState* s = new TracerState();
  return *s;
}

void append_json_string(std::string& out, const char* s) {
  out += '"';
  for (const char* p = s ? s : ""; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
}

// Chrome wants microseconds; keep nanosecond precision as three decimals.
void append_us(std::string& out, int64_t ns) {
  char buf[48];
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t a = ns < 0 ? -static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  std::snprintf(buf, sizeof(buf), "%s%llu.%03llu", sign, static_cast<unsigned long long>(a / 1000),
                static_cast<unsigned long long>(a % 1000));
  out += buf;
}

}  // namespace

Tracer& Tracer::get() {
  static Tracer tracer;  // stateless facade over state()
  return tracer;
}

void Tracer::enable(bool on) { state().enabled.store(on, std::memory_order_release); }

bool Tracer::enabled() const { return state().enabled.load(std::memory_order_relaxed); }

void Tracer::record(const TraceEvent& e) {
  TracerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back(e);
}

std::vector<TraceEvent> Tracer::drain() {
  TracerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<TraceEvent> out;
  out.swap(s.events);
  return out;
}

std::string Tracer::to_chrome_json(const std::vector<TraceEvent>& events) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  for (const TraceEvent& e : events) {
    if (!first) out += ',';
    first = false;
    out += "{\"name\":";
    append_json_string(out, e.name);
    out += ",\"ph\":\"X\",\"pid\":" + std::to_string(e.device) +
           ",\"tid\":" + std::to_string(e.stream) + ",\"ts\":";
    append_us(out, e.start_ns);
    out += ",\"dur\":";
    append_us(out, e.end_ns - e.start_ns);
    out += '}';
  }
  out += "]}";
  return out;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace neuron::rt
