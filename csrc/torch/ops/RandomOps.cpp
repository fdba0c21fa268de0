// Random ops on the neuron device: uniform_, normal_ (and the normal() overloads), bernoulli_
// (scalar and tensor p), bernoulli.out, random_ (all overloads), exponential_, geometric_,
// cauchy_, log_normal_, randperm, native_dropout (+ backward).
// Each op reserves a block of Philox counters from the generator (the tensor's device default
// generator when none is given) under the generator's mutex, then queues the fill; element i's
// value depends only on (seed, offset, i), never on the thread count (kernels/random.h).
#include <ATen/core/Generator.h>
#include <ATen/native/Resize.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "../Common.h"
#include "../DtypeContract.h"
#include "../NeuronGenerator.h"
#include "EwLaunch.h"
#include "kernels/random.h"

namespace neuron::torch_glue {
namespace {

using kernels::RandOp;

std::pair<uint64_t, uint64_t> reserve(const std::optional<at::Generator>& gen,
                                      c10::DeviceIndex device, uint64_t blocks) {
  const at::Generator& dflt = default_generator(device);
  auto* impl = at::get_generator_or_default<NeuronGeneratorImpl>(gen, dflt);
  at::Generator holder = gen.has_value() && gen->defined() ? *gen : dflt;
  std::lock_guard<std::mutex> lock(holder.mutex());
  return impl->philox_inputs(blocks);
}

template <class Op, class... A>
decltype(auto) fallback(A&&... a) {
  return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(std::forward<A>(a)...);
}

bool supported(RandOp op, const at::Tensor& t) {
  return !t.is_complex() && kernels::rand_supports(op, to_kernel_dtype(t.scalar_type()));
}

struct RandTask {
  RandOp op = RandOp::Uniform;
  kernels::RandParams p;
  uint64_t seed = 0, offset = 0;
  bool has_prob = false, has_in = false, has_mask = false;
  kernels::TensorRef out, prob, in, mask;
  void operator()() const {
    kernels::random_fill(op, p, seed, offset, out, has_prob ? &prob : nullptr,
                         has_in ? &in : nullptr, has_mask ? &mask : nullptr);
  }
};

// Reserves counters for `self` and queues the fill.
void launch_fill(const char* name, RandOp op, const kernels::RandParams& p, const at::Tensor& self,
                 const std::optional<at::Generator>& gen, const at::Tensor* prob = nullptr) {
  dtype_contract::note(self.scalar_type());
  const auto [seed, offset] =
      reserve(gen, self.device().index(),
              kernels::rand_blocks(op, to_kernel_dtype(self.scalar_type()), self.numel()));
  if (self.numel() == 0) return;
  RandTask t;
  t.op = op;
  t.p = p;
  t.seed = seed;
  t.offset = offset;
  t.out = make_ref(self);
  if (prob) {
    t.has_prob = true;
    t.prob = make_ref(*prob);
  }
  launch(self.device().index(), name, t);
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  using Op = at::_ops::uniform_;
  track_op<Op>();
  if (!supported(RandOp::Uniform, self)) return fallback<Op>(self, from, to, gen);
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
              " > to=", to);
  TORCH_CHECK(to - from <= std::numeric_limits<double>::max(),
              "uniform_ expects to-from <= std::numeric_limits<", self.scalar_type(),
              ">::max(), but found to=", to, " and from=", from,
              " which result in to-from to exceed the limit");
  kernels::RandParams p;
  p.a = from;
  p.b = to;
  launch_fill(op_name<Op>(), RandOp::Uniform, p, self, gen);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  using Op = at::_ops::normal_;
  track_op<Op>();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  if (!supported(RandOp::Normal, self)) return fallback<Op>(self, mean, std, gen);
  kernels::RandParams p;
  p.a = mean;
  p.b = std;
  launch_fill(op_name<Op>(), RandOp::Normal, p, self, gen);
  return self;
}

// normal(mean, std) overloads: a standard normal sample scaled and shifted (like ATen).
at::Tensor& normal_out_impl(at::Tensor& out, const at::Tensor& mean, const at::Tensor& std,
                            std::optional<at::Generator> gen) {
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  TORCH_CHECK(std.numel() == 0 || std.is_meta() || std.min().ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
  const auto shape = at::infer_size(mean.sizes(), std.sizes());
  at::native::resize_output(out, shape);
  normal_(out, 0, 1, gen);
  out.mul_(std).add_(mean);
  return out;
}

at::Tensor normal_tensor_float(const at::Tensor& mean, double std,
                               std::optional<at::Generator> gen) {
  track_op<at::_ops::normal_Tensor_float>();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  at::Tensor out = at::empty_like(mean, at::MemoryFormat::Contiguous);
  normal_(out, 0, std, gen);
  return out.add_(mean);
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std,
                                    std::optional<at::Generator> gen, at::Tensor& out) {
  track_op<at::_ops::normal_Tensor_float_out>();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  at::native::resize_output(out, mean.sizes());
  normal_(out, 0, std, gen);
  out.add_(mean);
  return out;
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std,
                               std::optional<at::Generator> gen) {
  track_op<at::_ops::normal_float_Tensor>();
  at::Tensor out = at::empty_like(std, at::MemoryFormat::Contiguous);
  at::Tensor m = at::scalar_tensor(mean, std.options().device(at::kCPU));
  return normal_out_impl(out, m, std, gen);
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std,
                                    std::optional<at::Generator> gen, at::Tensor& out) {
  track_op<at::_ops::normal_float_Tensor_out>();
  at::Tensor m = at::scalar_tensor(mean, std.options().device(at::kCPU));
  return normal_out_impl(out, m, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std,
                                std::optional<at::Generator> gen) {
  track_op<at::_ops::normal_Tensor_Tensor>();
  at::Tensor out = at::empty({0}, mean.options());
  return normal_out_impl(out, mean, std, gen);
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std,
                                     std::optional<at::Generator> gen, at::Tensor& out) {
  track_op<at::_ops::normal_Tensor_Tensor_out>();
  return normal_out_impl(out, mean, std, gen);
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  using Op = at::_ops::bernoulli__float;
  track_op<Op>();
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  if (!supported(RandOp::Bernoulli, self)) return fallback<Op>(self, p, gen);
  kernels::RandParams rp;
  rp.a = p;
  launch_fill(op_name<Op>(), RandOp::Bernoulli, rp, self, gen);
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p,
                             std::optional<at::Generator> gen) {
  using Op = at::_ops::bernoulli__Tensor;
  track_op<Op>();
  if (!supported(RandOp::Bernoulli, self) || !at::isFloatingType(p.scalar_type()) || !is_neuron(p))
    return fallback<Op>(self, p, gen);
  const at::Tensor pe = p.expand(self.sizes());
  launch_fill(op_name<Op>(), RandOp::Bernoulli, {}, self, gen, &pe);
  return self;
}

at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen,
                          at::Tensor& out) {
  track_op<at::_ops::bernoulli_out>();
  at::native::resize_output(out, self.sizes());
  return bernoulli_tensor(out, self, gen);
}

// random_: base + (bits % range); range 0 means the full 64-bit range.
at::Tensor& random_range(const char* name, at::Tensor& self, int64_t base, uint64_t range,
                         std::optional<at::Generator> gen) {
  kernels::RandParams p;
  p.ia = base;
  p.ib = range;
  launch_fill(name, RandOp::RandomRange, p, self, gen);
  return self;
}

int64_t max_for(const at::Tensor& self) {
  switch (self.scalar_type()) {
    case at::kHalf:
      return 1LL << 11;
    case at::kBFloat16:
      return 1LL << 8;
    case at::kFloat:
      return 1LL << 24;
    case at::kDouble:
      return 1LL << 53;
    case at::kBool:
      return 1;
    case at::kByte:
      return 255;
    case at::kChar:
      return 127;
    case at::kShort:
      return 32767;
    case at::kInt:
      return 2147483647;
    default:
      return std::numeric_limits<int64_t>::max();
  }
}
int64_t min_for(const at::Tensor& self) {
  switch (self.scalar_type()) {
    case at::kHalf:
      return -(1LL << 11);
    case at::kBFloat16:
      return -(1LL << 8);
    case at::kFloat:
      return -(1LL << 24);
    case at::kDouble:
      return -(1LL << 53);
    case at::kBool:
    case at::kByte:
      return 0;
    case at::kChar:
      return -128;
    case at::kShort:
      return -32768;
    case at::kInt:
      return -2147483648LL;
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

void check_in_range(const at::Tensor& self, int64_t from, int64_t to_inc) {
  const int64_t lo = min_for(self), hi = max_for(self);
  TORCH_CHECK(from >= lo && from <= hi, "from is out of bounds for ", self.scalar_type());
  TORCH_CHECK(to_inc >= lo && to_inc <= hi, "to - 1 is out of bounds for ", self.scalar_type());
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  using Op = at::_ops::random_;
  track_op<Op>();
  if (!supported(RandOp::RandomDefault, self)) return fallback<Op>(self, gen);
  launch_fill(op_name<Op>(), RandOp::RandomDefault, {}, self, gen);
  return self;
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  using Op = at::_ops::random__to;
  track_op<Op>();
  if (!supported(RandOp::RandomRange, self)) return fallback<Op>(self, to, gen);
  TORCH_CHECK(0 < to, "random_ expects 'from' to be less than 'to', but got from=0 >= to=", to);
  check_in_range(self, 0, to - 1);
  return random_range(op_name<Op>(), self, 0, static_cast<uint64_t>(to), gen);
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  using Op = at::_ops::random__from;
  track_op<Op>();
  if (!supported(RandOp::RandomRange, self)) return fallback<Op>(self, from, to, gen);
  if (to.has_value()) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", *to);
    check_in_range(self, from, *to - 1);
    return random_range(op_name<Op>(), self, from,
                        static_cast<uint64_t>(*to) - static_cast<uint64_t>(from), gen);
  }
  if (from != std::numeric_limits<int64_t>::min()) {
    const int64_t to_inc = max_for(self);
    check_in_range(self, from, to_inc);
    return random_range(op_name<Op>(), self, from,
                        static_cast<uint64_t>(to_inc) - static_cast<uint64_t>(from) + 1, gen);
  }
  return random_range(op_name<Op>(), self, 0, 0, gen);  // the full 64-bit range
}

template <class Op, RandOp kOp>
at::Tensor& positive_param_fill(const char* what, at::Tensor& self, double a, double b,
                                std::optional<at::Generator> gen) {
  track_op<Op>();
  kernels::RandParams p;
  p.a = a;
  p.b = b;
  if (!supported(kOp, self)) {
    if constexpr (kOp == RandOp::Exponential || kOp == RandOp::Geometric) {
      return fallback<Op>(self, a, gen);
    } else {
      return fallback<Op>(self, a, b, gen);
    }
  }
  (void)what;
  launch_fill(op_name<Op>(), kOp, p, self, gen);
  return self;
}

at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambda > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambda);
  return positive_param_fill<at::_ops::exponential_, RandOp::Exponential>("exponential_", self,
                                                                          lambda, 0, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  return positive_param_fill<at::_ops::geometric_, RandOp::Geometric>("geometric_", self, p, 0,
                                                                      gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma,
                    std::optional<at::Generator> gen) {
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  return positive_param_fill<at::_ops::cauchy_, RandOp::Cauchy>("cauchy_", self, median, sigma,
                                                                gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std,
                        std::optional<at::Generator> gen) {
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  return positive_param_fill<at::_ops::log_normal_, RandOp::LogNormal>("log_normal_", self, mean,
                                                                       std, gen);
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  using Op = at::_ops::randperm_generator_out;
  track_op<Op>();
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK(!out.is_complex(), "randperm is not implemented for complex dtypes");
  if (at::isFloatingType(out.scalar_type())) {
    const int64_t digits = max_for(out);
    TORCH_CHECK(n <= digits + 1, "n cannot be greater than ", digits + 1, " for ",
                out.scalar_type());
  } else if (out.scalar_type() != at::kLong) {
    TORCH_CHECK(n <= max_for(out) + 1, "n cannot be greater than ", max_for(out) + 1, " for ",
                out.scalar_type());
  }
  at::native::resize_output(out, {n});
  dtype_contract::note(out.scalar_type());
  const auto [seed, offset] =
      reserve(gen, out.device().index(),
              kernels::rand_blocks(RandOp::RandomRange, kernels::DType::Int64, n));
  if (n == 0) return out;
  struct Task {
    int64_t n;
    uint64_t seed, offset;
    kernels::TensorRef out;
    void operator()() const { kernels::randperm(n, seed, offset, out); }
  } t{n, seed, offset, make_ref(out)};
  launch(out.device().index(), op_name<Op>(), t);
  return out;
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  using Op = at::_ops::native_dropout;
  track_op<Op>();
  if (input.numel() == 0) return {input, at::empty_like(input, input.options())};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  if (!supported(RandOp::Dropout, input)) return fallback<Op>(input, p, train);
  const double p1m = 1.0 - p;
  const double scale = p1m == 0 ? 0.0 : 1.0 / p1m;  // p = 1 drops everything without NaNs
  at::Tensor out = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::Tensor mask =
      at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous);
  dtype_contract::note(input.scalar_type());
  const auto [seed, offset] = reserve(
      std::nullopt, input.device().index(),
      kernels::rand_blocks(RandOp::Dropout, to_kernel_dtype(input.scalar_type()), input.numel()));
  RandTask t;
  t.op = RandOp::Dropout;
  t.seed = seed;
  t.offset = offset;
  t.p.a = p1m;
  t.p.b = scale;
  t.out = make_ref(out);
  t.has_in = true;
  t.in = make_ref(input);
  t.has_mask = true;
  t.mask = make_ref(mask);
  launch(input.device().index(), op_name<Op>(), t);
  return {out, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  track_op<at::_ops::native_dropout_backward>();
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type",
              mask.scalar_type());
  return grad.mul(mask).mul(scale);  // not in place: integer grads promote like ATen's
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  m.impl("normal.Tensor_float_out", TORCH_FN(normal_tensor_float_out));
  m.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  m.impl("normal.float_Tensor_out", TORCH_FN(normal_float_tensor_out));
  m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
  m.impl("normal.Tensor_Tensor_out", TORCH_FN(normal_tensor_tensor_out));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor));
  m.impl("bernoulli.out", TORCH_FN(bernoulli_out));
  m.impl("random_", TORCH_FN(random_default));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("randperm.generator_out", TORCH_FN(randperm_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}

}  // namespace neuron::torch_glue
