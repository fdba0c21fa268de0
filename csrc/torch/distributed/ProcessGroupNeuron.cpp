#include "ProcessGroupNeuron.h"

#include <ATen/core/ivalue.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "../Common.h"
#include "../DeviceTime.h"
#include "GlooLink.h"
#include "Watchdog.h"
#include "kernels/collective_reduce.h"
#include "runtime/env.h"
#include "runtime/event.h"

namespace neuron::torch_glue {

// rt::KernelLink over a neuron process group: the group outlives its registration (the
// destructor removes it first).
class GroupKernelLink : public rt::KernelLink {
 public:
  explicit GroupKernelLink(ProcessGroupNeuron* pg) : pg_(pg) {}
  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }
  std::vector<std::string> all_gather(const rt::CollectiveDesc& desc, const std::string& in) override {
    return pg_->kernel_all_gather(desc, in);
  }
  void abort(const std::string& reason) noexcept override { pg_->kernel_abort(reason); }

 private:
  ProcessGroupNeuron* pg_;
};

namespace {

using Op = kernels::CollectiveOp;
using rt::str;

size_t env_mib(const char* name, size_t dflt) {
  return static_cast<size_t>(rt::getenv_int(name, static_cast<int64_t>(dflt), 1, 4096));
}

Op to_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return Op::Sum;
    case c10d::ReduceOp::AVG: return Op::Avg;
    case c10d::ReduceOp::PRODUCT: return Op::Product;
    case c10d::ReduceOp::MIN: return Op::Min;
    case c10d::ReduceOp::MAX: return Op::Max;
    case c10d::ReduceOp::BAND: return Op::BAnd;
    case c10d::ReduceOp::BOR: return Op::BOr;
    case c10d::ReduceOp::BXOR: return Op::BXor;
    default: break;
  }
  TORCH_CHECK(false, "neuron collectives: reduce op ", static_cast<int>(op.op_), " is not supported");
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Sum: return "sum";
    case Op::Avg: return "avg";
    case Op::Product: return "product";
    case Op::Min: return "min";
    case Op::Max: return "max";
    case Op::BAnd: return "band";
    case Op::BOr: return "bor";
    case Op::BXor: return "bxor";
  }
  return "?";
}

// A contiguous neuron tensor as raw bytes.
struct Span {
  char* ptr;
  int64_t numel;
  size_t es;
  kernels::DType dtype;
  size_t bytes() const { return static_cast<size_t>(numel) * es; }
};

Span span(const at::Tensor& t, const char* op) {
  TORCH_CHECK(is_neuron(t), "neuron collective ", op, ": expected tensors on a neuron device, got one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), "neuron collective ", op, ": tensors must be contiguous");
  const kernels::DType dt = to_kernel_dtype(t.scalar_type());
  TORCH_CHECK(dt != kernels::DType::Undefined, "neuron collective ", op, ": unsupported dtype ", t.scalar_type());
  return {t.numel() ? static_cast<char*>(t.data_ptr()) : nullptr, t.numel(), static_cast<size_t>(t.element_size()), dt};
}

std::string dtype_text(const at::Tensor& t) {
  return std::string(kernels::dtype_name(to_kernel_dtype(t.scalar_type())));
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "neuron collective ", op, ": dtype mismatch (", a.scalar_type(),
              " vs ", b.scalar_type(), ")");
  TORCH_CHECK(a.device() == b.device(), "neuron collective ", op, ": tensors on ", a.device(), " and ", b.device());
}

void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "neuron collective ", op, ": root ", root, " not in [0, ", size, ")");
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

uint64_t inode(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Ranks share a host when they can share memory: same kernel boot, same mount and pid
// namespaces, and the same torchrun node (GROUP_RANK; two torchrun "nodes" on one machine stay
// two hosts, as the user asked for).
std::string host_identity() {
  const char* node = std::getenv("GROUP_RANK");
  return str(first_line("/proc/sys/kernel/random/boot_id"), "/mnt:", inode("/proc/self/ns/mnt"),
             "/pid:", inode("/proc/self/ns/pid"), "/node:", node ? node : "");
}

std::string encode_handle(const rt::ShmComm::Handle& h) { return str(h.pid, " ", h.fd, " ", h.token); }
rt::ShmComm::Handle decode_handle(const std::vector<uint8_t>& v) {
  rt::ShmComm::Handle h;
  const std::string s(v.begin(), v.end());
  long long pid = 0;
  int fd = -1;
  unsigned long long token = 0;
  TORCH_CHECK(std::sscanf(s.c_str(), "%lld %d %llu", &pid, &fd, &token) == 3,
              "neuron collectives: bad shared-memory handle in the store: ", s);
  h.pid = pid;
  h.fd = fd;
  h.token = token;
  return h;
}

std::string get_string(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> v = store.get(key);
  return {v.begin(), v.end()};
}

class NeuronWork final : public c10d::Work {
 public:
  NeuronWork(c10d::OpType type, const char* name, c10::DeviceIndex device, std::shared_ptr<rt::Event> done,
             rt::Stream* stream, std::vector<at::Tensor> outputs, bool host_blocking)
      : c10d::Work(-1, type, name),
        name_(name),
        device_(device),
        done_(std::move(done)),
        stream_(stream),
        outputs_(std::move(outputs)),
        host_blocking_(host_blocking) {}

  bool isCompleted() override { return done_->query(); }
  bool isSuccess() const override { return done_->query(); }

  bool wait(std::chrono::milliseconds) override {
    if (host_blocking_) {
      synchronize();
      return true;
    }
    // The caller's stream continues after the operation; its failure (e.g. a peer that is
    // gone) surfaces at that stream's next synchronization.
    translate_errors([&] {
      rt::Stream& user = current_stream(device_);
      done_->block(user);
      rt::Stream* s = stream_;
      user.launch(name_, [s] { s->check_error(); });
    });
    return true;
  }

  void synchronize() override {
    translate_errors([&] {
      done_->synchronize();
      stream_->check_error();
    });
  }

  void blockCurrentStream() override { wait(kNoTimeout); }

  std::vector<at::Tensor> result() override { return outputs_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    synchronize();
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    fut->markCompleted(c10::IValue(outputs_));
    return fut;
  }

 private:
  const char* name_;
  c10::DeviceIndex device_;
  std::shared_ptr<rt::Event> done_;
  rt::Stream* stream_;
  std::vector<at::Tensor> outputs_;
  bool host_blocking_;
};

}  // namespace

