// Fused LSTM and GRU cells: ATen's nn.LSTM / nn.GRU / LSTMCell / GRUCell send tensors of
// accelerator devices (PrivateUse1 included) to `_thnn_fused_lstm_cell` and `_thnn_fused_gru_cell`
// and their backward ops, which PyTorch implements only for CUDA, so the CPU fallback cannot run
// them. They are composed here of the device's own elementwise ops (sigmoid, tanh, mul, add): no
// math of their own. The workspaces have CUDA's layout: the activated LSTM gates [i f g o], and
// [r z n hx hn] for GRU (hn: the hidden part of the new gate, bias included).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

namespace neuron::torch_glue {
namespace {

void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, int64_t num_gates) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must be 2-D of one shape, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * num_gates == input_gates.size(1),
              op, ": the state must be [batch, hidden] = [", input_gates.size(0), ", ",
              input_gates.size(1) / num_gates, "] for gates of shape ", input_gates.sizes(),
              ", got ", state.sizes());
}

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, 4);
  const at::Tensor gates = with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias);
  const auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(),
                   o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const bool has_ghy = grad_hy.has_value() && grad_hy->defined();
  const bool has_gcy = grad_cy.has_value() && grad_cy->defined();
  if (!has_ghy && !has_gcy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanh_cy = cy.tanh();
  const at::Tensor ghy = has_ghy ? *grad_hy : at::zeros_like(cy);
  // Gradient reaching the cell state: through hy = o * tanh(cy), and directly.
  at::Tensor gcy = ghy * o * (1 - tanh_cy * tanh_cy);
  if (has_gcy) gcy = gcy + *grad_cy;
  const at::Tensor gi = gcy * g * i * (1 - i);
  const at::Tensor gf = gcy * cx * f * (1 - f);
  const at::Tensor gg = gcy * i * (1 - g * g);
  const at::Tensor go = ghy * tanh_cy * o * (1 - o);
  at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  at::Tensor grad_cx = gcy * f;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates,
                                                  const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx,
                                                  const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, 3);
  const auto ig = with_bias(input_gates, input_bias).chunk(3, 1);
  const auto hg = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor r = (ig[0] + hg[0]).sigmoid();
  const at::Tensor z = (ig[1] + hg[1]).sigmoid();
  const at::Tensor n = (ig[2] + r * hg[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: workspace must be [batch, 5 * hidden], got ",
              workspace.sizes(), " for grad_hy ", grad_hy.sizes());
  const auto ws = workspace.chunk(5, 1);
  const at::Tensor &r = ws[0], &z = ws[1], &n = ws[2], &hx = ws[3], &hn = ws[4];
  const at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);  // before tanh of the new gate
  const at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
  const at::Tensor gr = gn * hn * r * (1 - r);
  at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  at::Tensor grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  at::Tensor grad_hx = grad_hy * z;
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace neuron::torch_glue
