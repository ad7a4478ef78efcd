"""Datasets for training and benchmarks.

For now: scikit-learn's bundled handwritten digits (real data, no download).
Prepared Zarr datasets (CIFAR-10, MNIST, ImageNet) come with ``dflow data prepare``.
"""

from .digits import DigitsSplit, iterate_batches, load_digits

__all__ = ["DigitsSplit", "load_digits", "iterate_batches"]
