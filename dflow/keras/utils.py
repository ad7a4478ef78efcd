"""``tf.keras.utils.to_categorical``, as graph scripts one-hot their labels with it."""

from __future__ import annotations

import numpy as np

__all__ = ["to_categorical"]


def to_categorical(y, num_classes=None, dtype="float32") -> np.ndarray:
    """Integer class labels as one-hot rows (a trailing axis of 1 dropped, as Keras does).

    >>> to_categorical([[1], [0]]).tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    labels = np.asarray(y, dtype="int64")
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    count = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    if labels.size and (labels.min() < 0 or labels.max() >= count):
        raise ValueError(f"labels must be in [0, {count}), got {int(labels.min())} to {int(labels.max())}")
    return np.eye(count, dtype=dtype)[labels]
