"""envmatrix: which CUDA / PyTorch / transformers / flash-attn stacks train cleanly, by experiment."""

__version__ = "0.1.0"
