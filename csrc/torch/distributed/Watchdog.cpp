#include "Watchdog.h"

#include <cstdlib>

namespace neuron::torch_glue {

namespace {

constexpr auto kBeat = std::chrono::milliseconds(500);
const char* const kFailureKey = "neuron_failure";

std::string beat_key(int rank) { return "neuron_beat/" + std::to_string(rank); }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

Watchdog::Watchdog(c10::intrusive_ptr<c10d::Store> store, int rank,
                   std::function<void(int, const std::string&)> on_failure)
    : store_(std::move(store)), rank_(rank), on_failure_(std::move(on_failure)) {
  store_->add(beat_key(rank_), 1);  // the key exists before anyone looks for it
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, kBeat, [&] { return stop_; })) {
    lock.unlock();
    try {
      store_->add(beat_key(rank_), 1);
      if (!failure_seen_.load() && store_->check({kFailureKey})) {
        const std::vector<uint8_t> v = store_->get(kFailureKey);
        const std::string text(v.begin(), v.end());
        const size_t nl = text.find('\n');
        const int origin = std::atoi(text.substr(0, nl).c_str());
        failure_seen_ = true;
        if (origin != rank_) on_failure_(origin, nl == std::string::npos ? text : text.substr(nl + 1));
      }
    } catch (const std::exception&) {
      // The store's host is gone (it ended or died). Collectives still fail on their own when
      // their peers are gone; this thread only loses its early warning.
      store_lost_ = true;
      lock.lock();
      return;
    }
    lock.lock();
  }
}

void Watchdog::publish_failure(const std::string& reason) {
  if (store_lost_) return;
  try {
    store_->compareSet(kFailureKey, {}, bytes(std::to_string(rank_) + "\n" + reason));
  } catch (const std::exception&) {
    store_lost_ = true;
  }
}

bool Watchdog::beat_count(int rank, int64_t* count) {
  const std::string key = beat_key(rank);
  if (!store_->check({key})) return false;
  const std::vector<uint8_t> v = store_->get(key);
  *count = std::atoll(std::string(v.begin(), v.end()).c_str());
  return true;
}

std::vector<int> Watchdog::silent(const std::vector<int>& ranks, std::chrono::milliseconds grace) {
  if (store_lost_) return {};
  try {
    std::vector<int64_t> first(ranks.size(), -1);
    std::vector<bool> quiet(ranks.size(), true);
    for (size_t i = 0; i < ranks.size(); ++i)
      if (!beat_count(ranks[i], &first[i])) first[i] = -1;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (;;) {
      bool any = false;
      for (size_t i = 0; i < ranks.size(); ++i) {
        int64_t now = -1;
        if (quiet[i] && ranks[i] != rank_ && beat_count(ranks[i], &now) && now != first[i]) quiet[i] = false;
        if (ranks[i] == rank_) quiet[i] = false;
        any |= quiet[i];
      }
      if (!any || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(kBeat / 5);
    }
    std::vector<int> out;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (quiet[i]) out.push_back(ranks[i]);
    return out;
  } catch (const std::exception&) {
    store_lost_ = true;
    return {};
  }
}

}  // namespace neuron::torch_glue