// ---- joining the group -------------------------------------------------------------------------

ProcessGroupNeuron::ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, Options o)
    : c10d::Backend(rank, size),
      group_(o.group_name.empty() ? "default" : o.group_name),
      timeout_(o.timeout),
      join_timeout_(std::min(o.timeout, o.join_timeout)) {
  translate_errors([&] { join(store, o.make_gloo); });
  // The first neuron group of the process is its world group (init_process_group creates it
  // before any other): NKI kernels' collectives run over it.
  if (!rt::kernel_link()) {
    kernel_link_ = std::make_shared<GroupKernelLink>(this);
    rt::set_kernel_link(kernel_link_);
  }
}

ProcessGroupNeuron::~ProcessGroupNeuron() {
  if (kernel_link_ && rt::kernel_link() == kernel_link_) rt::set_kernel_link(nullptr);
  // Queued operations use this object: let them finish first.
  std::lock_guard<std::mutex> lock(streams_mu_);
  std::vector<rt::Stream*> all = streams_;
  for (auto& [key, s] : p2p_streams_) all.push_back(s);
  for (rt::Stream* s : all) {
    if (!s) continue;
    try {
      s->synchronize();
    } catch (...) {
    }
  }
}

void ProcessGroupNeuron::wait_for_keys(c10d::Store& store, const std::string& what, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(str("neuron/", what, "/", r));
  const auto start = std::chrono::steady_clock::now();
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    if (store.check(keys)) return;
    if (std::chrono::steady_clock::now() - start > join_timeout_) {
      std::vector<int> missing;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!store.check({keys[i]})) missing.push_back(ranks[i]);
      throw rt::Error(str("neuron collectives: ", ranks_text(missing), " of process group '", group_, "' (", size_,
                          " ranks) did not join within ", join_timeout_.count() / 1000.0, " s; rank ", rank_,
                          " waited for them. Their processes failed before creating the group, or their node never "
                          "started (NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT sets the wait in seconds)"));
    }
    std::this_thread::sleep_for(pause);
  }
}

