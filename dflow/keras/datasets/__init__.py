"""``tf.keras.datasets``: ``load_data()`` of MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100, with
Keras's arrays (uint8 images, channels last), read from the files Keras keeps in
``~/.keras/datasets`` (``$KERAS_HOME/datasets``). dflow downloads nothing: where a file is
missing, the error names it, where to put it and where to get it.
"""

from __future__ import annotations

from . import cifar10, cifar100, fashion_mnist, mnist

__all__ = ["cifar10", "cifar100", "fashion_mnist", "mnist"]
