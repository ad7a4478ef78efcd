"""Models built from public dflow ops, and a registry to look them up by name.

Each model is a function from an input tensor to logits (predictions for
linear regression), creating its variables with ``get_variable`` under
variable scopes, as the TF 1.x tutorials do; convolutional models take
``data_format`` ('NHWC' or 'NCHW') and NHWC input either way.

>>> import dflow as tf
>>> from dflow.models import MODELS
>>> spec = MODELS["deep_mnist"]
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, *spec.input_shape])
...     spec(images, data_format="NCHW").shape.as_list()
[None, 10]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import cifar10, deep_mnist, inception, linear_regression, mnist_dnn, resnet
from .layout import DATA_FORMATS

__all__ = ["ModelSpec", "MODELS", "get_model", "DATA_FORMATS",
           "linear_regression", "mnist_dnn", "deep_mnist", "cifar10", "resnet", "inception"]


@dataclass(frozen=True)
class ModelSpec:
    """What the CLI and the benchmarks need to know about a model.

    ``input_shape`` is one example (NHWC, or flat); ``num_classes`` is None for
    regression; ``train_defaults`` are the ``dflow train`` settings measured to
    train the model well on the digits.
    """

    name: str
    build: Callable
    loss: Callable
    input_shape: tuple
    num_classes: int | None
    convolutional: bool = False
    dropout: bool = False
    train_defaults: Mapping = field(default_factory=dict)
    description: str = ""

    def __call__(self, inputs, data_format: str = "NHWC", keep_prob=None):
        """Build the model on ``inputs``; ``data_format`` and ``keep_prob`` go where they apply."""
        options = {}
        if self.convolutional:
            options["data_format"] = data_format
        if self.dropout and keep_prob is not None:
            options["keep_prob"] = keep_prob
        return self.build(inputs, **options)


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in [
    ModelSpec("linear_regression", linear_regression.linear_regression, linear_regression.loss,
              input_shape=(), num_classes=None,
              train_defaults=dict(dataset="line", optimizer="sgd", learning_rate=0.01,
                                  batch_size=64, steps=300),
              description="y = x * w + b (the seed's Listing 1)"),
    ModelSpec("mnist_dnn", mnist_dnn.mnist_dnn, mnist_dnn.loss, input_shape=(784,), num_classes=10,
              train_defaults=dict(dataset="digits", optimizer="adam", learning_rate=1e-3,
                                  batch_size=64, steps=600),
              description="784-512-512-10 ReLU MLP (MPI-TensorFlow's MNIST-DNN)"),
    ModelSpec("deep_mnist", deep_mnist.deep_mnist, deep_mnist.loss, input_shape=(28, 28, 1),
              num_classes=10, convolutional=True, dropout=True,
              train_defaults=dict(dataset="digits", optimizer="adam", learning_rate=1e-3,
                                  batch_size=50, steps=600, keep_prob=0.5),
              description="TF's Deep MNIST for Experts CNN"),
    ModelSpec("cifar10", cifar10.inference, cifar10.loss, input_shape=(24, 24, 3), num_classes=10,
              convolutional=True,
              train_defaults=dict(dataset="digits", optimizer="adam", learning_rate=1e-3,
                                  batch_size=64, steps=600),
              description="TF's CIFAR-10 tutorial CNN"),
    # the ImageNet models train on a prepared store (`dflow data prepare imagenet --size 224|299`);
    # their batch sizes and learning rates are tf_cnn_benchmarks' defaults, not measured here
    ModelSpec("resnet50", resnet.resnet50, resnet.loss, input_shape=resnet.IMAGE_SHAPE,
              num_classes=resnet.NUM_CLASSES, convolutional=True,
              train_defaults=dict(dataset="imagenet", optimizer="momentum", learning_rate=0.005,
                                  batch_size=64, steps=1000),
              description="tf_cnn_benchmarks' ResNet-50 v1 (224x224 ImageNet)"),
    ModelSpec("inception3", inception.inception3, inception.loss, input_shape=inception.IMAGE_SHAPE,
              num_classes=inception.NUM_CLASSES, convolutional=True,
              train_defaults=dict(dataset="imagenet", optimizer="momentum", learning_rate=0.005,
                                  batch_size=32, steps=1000),
              description="tf_cnn_benchmarks' Inception v3 (299x299 ImageNet)"),
]}


def get_model(name: str) -> ModelSpec:
    """The registered model ``name``; an unknown name lists the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}") from None