void ProcessGroupNeuron::join(const c10::intrusive_ptr<c10d::Store>& store, const GlooFactory& make_gloo) {
  std::vector<int> everyone(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) everyone[static_cast<size_t>(r)] = r;

  // 1. Where is everyone? Hosts are numbered in order of their lowest rank.
  store->set(str("neuron/host/", rank_), [] {
    const std::string id = host_identity();
    return std::vector<uint8_t>(id.begin(), id.end());
  }());
  wait_for_keys(*store, "host", everyone);
  std::vector<std::string> ids;
  for (int r = 0; r < size_; ++r) {
    const std::string id = get_string(*store, str("neuron/host/", r));
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end()) {
      ids.push_back(id);
      hosts_.emplace_back();
      it = ids.end() - 1;
    }
    hosts_[static_cast<size_t>(it - ids.begin())].push_back(r);
  }
  const int H = static_cast<int>(hosts_.size());
  int host = 0;
  for (int h = 0; h < H; ++h)
    if (std::find(hosts_[h].begin(), hosts_[h].end(), rank_) != hosts_[h].end()) host = h;
  bool regular = true;
  for (const auto& rs : hosts_) regular &= rs.size() == hosts_[0].size();

  // 2. Shared memory with the ranks of this host. With an uneven number of ranks per host
  // every transfer goes through Gloo, and the shared memory only serves this rank.
  const std::vector<int> locals = regular ? hosts_[static_cast<size_t>(host)] : std::vector<int>{rank_};
  local_index_.assign(static_cast<size_t>(size_), -1);
  for (size_t i = 0; i < locals.size(); ++i) local_index_[static_cast<size_t>(locals[i])] = static_cast<int>(i);
  const size_t slot = env_mib("NEURON_EMU_COLLECTIVE_SLOT_MB", 16) << 20;
  const size_t mailbox = env_mib("NEURON_EMU_COLLECTIVE_MAILBOX_MB", 4) << 20;
  shm_ = std::make_unique<rt::ShmComm>(local(rank_), static_cast<int>(locals.size()), slot, mailbox, group_, locals);
  store->set(str("neuron/shm/", rank_), [&] {
    const std::string h = encode_handle(shm_->handle());
    return std::vector<uint8_t>(h.begin(), h.end());
  }());
  wait_for_keys(*store, "shm", locals);
  std::vector<rt::ShmComm::Handle> handles;
  for (int r : locals) handles.push_back(decode_handle(store->get(str("neuron/shm/", r))));
  shm_->connect(handles, join_timeout_);

  fabric_.shm = shm_.get();
  fabric_.timeout = timeout_;
  if (H == 1) {
    fabric_.ranks = {locals};
    return;
  }

  // 3. Gloo between the hosts: one group of everyone, and (when every host has the same
  // number of ranks) one of this rank's counterparts for the hierarchical algorithms.
  TORCH_CHECK(make_gloo, "neuron collectives: the ranks of group '", group_, "' are on ", H,
              " hosts, but no Gloo factory was given to reach the other hosts");
  watchdog_ = std::make_unique<Watchdog>(store, rank_, [this](int origin, const std::string& reason) {
    remote_failure(origin, reason);
  });
  auto failure_fn = [this] { return failure(); };
  const std::string where = str(" on rank ", rank_, " of group '", group_, "'");
  all_ = std::make_unique<GlooLink>(make_gloo("all", everyone), everyone, where, watchdog_.get(), failure_fn, timeout_);
  const int L = static_cast<int>(locals.size());
  if (regular && L > 1) {
    const int l = local(rank_);
    std::vector<int> counterparts;
    for (int h = 0; h < H; ++h) counterparts.push_back(hosts_[h][l]);
    cross_ = std::make_unique<GlooLink>(make_gloo(str("cross", l), counterparts), counterparts, where,
                                        watchdog_.get(), failure_fn, timeout_);
    fabric_.cross = cross_.get();
    fabric_.hosts = H;
    fabric_.host = host;
    fabric_.ranks = hosts_;
  } else {
    // Every rank is a "host" of its own for the algorithms; the link is everyone's.
    fabric_.cross = all_.get();
    fabric_.hosts = size_;
    fabric_.host = rank_;
    fabric_.ranks.clear();
    for (int r = 0; r < size_; ++r) fabric_.ranks.push_back({r});
  }
}

std::string ProcessGroupNeuron::transport() const {
  if (hosts_.size() <= 1) return "shm";
  return cross_ ? "shm+gloo" : "gloo";
}

// ---- failures ------------------------------------------------------------------------------------

void ProcessGroupNeuron::fail(const std::string& reason) noexcept {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.empty()) return;
    failure_ = reason;
  }
  failed_ = true;
  if (shm_) shm_->abort(reason);
  if (watchdog_) watchdog_->publish_failure(reason);
}

void ProcessGroupNeuron::remote_failure(int origin, const std::string& reason) noexcept {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.empty()) return;
    failure_ = str("rank ", origin, " failed: ", reason);
  }
  failed_ = true;
  if (shm_) shm_->abort_as(origin, reason);
}

std::string ProcessGroupNeuron::failure() const {
  if (failed_) {
    std::lock_guard<std::mutex> lock(failure_mu_);
    return failure_;
  }
  return shm_ ? shm_->any_failure() : std::string();
}

void ProcessGroupNeuron::check_usable() const {
  if (!failed_) return;
  throw rt::Error(str("neuron collectives: process group '", group_, "' is unusable after an earlier failure: ",
                      failure()));
}

// ---- queuing ---------------------------------------------------------------------------------------

rt::Stream& ProcessGroupNeuron::group_stream(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  const size_t d = static_cast<size_t>(device);
  if (streams_.size() <= d) streams_.resize(d + 1, nullptr);
  if (!streams_[d]) streams_[d] = &rt_device(device).pool_stream(0);
  return *streams_[d];
}

rt::Stream& ProcessGroupNeuron::p2p_stream(c10::DeviceIndex device, int peer, bool sending) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  rt::Stream*& s = p2p_streams_[{device, peer, sending}];
  if (!s) s = &rt_device(device).pool_stream(0);
  return *s;
}

rt::CollectiveDesc ProcessGroupNeuron::describe(const char* op, const std::vector<at::Tensor>& agreed,
                                                const std::string& reduce, int root) {
  rt::CollectiveDesc d;
  d.seq = ++seq_;
  d.op = op;
  d.reduce = reduce;
  d.root = root;
  d.tensors = static_cast<uint32_t>(agreed.size());
  for (const at::Tensor& t : agreed) {
    d.numel += static_cast<uint64_t>(t.numel());
    d.bytes += static_cast<uint64_t>(t.nbytes());
  }
  if (!agreed.empty()) {
    d.dtype = dtype_text(agreed[0]);
    d.shape = agreed[0].sizes().vec();
  }
  return d;
}

