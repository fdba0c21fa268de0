"""The ``neuronxcc`` import path of older NKI releases: ``import neuronxcc.nki as nki`` (and
``neuronxcc.nki.language`` / ``.isa`` / ``.typing`` / ``.compiler``) gives the same modules as
``import nki``, so kernels written for either path run unchanged and share one NKI."""
