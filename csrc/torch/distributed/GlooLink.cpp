#include "GlooLink.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <condition_variable>
#include <thread>

#include "Watchdog.h"
#include "runtime/error.h"

namespace neuron::torch_glue {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr auto kSilenceGrace = std::chrono::milliseconds(2000);

// A CPU byte tensor over memory Gloo may read and write (not owned).
at::Tensor view(const void* p, size_t bytes) {
  static char dummy;
  void* ptr = bytes ? const_cast<void*>(p) : &dummy;
  return at::from_blob(ptr, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

std::vector<int64_t> splits(const std::vector<size_t>& v) { return {v.begin(), v.end()}; }

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

}  // namespace

GlooLink::GlooLink(c10::intrusive_ptr<c10d::Backend> gloo, std::vector<int> members, std::string where,
                   Watchdog* watchdog, std::function<std::string()> failure, std::chrono::milliseconds timeout)
    : gloo_(std::move(gloo)),
      members_(std::move(members)),
      where_(std::move(where)),
      watchdog_(watchdog),
      failure_(std::move(failure)),
      timeout_(timeout) {
  rank_ = gloo_->getRank();
}

void GlooLink::run(const c10::intrusive_ptr<c10d::Work>& work, std::vector<at::Tensor> keep, const std::string& what) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = work->getFuture();
  } catch (const std::exception&) {
    // Gloo's send/recv work has no future: wait for it blocking, and abort it if the group fails.
  }
  bool abandoned = false;
  std::exception_ptr error;
  if (future) {
    auto signal = std::make_shared<Signal>();
    future->addCallback([signal](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(signal->mu);
      signal->done = true;
      signal->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(signal->mu);
    while (!signal->cv.wait_for(lock, kPoll, [&] { return signal->done; })) {
      lock.unlock();
      abandoned = !failure_().empty();
      lock.lock();
      if (abandoned) break;
    }
    if (!abandoned) {
      try {
        work->wait();
      } catch (const std::exception&) {
        error = std::current_exception();
      }
    }
  } else {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false, aborted = false;
    std::thread canceller([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!cv.wait_for(lock, kPoll, [&] { return done; })) {
        lock.unlock();
        const bool failed = !failure_().empty();
        lock.lock();
        if (failed) {
          aborted = true;
          work->abort();
          return;
        }
      }
    });
    try {
      work->wait();
    } catch (const std::exception&) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    canceller.join();
    abandoned = aborted;
  }
  if (abandoned) {
    // Gloo may still own the buffers of the operation: keep them alive for as long as it may.
    std::lock_guard<std::mutex> g(abandoned_mu_);
    abandoned_.emplace_back(work, std::move(keep));
    throw rt::Error(failure_());
  }
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    const std::string f = failure_();
    if (!f.empty()) throw rt::Error(f);  // the group failed first: that is the cause
    std::string gone;
    if (watchdog_) {
      std::vector<int> peers;
      for (int m : members_)
        if (m != members_[static_cast<size_t>(rank_)]) peers.push_back(m);
      const std::vector<int> silent = watchdog_->silent(peers, kSilenceGrace);
      if (!silent.empty()) gone = ranks_text(silent) + (silent.size() == 1 ? " is" : " are") + " gone (no heartbeat); ";
    }
    std::string msg = e.what();
    if (const size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw rt::Error(what + where_ + ": " + gone + "the inter-host transfer (Gloo) with " + ranks_text(members_) +
                    " failed: " + msg);
  }
}

void GlooLink::all_gather(const void* in, size_t bytes, void* out, const std::string& what) {
  at::Tensor i = view(in, bytes), o = view(out, bytes * members_.size());
  c10d::AllgatherOptions opts;
  opts.timeout = timeout_;
  run(gloo_->_allgather_base(o, i, opts), {i, o}, what);
}

void GlooLink::all_to_all(const void* in, const std::vector<size_t>& send, void* out, const std::vector<size_t>& recv,
                          const std::string& what) {
  size_t sb = 0, rb = 0;
  for (size_t v : send) sb += v;
  for (size_t v : recv) rb += v;
  at::Tensor i = view(in, sb), o = view(out, rb);
  std::vector<int64_t> ss = splits(send), rs = splits(recv);
  c10d::AllToAllOptions opts;
  opts.timeout = timeout_;
  run(gloo_->alltoall_base(o, i, rs, ss, opts), {i, o}, what);
}

void GlooLink::broadcast(void* buf, size_t bytes, int root, const std::string& what) {
  std::vector<at::Tensor> t{view(buf, bytes)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  run(gloo_->broadcast(t, opts), t, what);
}

void GlooLink::scatter(const std::vector<const void*>& ins, void* out, size_t bytes, int root, const std::string& what) {
  std::vector<at::Tensor> outs{view(out, bytes)};
  std::vector<std::vector<at::Tensor>> inputs;
  std::vector<at::Tensor> keep = outs;
  if (rank_ == root) {
    inputs.emplace_back();
    for (const void* p : ins) inputs[0].push_back(view(p, bytes));
    keep.insert(keep.end(), inputs[0].begin(), inputs[0].end());
  }
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  run(gloo_->scatter(outs, inputs, opts), keep, what);
}

void GlooLink::send(const void* data, size_t bytes, int dst, int tag, const std::string& what) {
  std::vector<at::Tensor> t{view(data, bytes)};
  run(gloo_->send(t, dst, tag), t, what);
}

void GlooLink::recv(void* data, size_t bytes, int src, int tag, const std::string& what) {
  std::vector<at::Tensor> t{view(data, bytes)};
  run(gloo_->recv(t, src, tag), t, what);
}

void GlooLink::barrier(const std::string& what) {
  c10d::BarrierOptions opts;
  opts.timeout = timeout_;
  run(gloo_->barrier(opts), {}, what);
}

}  // namespace neuron::torch_glue
