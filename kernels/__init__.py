"""redraft.kernels: Triton GPU kernels, each beside a plain-PyTorch reference.

Tensors in, tensors out; knows nothing of models. No kernels have been written yet: the
engine runs its plain-PyTorch path on every device.
"""
