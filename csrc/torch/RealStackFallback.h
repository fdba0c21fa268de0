// Ops that neuron-emu computes natively but torch-neuronx runs through its CPU fallback on real
// Trainium (eager mode): argmax, sort, multinomial. By default neuron-emu mirrors the real
// stack for them - the op goes through the same boxed CPU fallback as an op without a kernel,
// with the same cost (synchronize, copy to the host and back) and is listed by
// torch_neuronx.get_fallback_ops() under the name the real stack reports ('aten::argmax.out',
// 'aten::sort.values_stable', 'aten::multinomial'), as in the lab guide's Lab 2 Step 6.
// NEURON_EMU_FALLBACK_MODEL=native runs neuron-emu's own kernels for them instead.
#pragma once

namespace neuron::torch_glue {

// True when the listed ops take the CPU fallback (NEURON_EMU_FALLBACK_MODEL=real, the default).
bool mirror_real_stack_fallback();
// Overrides the environment (tests, torch_neuronx._C._set_fallback_model).
void set_mirror_real_stack_fallback(bool on);

}  // namespace neuron::torch_glue
