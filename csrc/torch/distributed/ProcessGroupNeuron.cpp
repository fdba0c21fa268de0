#include "ProcessGroupNeuron.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "../Common.h"
#include "kernels/collective_reduce.h"
#include "runtime/event.h"

namespace neuron::torch_glue {

namespace {

using Op = kernels::CollectiveOp;

size_t env_mib(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  const long n = std::strtol(v, nullptr, 10);
  TORCH_CHECK(n > 0 && n <= 4096, name, "=", v, ": expected a size in MiB in [1, 4096]");
  return static_cast<size_t>(n);
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

// A contiguous neuron tensor as raw bytes.
struct Span {
  char* ptr;
  int64_t numel;
  size_t es;
  kernels::DType dtype;
};

Span span(const at::Tensor& t, const char* op) {
  TORCH_CHECK(is_neuron(t), "neuron collective ", op, ": expected tensors on a neuron device, got one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), "neuron collective ", op, ": tensors must be contiguous");
  const kernels::DType dt = to_kernel_dtype(t.scalar_type());
  TORCH_CHECK(dt != kernels::DType::Undefined, "neuron collective ", op, ": unsupported dtype ", t.scalar_type());
  return {t.numel() ? static_cast<char*>(t.data_ptr()) : nullptr, t.numel(), static_cast<size_t>(t.element_size()), dt};
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "neuron collective ", op, ": dtype mismatch (", a.scalar_type(),
              " vs ", b.scalar_type(), ")");
  TORCH_CHECK(a.device() == b.device(), "neuron collective ", op, ": tensors on ", a.device(), " and ", b.device());
}

class NeuronWork final : public c10d::Work {
 public:
  NeuronWork(c10d::OpType type, const char* name, c10::DeviceIndex device, std::shared_ptr<rt::Event> done,
             rt::Stream* group_stream, std::vector<at::Tensor> outputs, bool host_blocking)
      : c10d::Work(-1, type, name),
        name_(name),
        device_(device),
        done_(std::move(done)),
        group_stream_(group_stream),
        outputs_(std::move(outputs)),
        host_blocking_(host_blocking) {}

  bool isCompleted() override { return done_->query(); }
  bool isSuccess() const override { return done_->query(); }

  bool wait(std::chrono::milliseconds) override {
    if (host_blocking_) {
      synchronize();
      return true;
    }
    // The caller's stream continues after the collective; a failure of the collective (e.g. a
    // timeout waiting for peers) surfaces at that stream's next synchronization.
    translate_errors([&] {
      rt::Stream& user = current_stream(device_);
      done_->block(user);
      rt::Stream* gs = group_stream_;
      user.launch(name_, [gs] { gs->check_error(); });
    });
    return true;
  }

  void synchronize() override {
    translate_errors([&] {
      done_->synchronize();
      group_stream_->check_error();
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
  rt::Stream* group_stream_;
  std::vector<at::Tensor> outputs_;
  bool host_blocking_;
};

}  // namespace

ProcessGroupNeuron::ProcessGroupNeuron(const std::string& prefix, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  const size_t slot = env_mib("NEURON_EMU_COLLECTIVE_SLOT_MB", 16) << 20;
  const size_t mailbox = env_mib("NEURON_EMU_COLLECTIVE_MAILBOX_MB", 4) << 20;
  comm_ = translate_errors([&] { return std::make_unique<rt::ShmComm>(prefix, rank, size, slot, mailbox); });
}

ProcessGroupNeuron::~ProcessGroupNeuron() {
  // Queued collectives hold a raw pointer to the transport: let them finish first.
  std::lock_guard<std::mutex> lock(streams_mu_);
  for (rt::Stream* s : streams_) {
    if (!s) continue;
    try {
      s->synchronize();
    } catch (...) {
    }
  }
}

void ProcessGroupNeuron::connect_once() {
  std::call_once(connected_, [&] { translate_errors([&] { comm_->connect(timeout_); }); });
}

rt::Stream& ProcessGroupNeuron::group_stream(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  const size_t d = static_cast<size_t>(device);
  if (streams_.size() <= d) streams_.resize(d + 1, nullptr);
  if (!streams_[d]) streams_[d] = &rt_device(device).pool_stream(0);
  return *streams_[d];
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue(c10d::OpType type, const char* name,
                                                           const std::vector<at::Tensor>& tensors,
                                                           std::vector<at::Tensor> outputs, std::function<void()> body) {
  connect_once();
  c10::DeviceIndex device = tensors.empty() ? static_cast<c10::DeviceIndex>(rt::current_device()) : tensors[0].device().index();
  for (const at::Tensor& t : tensors)
    TORCH_CHECK(t.device().index() == device, "neuron collective ", name, ": tensors on different devices (neuron:",
                static_cast<int>(device), " and ", t.device(), ")");
  return translate_errors([&]() -> c10::intrusive_ptr<c10d::Work> {
    rt::Stream& user = current_stream(device);
    rt::Stream& gs = group_stream(device);
    if (&gs != &user) {
      rt::Event ready;
      ready.record(user);
      ready.block(gs);
      for (const at::Tensor& t : tensors)
        if (t.numel()) rt_device(device).allocator().record_stream(t.storage().data_ptr().get(), &gs);
    }
    gs.launch(name, std::move(body));
    auto done = std::make_shared<rt::Event>();
    done->record(gs);
    const bool blocking = type == c10d::OpType::BARRIER;
    return c10::make_intrusive<NeuronWork>(type, name, device, std::move(done), &gs, std::move(outputs), blocking);
  });
}

// ---- collectives -----------------------------------------------------------------------------
// Protocol for every chunk: each rank writes its part into its own slot, barrier, each rank
// reads what it needs from the slots, barrier (so slots can be overwritten).

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "allreduce"));
  const Op op = to_op(opts.reduceOp);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::ALLREDUCE, "c10d::allreduce", tensors, tensors, [=] {
    const int w = comm->world();
    for (const Span& s : spans) {
      const int64_t per = static_cast<int64_t>(comm->slot_bytes() / s.es);
      for (int64_t off = 0; off < s.numel; off += per) {
        const int64_t cnt = std::min(per, s.numel - off);
        char* mine = s.ptr + off * static_cast<int64_t>(s.es);
        std::memcpy(comm->slot(comm->rank()), mine, static_cast<size_t>(cnt) * s.es);
        comm->barrier("allreduce", to);
        std::vector<const void*> srcs;
        for (int r = 0; r < w; ++r) srcs.push_back(comm->slot(r));
        kernels::collective_reduce(mine, srcs, cnt, s.dtype, op);
        comm->barrier("allreduce", to);
      }
    }
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
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "neuron collective reduce: root ", opts.rootRank,
              " not in [0, ", size_, ")");
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "reduce"));
  const Op op = to_op(opts.reduceOp);
  const int root = static_cast<int>(opts.rootRank);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::REDUCE, "c10d::reduce", tensors, tensors, [=] {
    for (const Span& s : spans) {
      const int64_t per = static_cast<int64_t>(comm->slot_bytes() / s.es);
      for (int64_t off = 0; off < s.numel; off += per) {
        const int64_t cnt = std::min(per, s.numel - off);
        char* mine = s.ptr + off * static_cast<int64_t>(s.es);
        std::memcpy(comm->slot(comm->rank()), mine, static_cast<size_t>(cnt) * s.es);
        comm->barrier("reduce", to);
        if (comm->rank() == root) {
          std::vector<const void*> srcs;
          for (int r = 0; r < comm->world(); ++r) srcs.push_back(comm->slot(r));
          kernels::collective_reduce(mine, srcs, cnt, s.dtype, op);
        }
        comm->barrier("reduce", to);
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "neuron collective broadcast: root ", opts.rootRank,
              " not in [0, ", size_, ")");
  std::vector<Span> spans;
  for (const auto& t : tensors) spans.push_back(span(t, "broadcast"));
  const int root = static_cast<int>(opts.rootRank);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::BROADCAST, "c10d::broadcast", tensors, tensors, [=] {
    for (const Span& s : spans) {
      const size_t bytes = static_cast<size_t>(s.numel) * s.es;
      for (size_t off = 0; off < bytes; off += comm->slot_bytes()) {
        const size_t cnt = std::min(comm->slot_bytes(), bytes - off);
        if (comm->rank() == root) std::memcpy(comm->slot(root), s.ptr + off, cnt);
        comm->barrier("broadcast", to);
        if (comm->rank() != root) std::memcpy(s.ptr + off, comm->slot(root), cnt);
        comm->barrier("broadcast", to);
      }
    }
  });
}

namespace {

// Gathers `in` from every rank into outs[r] (a null outs entry skips the copy).
void gather_bytes(rt::ShmComm* comm, const char* in, size_t bytes, const std::vector<char*>& outs, const char* what,
                  std::chrono::milliseconds to) {
  for (size_t off = 0; off < bytes; off += comm->slot_bytes()) {
    const size_t cnt = std::min(comm->slot_bytes(), bytes - off);
    std::memcpy(comm->slot(comm->rank()), in + off, cnt);
    comm->barrier(what, to);
    for (int r = 0; r < comm->world(); ++r)
      if (outs[static_cast<size_t>(r)]) std::memcpy(outs[static_cast<size_t>(r)] + off, comm->slot(r), cnt);
    comm->barrier(what, to);
  }
}

// out = reduction over ranks of their block `rank()` from ins (ins[r] = this rank's block for r).
void reduce_scatter_elems(rt::ShmComm* comm, const std::vector<const char*>& ins, char* out, int64_t n, size_t es,
                          kernels::DType dt, Op op, std::chrono::milliseconds to) {
  const int w = comm->world();
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(comm->slot_bytes() / (es * static_cast<size_t>(w))));
  for (int64_t off = 0; off < n; off += per) {
    const int64_t cnt = std::min(per, n - off);
    const size_t cb = static_cast<size_t>(cnt) * es;
    for (int r = 0; r < w; ++r)
      std::memcpy(comm->slot(comm->rank()) + static_cast<size_t>(r) * cb, ins[static_cast<size_t>(r)] + off * static_cast<int64_t>(es), cb);
    comm->barrier("reduce_scatter", to);
    std::vector<const void*> srcs;
    for (int q = 0; q < w; ++q) srcs.push_back(comm->slot(q) + static_cast<size_t>(comm->rank()) * cb);
    kernels::collective_reduce(out + off * static_cast<int64_t>(es), srcs, cnt, dt, op);
    comm->barrier("reduce_scatter", to);
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  check_same(output, input, "all_gather_into_tensor");
  const Span in = span(input, "all_gather_into_tensor"), out = span(output, "all_gather_into_tensor");
  TORCH_CHECK(out.numel == in.numel * size_, "neuron collective all_gather_into_tensor: output has ", out.numel,
              " elements, expected world_size (", size_, ") x input (", in.numel, ")");
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "c10d::all_gather_into_tensor", {input, output}, {output}, [=] {
    const size_t bytes = static_cast<size_t>(in.numel) * in.es;
    std::vector<char*> outs;
    for (int r = 0; r < comm->world(); ++r) outs.push_back(out.ptr + static_cast<size_t>(r) * bytes);
    gather_bytes(comm, in.ptr, bytes, outs, "all_gather_into_tensor", to);
  });
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
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::ALLGATHER, "c10d::all_gather", all, outputs[0], [=] {
    gather_bytes(comm, in.ptr, static_cast<size_t>(in.numel) * in.es, outs, "all_gather", to);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron collective all_gather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<std::pair<Span, Span>> pairs;
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_same(outputs[i], inputs[i], "all_gather_into_tensor_coalesced");
    const Span in = span(inputs[i], "all_gather_into_tensor_coalesced"), out = span(outputs[i], "all_gather_into_tensor_coalesced");
    TORCH_CHECK(out.numel == in.numel * size_, "neuron collective all_gather_into_tensor_coalesced: output ", i,
                " has ", out.numel, " elements, expected ", in.numel * size_);
    pairs.emplace_back(in, out);
    all.push_back(inputs[i]);
    all.push_back(outputs[i]);
  }
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::COALESCED, "c10d::all_gather_into_tensor_coalesced", all, outputs, [=] {
    for (const auto& [in, out] : pairs) {
      const size_t bytes = static_cast<size_t>(in.numel) * in.es;
      std::vector<char*> outs;
      for (int r = 0; r < comm->world(); ++r) outs.push_back(out.ptr + static_cast<size_t>(r) * bytes);
      gather_bytes(comm, in.ptr, bytes, outs, "all_gather_into_tensor_coalesced", to);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "neuron collective gather: expected one input tensor");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "neuron collective gather: root ", root, " not in [0, ", size_, ")");
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
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::GATHER, "c10d::gather", all, result, [=] {
    gather_bytes(comm, in.ptr, static_cast<size_t>(in.numel) * in.es, outs, "gather", to);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "neuron collective scatter: expected one output tensor");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "neuron collective scatter: root ", root, " not in [0, ", size_, ")");
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
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::SCATTER, "c10d::scatter", all, outputs, [=] {
    const int w = comm->world();
    const size_t bytes = static_cast<size_t>(out.numel) * out.es;
    const size_t per = std::max<size_t>(1, comm->slot_bytes() / static_cast<size_t>(w));
    for (size_t off = 0; off < bytes; off += per) {
      const size_t cnt = std::min(per, bytes - off);
      if (comm->rank() == root)
        for (int r = 0; r < w; ++r) std::memcpy(comm->slot(root) + static_cast<size_t>(r) * per, ins[static_cast<size_t>(r)] + off, cnt);
      comm->barrier("scatter", to);
      std::memcpy(out.ptr + off, comm->slot(root) + static_cast<size_t>(comm->rank()) * per, cnt);
      comm->barrier("scatter", to);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  check_same(output, input, "reduce_scatter_tensor");
  const Span in = span(input, "reduce_scatter_tensor"), out = span(output, "reduce_scatter_tensor");
  TORCH_CHECK(in.numel == out.numel * size_, "neuron collective reduce_scatter_tensor: input has ", in.numel,
              " elements, expected world_size (", size_, ") x output (", out.numel, ")");
  const Op op = to_op(opts.reduceOp);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "c10d::reduce_scatter_tensor", {input, output}, {output}, [=] {
    std::vector<const char*> ins;
    for (int r = 0; r < comm->world(); ++r) ins.push_back(in.ptr + static_cast<size_t>(r * out.numel) * in.es);
    reduce_scatter_elems(comm, ins, out.ptr, out.numel, out.es, out.dtype, op, to);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "neuron collective reduce_scatter: expected one output and ", size_, " inputs");
  const Span out = span(outputs[0], "reduce_scatter");
  std::vector<const char*> ins;
  std::vector<at::Tensor> all{outputs[0]};
  for (const auto& t : inputs[0]) {
    check_same(t, outputs[0], "reduce_scatter");
    const Span s = span(t, "reduce_scatter");
    TORCH_CHECK(s.numel == out.numel, "neuron collective reduce_scatter: input has ", s.numel, " elements, output ", out.numel);
    ins.push_back(s.ptr);
    all.push_back(t);
  }
  const Op op = to_op(opts.reduceOp);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::REDUCE_SCATTER, "c10d::reduce_scatter", all, outputs, [=] {
    reduce_scatter_elems(comm, ins, out.ptr, out.numel, out.es, out.dtype, op, to);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron collective reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<std::pair<Span, Span>> pairs;
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_same(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    const Span in = span(inputs[i], "reduce_scatter_tensor_coalesced"), out = span(outputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK(in.numel == out.numel * size_, "neuron collective reduce_scatter_tensor_coalesced: input ", i, " has ",
                in.numel, " elements, expected ", out.numel * size_);
    pairs.emplace_back(in, out);
    all.push_back(inputs[i]);
    all.push_back(outputs[i]);
  }
  const Op op = to_op(opts.reduceOp);
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::COALESCED, "c10d::reduce_scatter_tensor_coalesced", all, outputs, [=] {
    for (const auto& [in, out] : pairs) {
      std::vector<const char*> ins;
      for (int r = 0; r < comm->world(); ++r) ins.push_back(in.ptr + static_cast<size_t>(r * out.numel) * in.es);
      reduce_scatter_elems(comm, ins, out.ptr, out.numel, out.es, out.dtype, op, to);
    }
  });
}

namespace {

// Personalised all-to-all: send[q] = (ptr, bytes) goes to rank q, recv[p] = (ptr, bytes) comes
// from rank p. Block sizes may differ; the ranks first agree on the largest one.
void alltoall_bytes(rt::ShmComm* comm, const std::vector<std::pair<const char*, size_t>>& send,
                    const std::vector<std::pair<char*, size_t>>& recv, std::chrono::milliseconds to) {
  const int w = comm->world();
  uint64_t mine = 0;
  for (const auto& s : send) mine = std::max<uint64_t>(mine, s.second);
  std::memcpy(comm->slot(comm->rank()), &mine, sizeof(mine));
  comm->barrier("all_to_all", to);
  uint64_t largest = 0;
  for (int r = 0; r < w; ++r) {
    uint64_t v;
    std::memcpy(&v, comm->slot(r), sizeof(v));
    largest = std::max(largest, v);
  }
  comm->barrier("all_to_all", to);
  const size_t c = std::max<size_t>(1, comm->slot_bytes() / static_cast<size_t>(w));
  for (size_t off = 0; off < largest; off += c) {
    for (int q = 0; q < w; ++q) {
      const auto& [ptr, bytes] = send[static_cast<size_t>(q)];
      if (bytes > off) std::memcpy(comm->slot(comm->rank()) + static_cast<size_t>(q) * c, ptr + off, std::min(c, bytes - off));
    }
    comm->barrier("all_to_all", to);
    for (int p = 0; p < w; ++p) {
      const auto& [ptr, bytes] = recv[static_cast<size_t>(p)];
      if (bytes > off) std::memcpy(ptr + off, comm->slot(p) + static_cast<size_t>(comm->rank()) * c, std::min(c, bytes - off));
    }
    comm->barrier("all_to_all", to);
  }
}

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
  size_t ioff = 0, ooff = 0;
  for (int r = 0; r < size_; ++r) {
    send.emplace_back(in.ptr + ioff, static_cast<size_t>(is[static_cast<size_t>(r)]) * in_row_bytes);
    ioff += send.back().second;
    recv.emplace_back(out.ptr + ooff, static_cast<size_t>(os[static_cast<size_t>(r)]) * out_row_bytes);
    ooff += recv.back().second;
  }
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::ALLTOALL_BASE, "c10d::all_to_all_single", {input, output}, {output},
                 [=] { alltoall_bytes(comm, send, recv, to); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "neuron collective all_to_all: expected ", size_, " inputs and outputs");
  std::vector<std::pair<const char*, size_t>> send;
  std::vector<std::pair<char*, size_t>> recv;
  std::vector<at::Tensor> all;
  for (int r = 0; r < size_; ++r) {
    check_same(outputs[static_cast<size_t>(r)], inputs[0], "all_to_all");
    check_same(inputs[static_cast<size_t>(r)], inputs[0], "all_to_all");
    const Span i = span(inputs[static_cast<size_t>(r)], "all_to_all"), o = span(outputs[static_cast<size_t>(r)], "all_to_all");
    send.emplace_back(i.ptr, static_cast<size_t>(i.numel) * i.es);
    recv.emplace_back(o.ptr, static_cast<size_t>(o.numel) * o.es);
    all.push_back(inputs[static_cast<size_t>(r)]);
    all.push_back(outputs[static_cast<size_t>(r)]);
  }
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::ALLTOALL, "c10d::all_to_all", all, outputs, [=] { alltoall_bytes(comm, send, recv, to); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors, int dst_rank, int) {
  TORCH_CHECK(tensors.size() == 1, "neuron send: expected one tensor");
  TORCH_CHECK(dst_rank >= 0 && dst_rank < size_ && dst_rank != rank_, "neuron send: bad destination rank ", dst_rank);
  const Span s = span(tensors[0], "send");
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::SEND, "c10d::send", tensors, tensors,
                 [=] { comm->send(dst_rank, s.ptr, static_cast<size_t>(s.numel) * s.es, to); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors, int src_rank, int) {
  TORCH_CHECK(tensors.size() == 1, "neuron recv: expected one tensor");
  TORCH_CHECK(src_rank >= 0 && src_rank < size_ && src_rank != rank_, "neuron recv: bad source rank ", src_rank);
  const Span s = span(tensors[0], "recv");
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::RECV, "c10d::recv", tensors, tensors,
                 [=] { comm->recv(src_rank, s.ptr, static_cast<size_t>(s.numel) * s.es, to); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions&) {
  rt::ShmComm* comm = comm_.get();
  const auto to = timeout_;
  return enqueue(c10d::OpType::BARRIER, "c10d::barrier", {}, {}, [=] { comm->barrier("barrier", to); });
}

}  // namespace neuron::torch_glue