namespace {

// Estimated Trainium2 time of a collective (nki/device_time.h): a ring over the group's
// logical cores, sized by what the model counts per rank for its kind: the output of
// all-gather, the input of reduce-scatter and all-to-all, the buffer of all-reduce and
// broadcast (reduce, gather and scatter are priced as a broadcast of their buffer). `tensors`
// are all the tensors a call uses (its inputs and its outputs), `outputs` those it writes.
double collective_est_ns(nki::Collective kind, const std::vector<at::Tensor>& tensors,
                         const std::vector<at::Tensor>& outputs, int ranks) {
  using C = nki::Collective;
  double in_bytes = 0, out_bytes = 0;
  for (const at::Tensor& o : outputs) out_bytes += tensor_bytes(o);
  for (const at::Tensor& t : tensors) {
    bool written = false;
    for (const at::Tensor& o : outputs) written = written || t.is_same(o);
    if (!written) in_bytes += tensor_bytes(t);
  }
  if (in_bytes == 0) in_bytes = out_bytes;  // in place (all-reduce, broadcast)
  const bool sized_by_output = kind == C::AllGather || kind == C::AllReduce || kind == C::Broadcast;
  const double bytes = sized_by_output ? out_bytes : in_bytes;
  return nki::collective_ns(kind, bytes, kind == C::SendRecv ? 2 : ranks, device_time_params());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::launch(c10d::OpType type, nki::Collective kind, const char* name, rt::Stream& stream,
                                                          const std::vector<at::Tensor>& tensors,
                                                          std::vector<at::Tensor> outputs, std::function<void()> task) {
  const c10::DeviceIndex device =
      tensors.empty() ? static_cast<c10::DeviceIndex>(rt::current_device()) : tensors[0].device().index();
  return translate_errors([&]() -> c10::intrusive_ptr<c10d::Work> {
    rt::Stream& user = current_stream(device);
    if (&stream != &user) {
      rt::Event ready;
      ready.record(user);
      ready.block(stream);
      for (const at::Tensor& t : tensors)
        if (t.numel()) rt_device(device).allocator().record_stream(t.storage().data_ptr().get(), &stream);
    }
    stream.launch(name, std::move(task), collective_est_ns(kind, tensors, outputs, getSize()));
    auto done = std::make_shared<rt::Event>();
    done->record(stream);
    const bool blocking = type == c10d::OpType::BARRIER;
    return c10::make_intrusive<NeuronWork>(type, name, device, std::move(done), &stream, std::move(outputs), blocking);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue(c10d::OpType type, nki::Collective kind, const char* name,
                                                           const std::vector<at::Tensor>& tensors,
                                                           std::vector<at::Tensor> outputs, rt::CollectiveDesc desc,
                                                           std::function<void(const std::string&)> body) {
  c10::DeviceIndex device = tensors.empty() ? static_cast<c10::DeviceIndex>(rt::current_device()) : tensors[0].device().index();
  for (const at::Tensor& t : tensors)
    TORCH_CHECK(t.device().index() == device, "neuron collective ", name, ": tensors on different devices (neuron:",
                static_cast<int>(device), " and ", t.device(), ")");
  translate_errors([&] { check_usable(); });
  rt::Stream& gs = translate_errors([&]() -> rt::Stream& { return group_stream(device); });
  return launch(type, kind, name, gs, tensors, std::move(outputs),
                [this, desc = std::move(desc), body = std::move(body), keep = tensors]() mutable {
                  try {
                    run_collective(desc, body);
                  } catch (...) {
                    std::lock_guard<std::mutex> lock(graveyard_mu_);  // Gloo may still use them
                    graveyard_.insert(graveyard_.end(), keep.begin(), keep.end());
                    throw;
                  }
                });
}

void ProcessGroupNeuron::run_collective(const rt::CollectiveDesc& desc,
                                        const std::function<void(const std::string&)>& body) {
  const std::string what = str("neuron collective ", desc.op, " #", desc.seq);
  std::lock_guard<std::mutex> one_at_a_time(exchange_mu_);
  try {
    check_usable();
    shm_->begin(desc);
    if (all_) {
      // Agreement within the host, then among the counterparts, implies agreement of all: every
      // rank then takes the same steps (a mismatch found by some ranks reaches the others
      // through their shared memory or the watchdog). The ranks always check in this order and
      // in the same groups, so a mismatch cannot leave ranks waiting in different groups.
      const std::string checking = what + " (checking the calls of all ranks)";
      shm_->verify(timeout_);
      validate(desc, *fabric_.cross, checking);
      if (!desc.send_bytes.empty() && fabric_.cross != all_.get()) validate(desc, *all_, checking);  // splits, pairwise
    }
    body(what);
    shm_->end(timeout_);
  } catch (const std::exception& e) {
    fail(e.what());
    throw rt::Error(e.what());
  }
}

std::vector<std::string> ProcessGroupNeuron::kernel_all_gather(rt::CollectiveDesc desc, const std::string& in) {
  desc.seq = ++seq_;
  desc.tensors = std::max<uint32_t>(desc.tensors, 1);
  std::vector<std::string> out(static_cast<size_t>(size_));
  run_collective(desc, [&](const std::string& what) {
    // The lengths first (a rank's contribution may differ in size), then the bytes padded to
    // the longest.
    const uint64_t mine = in.size();
    std::vector<uint64_t> lens(static_cast<size_t>(size_));
    std::vector<char*> louts;
    for (auto& l : lens) louts.push_back(reinterpret_cast<char*>(&l));
    all_gather(fabric_, reinterpret_cast<const char*>(&mine), sizeof mine, louts, what);
    const uint64_t longest = *std::max_element(lens.begin(), lens.end());
    std::string padded = in;
    padded.resize(longest, '\0');
    std::vector<char*> outs;
    for (auto& o : out) {
      o.resize(longest);
      outs.push_back(o.data());
    }
    if (longest) all_gather(fabric_, padded.data(), longest, outs, what);
    for (size_t r = 0; r < out.size(); ++r) out[r].resize(lens[r]);
  });
  return out;
}

void ProcessGroupNeuron::validate(const rt::CollectiveDesc& desc, GlooLink& link, const std::string& what) {
  const size_t cap = rt::CollectiveDesc::max_encoded_size(size_);
  std::vector<char> mine(cap, 0), all(cap * static_cast<size_t>(link.size()));
  desc.encode(mine.data());
  link.all_gather(mine.data(), cap, all.data(), what);
  bool equal = true;
  for (int i = 0; i < link.size() && equal; ++i) equal = std::memcmp(all.data() + i * cap, mine.data(), cap) == 0;
  if (equal) return;
  std::vector<rt::CollectiveDesc> descs;
  for (int i = 0; i < link.size(); ++i) descs.push_back(rt::CollectiveDesc::decode(all.data() + i * cap, cap));
  const std::string msg = rt::collective_mismatch(descs, link.members(), group_);
  if (!msg.empty()) throw rt::Error(msg);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue_p2p(c10d::OpType type, const char* name, at::Tensor tensor,
                                                               int peer, bool sending, std::function<void()> body) {
  translate_errors([&] { check_usable(); });
  const c10::DeviceIndex device = tensor.device().index();
  rt::Stream& s = translate_errors([&]() -> rt::Stream& { return p2p_stream(device, peer, sending); });
  return launch(type, nki::Collective::SendRecv, name, s, {tensor}, {tensor}, [this, body = std::move(body), keep = tensor]() mutable {
    try {
      check_usable();
      body();
    } catch (const std::exception& e) {
      fail(e.what());
      std::lock_guard<std::mutex> lock(graveyard_mu_);
      graveyard_.push_back(keep);
      throw rt::Error(e.what());
    }
  });
}

// ---- collectives -------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "all_reduce"));
  const Op op = to_op(opts.reduceOp);
  return enqueue(c10d::OpType::ALLREDUCE, nki::Collective::AllReduce, "c10d::allreduce", tensors, tensors,
                 describe("all_reduce", tensors, op_name(op)), [this, spans, op](const std::string& what) {
                   for (const Span& s : spans) all_reduce(fabric_, s.ptr, s.ptr, s.numel, s.dtype, op, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  c10d::AllreduceOptions o;
  o.reduceOp = opts.reduceOp;
  o.timeout = opts.timeout;
  return allreduce(tensors, o);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  check_root(opts.rootRank, size_, "reduce");
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "reduce"));
  const Op op = to_op(opts.reduceOp);
  const bool root = opts.rootRank == rank_;
  return enqueue(c10d::OpType::REDUCE, nki::Collective::Broadcast, "c10d::reduce", tensors, tensors,
                 describe("reduce", tensors, op_name(op), static_cast<int>(opts.rootRank)),
                 [this, spans, op, root](const std::string& what) {
                   for (const Span& s : spans) all_reduce(fabric_, s.ptr, root ? s.ptr : nullptr, s.numel, s.dtype, op, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  check_root(opts.rootRank, size_, "broadcast");
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "broadcast"));
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, nki::Collective::Broadcast, "c10d::broadcast", tensors, tensors,
                 describe("broadcast", tensors, "", root), [this, spans, root](const std::string& what) {
                   for (const Span& s : spans) {
                     if (all_)
                       all_->broadcast(s.ptr, s.bytes(), root, what);
                     else
                       shm_broadcast(*shm_, s.ptr, s.bytes(), local(root), what.c_str(), timeout_);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  check_same(output, input, "all_gather_into_tensor");
  const Span in = span(input, "all_gather_into_tensor"), out = span(output, "all_gather_into_tensor");
  TORCH_CHECK(out.numel == in.numel * size_, "neuron collective all_gather_into_tensor: output has ", out.numel,
              " elements, expected world_size (", size_, ") x input (", in.numel, ")");
  std::vector<char*> outs;
  for (int r = 0; r < size_; ++r) outs.push_back(out.ptr + static_cast<size_t>(r) * in.bytes());
  return enqueue(c10d::OpType::_ALLGATHER_BASE, nki::Collective::AllGather, "c10d::all_gather_into_tensor", {input, output}, {output},
                 describe("all_gather_into_tensor", {input}),
                 [this, in, outs](const std::string& what) { all_gather(fabric_, in.ptr, in.bytes(), outs, what); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "neuron collective all_gather: expected one input tensor");
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "neuron collective all_gather: expected ", size_,
              " output tensors, got ", outputs[0].size());
  const Span in = span(inputs[0], "all_gather");
  std::vector<char*> outs;
  std::vector<at::Tensor> all{inputs[0]};
  for (auto& o : outputs[0]) {
    check_same(o, inputs[0], "all_gather");
    const Span s = span(o, "all_gather");
    TORCH_CHECK(s.numel == in.numel, "neuron collective all_gather: output has ", s.numel, " elements, input ", in.numel);
    outs.push_back(s.ptr);
    all.push_back(o);
  }
  return enqueue(c10d::OpType::ALLGATHER, nki::Collective::AllGather, "c10d::all_gather", all, outputs[0], describe("all_gather", inputs),
                 [this, in, outs](const std::string& what) { all_gather(fabric_, in.ptr, in.bytes(), outs, what); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron collective all_gather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<std::pair<Span, std::vector<char*>>> parts;
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_same(outputs[i], inputs[i], "all_gather_into_tensor_coalesced");
    const Span in = span(inputs[i], "all_gather_into_tensor_coalesced"), out = span(outputs[i], "all_gather_into_tensor_coalesced");
    TORCH_CHECK(out.numel == in.numel * size_, "neuron collective all_gather_into_tensor_coalesced: output ", i,
                " has ", out.numel, " elements, expected ", in.numel * size_);
    std::vector<char*> outs;
    for (int r = 0; r < size_; ++r) outs.push_back(out.ptr + static_cast<size_t>(r) * in.bytes());
    parts.emplace_back(in, outs);
    all.push_back(inputs[i]);
    all.push_back(outputs[i]);
  }
  return enqueue(c10d::OpType::COALESCED, nki::Collective::AllGather, "c10d::all_gather_into_tensor_coalesced", all, outputs,
                 describe("all_gather_into_tensor_coalesced", inputs),
                 [this, parts](const std::string& what) {
                   for (const auto& [in, outs] : parts) all_gather(fabric_, in.ptr, in.bytes(), outs, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "neuron collective gather: expected one input tensor");
  check_root(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const Span in = span(inputs[0], "gather");
  std::vector<char*> outs(static_cast<size_t>(size_), nullptr);
  std::vector<at::Tensor> all{inputs[0]};
  std::vector<at::Tensor> result;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "neuron collective gather: root needs ",
                size_, " output tensors");
    for (int r = 0; r < size_; ++r) {
      at::Tensor& o = outputs[0][static_cast<size_t>(r)];
      check_same(o, inputs[0], "gather");
      const Span s = span(o, "gather");
      TORCH_CHECK(s.numel == in.numel, "neuron collective gather: output ", r, " has ", s.numel, " elements, input ", in.numel);
      outs[static_cast<size_t>(r)] = s.ptr;
      all.push_back(o);
    }
    result = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "neuron collective gather: only the root passes output tensors");
  }
  return enqueue(c10d::OpType::GATHER, nki::Collective::Broadcast, "c10d::gather", all, result, describe("gather", inputs, "", root),
                 [this, in, outs](const std::string& what) { all_gather(fabric_, in.ptr, in.bytes(), outs, what); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "neuron collective scatter: expected one output tensor");
  check_root(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const Span out = span(outputs[0], "scatter");
  std::vector<const char*> ins(static_cast<size_t>(size_), nullptr);
  std::vector<at::Tensor> all{outputs[0]};
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "neuron collective scatter: root needs ",
                size_, " input tensors");
    for (int r = 0; r < size_; ++r) {
      const at::Tensor& t = inputs[0][static_cast<size_t>(r)];
      check_same(t, outputs[0], "scatter");
      const Span s = span(t, "scatter");
      TORCH_CHECK(s.numel == out.numel, "neuron collective scatter: input ", r, " has ", s.numel, " elements, output ", out.numel);
      ins[static_cast<size_t>(r)] = s.ptr;
      all.push_back(t);
    }
  }
  return enqueue(c10d::OpType::SCATTER, nki::Collective::Broadcast, "c10d::scatter", all, outputs, describe("scatter", outputs, "", root),
                 [this, ins, out, root](const std::string& what) {
                   if (all_)
                     all_->scatter({ins.begin(), ins.end()}, out.ptr, out.bytes(), root, what);
                   else
                     shm_scatter(*shm_, ins, out.ptr, out.bytes(), local(root), what.c_str(), timeout_);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  check_same(output, input, "reduce_scatter_tensor");
  const Span in = span(input, "reduce_scatter_tensor"), out = span(output, "reduce_scatter_tensor");
  TORCH_CHECK(in.numel == out.numel * size_, "neuron collective reduce_scatter_tensor: input has ", in.numel,
              " elements, expected world_size (", size_, ") x output (", out.numel, ")");
  const Op op = to_op(opts.reduceOp);
  std::vector<const char*> blocks;
  for (int r = 0; r < size_; ++r) blocks.push_back(in.ptr + static_cast<size_t>(r) * out.bytes());
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, nki::Collective::ReduceScatter, "c10d::reduce_scatter_tensor", {input, output}, {output},
                 describe("reduce_scatter_tensor", {input}, op_name(op)),
                 [this, blocks, out, op](const std::string& what) {
                   torch_glue::reduce_scatter(fabric_, blocks, out.ptr, out.numel, out.dtype, op, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "neuron collective reduce_scatter: expected one output and ", size_, " inputs");
  const Span out = span(outputs[0], "reduce_scatter");
  std::vector<const char*> blocks;
  std::vector<at::Tensor> all{outputs[0]};
  for (const auto& t : inputs[0]) {
    check_same(t, outputs[0], "reduce_scatter");
    const Span s = span(t, "reduce_scatter");
    TORCH_CHECK(s.numel == out.numel, "neuron collective reduce_scatter: input has ", s.numel, " elements, output ", out.numel);
    blocks.push_back(s.ptr);
    all.push_back(t);
  }
  const Op op = to_op(opts.reduceOp);
  return enqueue(c10d::OpType::REDUCE_SCATTER, nki::Collective::ReduceScatter, "c10d::reduce_scatter", all, outputs,
                 describe("reduce_scatter", outputs, op_name(op)),
                 [this, blocks, out, op](const std::string& what) {
                   torch_glue::reduce_scatter(fabric_, blocks, out.ptr, out.numel, out.dtype, op, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron collective reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<std::pair<std::vector<const char*>, Span>> parts;
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_same(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    const Span in = span(inputs[i], "reduce_scatter_tensor_coalesced"), out = span(outputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK(in.numel == out.numel * size_, "neuron collective reduce_scatter_tensor_coalesced: input ", i, " has ",
                in.numel, " elements, expected ", out.numel * size_);
    std::vector<const char*> blocks;
    for (int r = 0; r < size_; ++r) blocks.push_back(in.ptr + static_cast<size_t>(r) * out.bytes());
    parts.emplace_back(blocks, out);
    all.push_back(inputs[i]);
    all.push_back(outputs[i]);
  }
  const Op op = to_op(opts.reduceOp);
  return enqueue(c10d::OpType::COALESCED, nki::Collective::ReduceScatter, "c10d::reduce_scatter_tensor_coalesced", all, outputs,
                 describe("reduce_scatter_tensor_coalesced", inputs, op_name(op)),
                 [this, parts, op](const std::string& what) {
                   for (const auto& [blocks, out] : parts)
                     torch_glue::reduce_scatter(fabric_, blocks, out.ptr, out.numel, out.dtype, op, what);
                 });
}

namespace {

std::vector<int64_t> split_sizes(const std::vector<int64_t>& given, int64_t rows, int w, const char* which) {
  if (given.empty()) {
    TORCH_CHECK(rows % w == 0, "neuron collective all_to_all_single: ", which, " dim 0 (", rows,
                ") is not divisible by the world size (", w, ")");
    return std::vector<int64_t>(static_cast<size_t>(w), rows / w);
  }
  TORCH_CHECK(static_cast<int>(given.size()) == w, "neuron collective all_to_all_single: ", which, " split sizes has ",
              given.size(), " entries for world size ", w);
  int64_t sum = 0;
  for (auto v : given) {
    TORCH_CHECK(v >= 0, "neuron collective all_to_all_single: negative split size");
    sum += v;
  }
  TORCH_CHECK(sum == rows, "neuron collective all_to_all_single: ", which, " split sizes sum to ", sum,
              " but dim 0 is ", rows);
  return given;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& output_split_sizes,
                                                                 std::vector<int64_t>& input_split_sizes,
                                                                 const c10d::AllToAllOptions&) {
  check_same(output, input, "all_to_all_single");
  const Span in = span(input, "all_to_all_single"), out = span(output, "all_to_all_single");
  const int64_t in_rows = input.dim() ? input.size(0) : 1, out_rows = output.dim() ? output.size(0) : 1;
  const auto is = split_sizes(input_split_sizes, in_rows, size_, "input");
  const auto os = split_sizes(output_split_sizes, out_rows, size_, "output");
  const size_t in_row_bytes = in_rows ? static_cast<size_t>(in.numel / in_rows) * in.es : 0;
  const size_t out_row_bytes = out_rows ? static_cast<size_t>(out.numel / out_rows) * out.es : 0;
  std::vector<std::pair<const char*, size_t>> send;
  std::vector<std::pair<char*, size_t>> recv;
  rt::CollectiveDesc d = describe("all_to_all_single", {});
  d.dtype = dtype_text(input);
  d.bytes = in.bytes();
  size_t ioff = 0, ooff = 0;
  for (int r = 0; r < size_; ++r) {
    send.emplace_back(in.ptr + ioff, static_cast<size_t>(is[static_cast<size_t>(r)]) * in_row_bytes);
    ioff += send.back().second;
    recv.emplace_back(out.ptr + ooff, static_cast<size_t>(os[static_cast<size_t>(r)]) * out_row_bytes);
    ooff += recv.back().second;
    d.send_bytes.push_back(send.back().second);
    d.recv_bytes.push_back(recv.back().second);
  }
  return enqueue(c10d::OpType::ALLTOALL_BASE, nki::Collective::AllToAll, "c10d::all_to_all_single", {input, output}, {output}, std::move(d),
                 [this, send, recv, in, out](const std::string& what) {
                   if (!all_) return shm_all_to_all(*shm_, send, recv, what.c_str(), timeout_);
                   std::vector<size_t> ss, rs;
                   for (const auto& s : send) ss.push_back(s.second);
                   for (const auto& r : recv) rs.push_back(r.second);
                   all_->all_to_all(in.ptr, ss, out.ptr, rs, what);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "neuron collective all_to_all: expected ", size_, " inputs and outputs");
  std::vector<std::pair<const char*, size_t>> send;
  std::vector<std::pair<char*, size_t>> recv;
  std::vector<at::Tensor> all;
  rt::CollectiveDesc d = describe("all_to_all", {});
  d.dtype = dtype_text(inputs[0]);
  for (int r = 0; r < size_; ++r) {
    check_same(outputs[static_cast<size_t>(r)], inputs[0], "all_to_all");
    check_same(inputs[static_cast<size_t>(r)], inputs[0], "all_to_all");
    const Span i = span(inputs[static_cast<size_t>(r)], "all_to_all"), o = span(outputs[static_cast<size_t>(r)], "all_to_all");
    send.emplace_back(i.ptr, i.bytes());
    recv.emplace_back(o.ptr, o.bytes());
    d.send_bytes.push_back(i.bytes());
    d.recv_bytes.push_back(o.bytes());
    d.bytes += i.bytes();
    all.push_back(inputs[static_cast<size_t>(r)]);
    all.push_back(outputs[static_cast<size_t>(r)]);
  }
  return enqueue(c10d::OpType::ALLTOALL, nki::Collective::AllToAll, "c10d::all_to_all", all, outputs, std::move(d),
                 [this, send, recv](const std::string& what) {
                   if (!all_) return shm_all_to_all(*shm_, send, recv, what.c_str(), timeout_);
                   // Gloo's all-to-all takes one buffer per direction: pack, exchange, unpack.
                   std::vector<size_t> ss, rs;
                   size_t sb = 0, rb = 0;
                   for (const auto& s : send) ss.push_back(s.second), sb += s.second;
                   for (const auto& r : recv) rs.push_back(r.second), rb += r.second;
                   std::vector<char> packed(sb), unpacked(rb);
                   size_t off = 0;
                   for (const auto& [p, n] : send) std::memcpy(packed.data() + off, p, n), off += n;
                   all_->all_to_all(packed.data(), ss, unpacked.data(), rs, what);
                   off = 0;
                   for (const auto& [p, n] : recv) std::memcpy(p, unpacked.data() + off, n), off += n;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, nki::Collective::Barrier, "c10d::barrier", {}, {}, describe("barrier", {}),
                 [this](const std::string& what) {
                   if (all_) all_->barrier(what);
                 });
}

// ---- point-to-point ------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron send: expected one tensor");
  TORCH_CHECK(dst_rank >= 0 && dst_rank < size_ && dst_rank != rank_, "neuron send: bad destination rank ", dst_rank);
  const Span s = span(tensors[0], "send");
  rt::CollectiveDesc d;
  d.op = "send";
  d.dtype = dtype_text(tensors[0]);
  d.shape = tensors[0].sizes().vec();
  d.numel = static_cast<uint64_t>(s.numel);
  d.bytes = s.bytes();
  return enqueue_p2p(c10d::OpType::SEND, "c10d::send", tensors[0], dst_rank, true, [this, s, d, dst_rank, tag] {
    if (same_host(dst_rank))
      shm_->send(local(dst_rank), s.ptr, s.bytes(), d, timeout_);
    else if (s.bytes())
      all_->send(s.ptr, s.bytes(), dst_rank, tag, str("neuron send to rank ", dst_rank));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron recv: expected one tensor");
  TORCH_CHECK(src_rank >= 0 && src_rank < size_ && src_rank != rank_, "neuron recv: bad source rank ", src_rank);
  const Span s = span(tensors[0], "recv");
  rt::CollectiveDesc d;
  d.op = "recv";
  d.dtype = dtype_text(tensors[0]);
  d.shape = tensors[0].sizes().vec();
  d.numel = static_cast<uint64_t>(s.numel);
  d.bytes = s.bytes();
  return enqueue_p2p(c10d::OpType::RECV, "c10d::recv", tensors[0], src_rank, false, [this, s, d, src_rank, tag] {
    if (same_host(src_rank))
      shm_->recv(local(src_rank), s.ptr, s.bytes(), d, timeout_);
    else if (s.bytes())
      all_->recv(s.ptr, s.bytes(), src_rank, tag, str("neuron recv from rank ", src_rank));
  });
}

}  // namespace neuron::torch_glue
