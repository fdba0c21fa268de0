"""Enums shared by the kernels (names and values as in nkilib.core.utils.common_types)."""

from enum import Enum


class QKVOutputLayout(Enum):
    BSD = 0  # (b, s, (n_q_heads + 2 * n_kv_heads) * d_head)
    NBSd = 1  # (num_heads, b, s, d_head)
    NBdS = 2  # (num_heads, b, d_head, s)


class NormType(Enum):
    NO_NORM = 0
    RMS_NORM = 1
    LAYER_NORM = 2
    RMS_NORM_SKIP_GAMMA = 3


class ActFnType(Enum):
    SiLU = 0
    GELU = 1
    GELU_Tanh_Approx = 2
    Swish = 3


class RouterActFnType(Enum):
    SIGMOID = 0
    SOFTMAX = 1

    def __str__(self):
        return self.name.lower()


class QuantizationType(Enum):
    NONE = 0
    STATIC = 1
    ROW = 2
    MX = 3
    STATIC_MX = 4


class QKVWeightLayout(Enum):
    """Layout of the fused QKV weight. CONTIGUOUS is [H, I] (I = (n_q + 2 n_kv) * d_head)."""

    CONTIGUOUS = 0
    MX_CONTIGUOUS = 1
    MX_INTERLEAVED = 2


class GateUpDim(Enum):
    GATE = 0
    UP = 1


class WeightLayout(Enum):
    """neuron-emu extension: how a projection weight is stored in HBM.

    IN_OUT  [in_features, out_features]: the library's layout (gate/up [H, I], down [I, H],
            fused QKV [H, I], output projection [N * D, H]).
    OUT_IN  [out_features, in_features]: ``torch.nn.Linear.weight``. The kernel transposes the
            weight while loading it (DMA transpose, ~90% of DMA bandwidth on Trainium2), so a
            model passes ``module.weight`` without a transposed copy in HBM.
    """

    IN_OUT = 0
    OUT_IN = 1
