// Kineto plugin for the neuron device: while torch.profiler records with
// ProfilerActivity.PrivateUse1, the runtime tracer timestamps every task the streams run; the
// session then hands them to Kineto as device activities (one row per logical core and stream),
// so they appear in prof.key_averages() as device time and in the exported Chrome trace.
#ifndef USE_KINETO
#define USE_KINETO 1
#endif

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unistd.h>

#include "NeuronActivityProfiler.h"
#include "runtime/device_clock.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace neuron::torch_glue {
namespace {

using libkineto::ActivityType;

std::mutex g_last_mu;
std::vector<SessionEvent> g_last;

libkineto::ActivityType activity_type(const char* name) {
  if (std::strstr(name, "copy_h2d") || std::strstr(name, "copy_d2h") || std::strstr(name, "copy_d2d"))
    return ActivityType::GPU_MEMCPY;
  if (std::strncmp(name, "aten::fill_", 11) == 0 || std::strncmp(name, "aten::zero_", 11) == 0)
    return ActivityType::GPU_MEMSET;
  return ActivityType::CONCURRENT_KERNEL;
}

class NeuronSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    rt::Tracer& tracer = rt::Tracer::get();
    tracer.drain();  // drop anything recorded outside this session
    // Kineto's timestamps are Unix-epoch nanoseconds; the tracer uses the steady clock.
    const auto sys = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const rt::ClockReading r = rt::DeviceClock::get().read();
    offset_ns_ = sys - r.real_ns;
    real0_ = r.real_ns;
    est0_ = r.est_host_ns;
    start_ns_ = sys;
    tracer.enable(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // Queued device work belongs to the profiled region: let it finish and be recorded.
    if (rt::Runtime::initialized()) {
      try {
        rt::Runtime::get().synchronize_all();
      } catch (const std::exception& e) {
        errors_.push_back(e.what());
      }
    }
    rt::Tracer& tracer = rt::Tracer::get();
    tracer.enable(false);
    events_ = tracer.drain();
    publish();
    end_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    span_ = std::make_unique<libkineto::TraceSpan>(start_ns_, end_ns_, "neuron");
    for (const rt::TraceEvent& e : events_) {
      if (e.stream == rt::kFallbackRow) continue;  // host work: in the Python export only
      libkineto::GenericTraceActivity a(*span_, activity_type(e.name), e.name);
      a.startTime = e.start_ns + offset_ns_;
      a.endTime = e.end_ns + offset_ns_;
      a.device = e.device;
      a.resource = e.stream;
      a.id = next_id_++;
      a.addMetadataQuoted("seq", std::to_string(e.seq));
      a.addMetadataQuoted("trn2_est_us", std::to_string((e.est_end_ns - e.est_start_ns) / 1e3));
      logger.handleGenericActivity(a);
    }
  }

  // Kineto names one device process per session: the first core's, "neuron:<i>" (the
  // Python export names every core).
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (events_.empty()) return nullptr;
    int dev = events_[0].device;
    for (const auto& e : events_) dev = std::min(dev, e.device);
    const std::string name = "neuron:" + std::to_string(dev);
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{dev, dev, name, name});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::set<std::pair<int, int64_t>> seen;
    for (const auto& e : events_) seen.emplace(e.device, e.stream);
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [dev, stream] : seen)
      out.push_back(libkineto::ResourceInfo{stream, stream, dev, "neuron:" + std::to_string(dev) + " stream " + std::to_string(stream)});
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  std::string getDeviceProperties() override {
    if (!rt::Runtime::initialized()) return "";
    const auto& topo = rt::Runtime::get().topology();
    return "{\"instance_type\": \"" + topo.profile.name + "\", \"logical_nc_config\": " + std::to_string(topo.lnc) + "}";
  }

 private:
  int64_t offset_ns_ = 0;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  int64_t next_id_ = 1;
  int64_t real0_ = 0, est0_ = 0;

  void publish() {
    std::vector<SessionEvent> out;
    out.reserve(events_.size());
    for (const rt::TraceEvent& e : events_)
      out.push_back(SessionEvent{e.name, e.device, e.stream, e.seq, (e.start_ns - real0_) / 1e3,
                                 (e.end_ns - real0_) / 1e3,
                                 e.launch_ns ? (e.launch_ns - real0_) / 1e3 : 0.0,
                                 (e.est_start_ns - est0_) / 1e3, (e.est_end_ns - est0_) / 1e3});
    std::lock_guard<std::mutex> lock(g_last_mu);
    g_last = std::move(out);
  }
  std::vector<rt::TraceEvent> events_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::TraceSpan> span_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    return wanted(types) ? std::make_unique<NeuronSession>() : nullptr;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t, const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    return wanted(types) ? std::make_unique<NeuronSession>() : nullptr;
  }

 private:
  bool wanted(const std::set<ActivityType>& types) const {
    for (ActivityType t : types)
      if (activities_.count(t)) return true;
    return false;
  }
  std::string name_ = "NeuronActivityProfiler";
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::GPU_MEMSET};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

std::vector<SessionEvent> last_profiler_session() {
  std::lock_guard<std::mutex> lock(g_last_mu);
  return g_last;
}

}  // namespace neuron::torch_glue
