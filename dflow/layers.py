"""``tf.layers``: TF 1.x's layers, as functions (``tf.layers.dense``) and classes (``tf.layers.Dense``).

Each layer creates its variables with ``tf.get_variable`` under a variable scope named
after it: ``dense/kernel:0``, ``dense/bias:0``, then ``dense_1/...`` for the next unnamed
one (TF's numbering), or the ``name=`` given; ``reuse=True`` (or an enclosing scope's
reuse) shares them. Defaults are TF r1.15's: Glorot-uniform kernels, zero biases,
``padding='valid'``, ``data_format='channels_last'``. A layer object reuses its variables
on every call. Batch normalization's moving averages go to ``GraphKeys.UPDATE_OPS``.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 8, 8, 1])
...     y = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu)
...     y = tf.layers.max_pooling2d(y, 2, 2)
...     logits = tf.layers.dense(tf.layers.flatten(y), 10)
...     logits.shape.as_list(), [v.name for v in tf.trainable_variables()]
([None, 10], ['conv2d/kernel:0', 'conv2d/bias:0', 'dense/kernel:0', 'dense/bias:0'])
"""

from __future__ import annotations

import math
import operator

from . import dtypes
from .graph import GraphKeys, Tensor, TensorShape, convert_to_tensor, get_default_graph
from .ops import array_ops, batch_norm_ops, control_flow_ops, math_ops, nn_ops, state_ops
from .variables import (
    Variable,
    VariableScope,
    get_variable,
    ones_initializer,
    variable_scope,
    zeros_initializer,
)

__all__ = [
    "Layer", "InputSpec", "Dense", "Conv1D", "Conv2D", "Conv2DTranspose", "MaxPooling1D", "AveragePooling1D",
    "MaxPooling2D", "AveragePooling2D", "Dropout", "Flatten", "BatchNormalization", "dense", "conv1d",
    "conv2d", "conv2d_transpose", "max_pooling1d", "average_pooling1d", "max_pooling2d",
    "average_pooling2d", "dropout", "flatten", "batch_normalization",
]

_ZEROS, _ONES = zeros_initializer(), ones_initializer()  # TF's default bias / scale initializers
_DATA_FORMATS = {"channels_last": "NHWC", "channels_first": "NCHW", "nhwc": "NHWC", "nchw": "NCHW"}


def _data_format(data_format: str) -> str:
    """TF's ``'channels_last'``/``'channels_first'`` as the op's ``'NHWC'``/``'NCHW'``."""
    key = data_format.lower() if isinstance(data_format, str) else data_format
    if key not in _DATA_FORMATS:
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return _DATA_FORMATS[key]


def _padding(padding: str) -> str:
    if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same' (any case), got {padding!r}")
    return padding.upper()


def _pair(value, what: str) -> tuple[int, int]:
    """An int or a 2-sequence, as TF's ``kernel_size``, ``strides``, ``pool_size`` (NumPy ints too)."""
    try:
        values = (operator.index(value),) * 2 if not hasattr(value, "__len__") else tuple(
            operator.index(v) for v in value)
    except TypeError:
        values = ()
    if len(values) != 2 or min(values) < 1:
        raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")
    return values


# Keras (which TF 1.x's tf.layers is built on) also takes an activation by name
_ACTIVATIONS = {"relu": nn_ops.relu, "sigmoid": math_ops.sigmoid, "tanh": math_ops.tanh,
                "softmax": nn_ops.softmax, "linear": None}


def _activation(activation):
    if not isinstance(activation, str):
        return activation
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not supported by dflow by name; pass a function "
                         f"(tf.nn.relu...) or one of {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[activation]


def _no_constraint(**constraints) -> None:
    given = [name for name, value in constraints.items() if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} is not supported by dflow's tf.layers; clip or project "
                         "the variable with tf.assign after the train op instead")


class InputSpec:
    """What a layer or cell takes (TF's ``InputSpec``), checked when it is called: the rank
    (``ndim``, ``min_ndim``, ``max_ndim``), the dtype, and sizes of given axes (``axes={-1: 64}``).
    A layer sets it as ``self.input_spec`` (an InputSpec or a list: one per input)."""

    def __init__(self, dtype=None, shape=None, ndim=None, max_ndim=None, min_ndim=None, axes=None):
        self.dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self.shape = tuple(shape) if shape is not None else None
        self.ndim = len(self.shape) if self.shape is not None else ndim
        self.max_ndim, self.min_ndim, self.axes = max_ndim, min_ndim, dict(axes or {})

    def check(self, inputs: Tensor, layer: str) -> None:
        """ValueError naming ``layer``, the rule and the shape, where ``inputs`` breaks a rule."""
        shape, rank = inputs.shape, inputs.shape.ndims

        def refuse(expected: str, found: str) -> None:
            raise ValueError(f"Input 0 of layer {layer} is incompatible with the layer: expected {expected}, "
                             f"found {found}. Full shape received: {shape}")

        if self.dtype is not None and inputs.dtype != self.dtype:
            refuse(f"dtype={self.dtype.name}", f"dtype={inputs.dtype.name}")
        if rank is None:
            return
        for rule, broken in (("ndim", self.ndim is not None and rank != self.ndim),
                             ("min_ndim", self.min_ndim is not None and rank < self.min_ndim),
                             ("max_ndim", self.max_ndim is not None and rank > self.max_ndim)):
            if broken:
                refuse(f"{rule}={getattr(self, rule)}", f"ndim={rank}")
        sizes = shape.as_list()
        for axis, size in self.axes.items():
            if -rank <= axis < rank and sizes[axis] is not None and sizes[axis] != size:
                refuse(f"axis {axis} of size {size}", f"size {sizes[axis]}")
        for axis, size in enumerate(self.shape or ()):
            if size is not None and sizes[axis] is not None and sizes[axis] != size:
                refuse(f"shape {list(self.shape)}", f"size {sizes[axis]} at axis {axis}")


def check_input_spec(layer, inputs: Tensor, name: str) -> None:
    """``layer.input_spec``'s check of its (first) input, where it has one."""
    spec = getattr(layer, "input_spec", None)
    if isinstance(spec, (list, tuple)):
        spec = spec[0] if spec else None
    if spec is not None:
        spec.check(inputs, name)


class Layer:
    """Base class: ``build(input_shape)`` creates the variables on the first call, under the
    layer's variable scope; ``call(inputs, ...)`` builds the output. Later calls reuse them.
    """

    _base_name = "layer"
    _weight_names = ("kernel", "bias")  # tf.contrib.layers names them ("weights", "biases")

    def __init__(self, trainable: bool = True, name: str | None = None, dtype=None,
                 activity_regularizer=None, _scope=None, _reuse=None):
        self.trainable = trainable
        self.dtype = None if dtype is None else dtypes.as_dtype(dtype)
        self.activity_regularizer = activity_regularizer
        self._name = name
        self._scope: VariableScope | None = _scope
        self._reuse = _reuse
        self.built = False
        self._trainable_weights: list[Variable] = []
        self._non_trainable_weights: list[Variable] = []
        self.updates: list = []

    @property
    def name(self) -> str:
        if self._scope is not None:
            return self._scope.name.rsplit("/", 1)[-1]
        return self._name or self._base_name

    @property
    def scope_name(self) -> str:
        return self._scope.name if self._scope is not None else self.name

    @property
    def trainable_weights(self) -> list[Variable]:
        return list(self._trainable_weights) if self.trainable else []

    @property
    def non_trainable_weights(self) -> list[Variable]:
        if self.trainable:
            return list(self._non_trainable_weights)
        return self._trainable_weights + self._non_trainable_weights

    @property
    def weights(self) -> list[Variable]:
        return self.trainable_weights + self.non_trainable_weights

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights
    variables = weights

    def add_weight(self, name, shape, dtype=None, initializer=None, regularizer=None,
                   trainable=True) -> Variable:
        """``tf.get_variable(name, ...)`` in the layer's scope, noted as one of its weights."""
        trainable = trainable and self.trainable
        var = get_variable(name, shape, dtype or self.dtype or dtypes.float32, initializer=initializer,
                           regularizer=regularizer, trainable=trainable)
        (self._trainable_weights if trainable else self._non_trainable_weights).append(var)
        return var

    add_variable = add_weight

    def _add_kernel_and_bias(self, kernel_shape, outputs: int) -> None:
        """``kernel``, and ``bias`` (one per output) when ``use_bias``."""
        kernel_name, bias_name = self._weight_names
        self.kernel = self.add_weight(kernel_name, kernel_shape, initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(bias_name, [outputs],
                                        initializer=self.bias_initializer, regularizer=self.bias_regularizer)

    def __call__(self, inputs, *args, **kwargs):
        inputs = convert_to_tensor(inputs)
        check_input_spec(self, inputs, self.name)
        if self.dtype is None:
            self.dtype = inputs.dtype if inputs.dtype.is_floating else dtypes.float32
        with self._enter_scope():
            if not self.built:
                self.build(inputs.shape)
                self.built = True
            outputs = self.call(inputs, *args, **kwargs)
            if self.activity_regularizer is not None:
                with get_default_graph().name_scope("ActivityRegularizer"):
                    loss = self.activity_regularizer(outputs)
                if loss is not None:
                    get_default_graph().add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
        return outputs

    apply = __call__

    def _enter_scope(self):
        """TF's rule: the first call opens ``name`` (or a fresh ``dense``, ``dense_1``...);
        later calls reopen that scope with reuse."""
        if self._scope is not None:
            return _capturing(self, variable_scope(self._scope, reuse=True if self.built else self._reuse))
        if self._reuse:
            return _capturing(self, variable_scope(self._name or self._base_name, reuse=self._reuse))
        return _capturing(self, variable_scope(self._name, default_name=self._base_name))

    def build(self, input_shape) -> None:
        pass

    def call(self, inputs, *args, **kwargs):
        raise NotImplementedError


class _capturing:  # noqa: N801 - a context manager used like a function
    """Enter a variable scope and remember it as the layer's."""

    def __init__(self, layer: Layer, scope_cm):
        self.layer, self.scope_cm = layer, scope_cm

    def __enter__(self):
        self.layer._scope = self.scope_cm.__enter__()
        return self.layer._scope

    def __exit__(self, *exc):
        return self.scope_cm.__exit__(*exc)


def _channels(shape: TensorShape, axis: int, layer: str) -> int:
    if shape.ndims is None or shape[axis].value is None:
        raise ValueError(f"the channel dimension (axis {axis}) of the inputs to {layer} must be known, "
                         f"got shape {shape}")
    return shape[axis].value


# ---- dense ------------------------------------------------------------------------------------
class Dense(Layer):
    """``activation(inputs @ kernel + bias)``, over the last axis of ``inputs``."""

    _base_name = "dense"

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 trainable=True, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name, activity_regularizer=activity_regularizer, **kwargs)
        _no_constraint(kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        self.units = int(units)
        self.activation, self.use_bias = _activation(activation), use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    def build(self, input_shape):
        if input_shape.ndims is None or input_shape[-1].value is None:
            raise ValueError(f"The last dimension of the inputs to `Dense` should be defined, got shape "
                             f"{input_shape}")
        self._add_kernel_and_bias([input_shape[-1], self.units], self.units)

    def call(self, inputs):
        rank = inputs.shape.ndims
        if rank is not None and rank > 2:  # TF's tensordot over the last axis
            flat = array_ops.reshape(inputs, [-1, inputs.shape[-1]])
            outer = array_ops.shape(inputs)[:-1]
            outputs = array_ops.reshape(math_ops.matmul(flat, self.kernel),
                                        array_ops.concat([outer, [self.units]], 0), name="Tensordot")
            outputs.set_shape(inputs.shape.as_list()[:-1] + [self.units])
        else:
            outputs = math_ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            outputs = nn_ops.bias_add(outputs, self.bias)
        return outputs if self.activation is None else self.activation(outputs)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
          name=None, reuse=None) -> Tensor:
    """A fully connected layer: ``activation(inputs @ kernel + bias)``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     logits = tf.layers.dense(tf.zeros([4, 32]), 10, name="logits")
    ...     logits.shape.as_list(), [v.name for v in tf.trainable_variables()]
    ([4, 10], ['logits/kernel:0', 'logits/bias:0'])
    """
    layer = Dense(units, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                  bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable,
                  name=name, _reuse=reuse)
    return layer.apply(inputs)


# ---- convolutions ---------------------------------------------------------------------------
class Conv2D(Layer):
    """2-D convolution with a ``[kh, kw, in, filters]`` kernel, plus bias and activation."""

    _base_name = "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                 dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                 name=None, **kwargs):
        super().__init__(trainable=trainable, name=name, activity_regularizer=activity_regularizer, **kwargs)
        _no_constraint(kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.dilation_rate = _pair(dilation_rate, "dilation_rate")
        self.padding, self.data_format = _padding(padding), _data_format(data_format)
        self.activation, self.use_bias = _activation(activation), use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    @property
    def _channel_axis(self) -> int:
        return 1 if self.data_format == "NCHW" else -1

    def _kernel_shape(self, channels: int) -> list[int]:
        return [*self.kernel_size, channels, self.filters]

    def build(self, input_shape):
        if input_shape.ndims != 4:
            raise ValueError(f"{type(self).__name__} needs 4-D inputs, got shape {input_shape}")
        channels = _channels(input_shape, self._channel_axis, type(self).__name__)
        self._add_kernel_and_bias(self._kernel_shape(channels), self.filters)

    def _convolve(self, inputs):
        return nn_ops.conv2d(inputs, self.kernel, self.strides, self.padding, data_format=self.data_format,
                             dilations=self.dilation_rate, name="Conv2D")

    def call(self, inputs):
        outputs = self._convolve(inputs)
        if self.bias is not None:
            outputs = nn_ops.bias_add(outputs, self.bias, data_format=self.data_format)
        return outputs if self.activation is None else self.activation(outputs)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
           name=None, reuse=None) -> Tensor:
    """2-D convolution layer (variables ``conv2d/kernel``, ``conv2d/bias``).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     y = tf.layers.conv2d(tf.zeros([2, 28, 28, 1]), 32, 5, padding="same", activation=tf.nn.relu)
    ...     y.shape.as_list()
    [2, 28, 28, 32]
    """
    layer = Conv2D(filters, kernel_size, strides, padding, data_format, dilation_rate, activation, use_bias,
                   kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, bias_constraint, trainable, name=name,
                   _reuse=reuse)
    return layer.apply(inputs)


def _deconv_length(size, kernel, stride, padding):
    """TF's ``deconv_output_length`` (no output padding, no dilation)."""
    if size is None:
        return None
    return size * stride if padding == "SAME" else size * stride + max(kernel - stride, 0)


def _one(value, what: str) -> int:
    """An int or a 1-sequence, as TF's 1-D ``kernel_size``, ``strides``, ``pool_size``."""
    values = value if hasattr(value, "__len__") else [value]
    if len(values) != 1:
        raise ValueError(f"{what} must be an int or a 1-sequence for a 1-D layer, got {value!r}")
    return _pair(values[0], what)[0]


class Conv1D(Conv2D):
    """1-D convolution of ``[batch, width, channels]`` (``channels_first``: ``[batch, channels,
    width]``) with a ``[k, in, filters]`` kernel: the 2-D convolution of a one-row image."""

    _base_name = "conv1d"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
                 dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                 name=None, **kwargs):
        super().__init__(filters, (1, _one(kernel_size, "kernel_size")), (1, _one(strides, "strides")),
                         padding, data_format, (1, _one(dilation_rate, "dilation_rate")), activation,
                         use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                         activity_regularizer, kernel_constraint, bias_constraint, trainable, name, **kwargs)

    def build(self, input_shape):
        if input_shape.ndims != 3:
            raise ValueError(f"Conv1D needs 3-D inputs, got shape {input_shape}")
        channels = _channels(input_shape, self._channel_axis, "Conv1D")
        self._add_kernel_and_bias([self.kernel_size[1], channels, self.filters], self.filters)

    def _convolve(self, inputs):
        row_axis = 2 if self.data_format == "NCHW" else 1
        image = array_ops.expand_dims(inputs, row_axis)
        outputs = nn_ops.conv2d(image, array_ops.expand_dims(self.kernel, 0), self.strides, self.padding,
                                data_format=self.data_format, dilations=self.dilation_rate, name="conv1d")
        return array_ops.squeeze(outputs, [row_axis])


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
           dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=_ZEROS,
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """1-D convolution layer (variables ``conv1d/kernel`` ``[k, in, filters]``, ``conv1d/bias``)."""
    layer = Conv1D(filters, kernel_size, strides, padding, data_format, dilation_rate, activation, use_bias,
                   kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, bias_constraint, trainable, name=name,
                   _reuse=reuse)
    return layer.apply(inputs)


class Conv2DTranspose(Conv2D):
    """The transpose (gradient) of a convolution: upsamples by ``strides``; the kernel is
    ``[kh, kw, filters, in]``."""

    _base_name = "conv2d_transpose"

    def _kernel_shape(self, channels):
        return [*self.kernel_size, self.filters, channels]

    def _convolve(self, inputs):
        if self.dilation_rate != (1, 1):
            raise ValueError("conv2d_transpose with a dilation_rate is not supported by dflow")
        nchw = self.data_format == "NCHW"
        static = inputs.shape.as_list()
        height, width = static[2:] if nchw else static[1:3]
        out_hw = [_deconv_length(d, k, s, self.padding) for d, k, s in zip(
            (height, width), self.kernel_size, self.strides)]
        dynamic = array_ops.shape(inputs)
        hw_axes = (2, 3) if nchw else (1, 2)
        sizes = [h if h is not None else _deconv_length(dynamic[a], k, s, self.padding)
                 for h, a, k, s in zip(out_hw, hw_axes, self.kernel_size, self.strides)]
        dims = [dynamic[0], self.filters, *sizes] if nchw else [dynamic[0], *sizes, self.filters]
        outputs = nn_ops.conv2d_backprop_input(array_ops.stack(dims), self.kernel, inputs, self.strides,
                                               self.padding, data_format=self.data_format,
                                               name="conv2d_transpose")
        static_out = [static[0], self.filters, *out_hw] if nchw else [static[0], *out_hw, self.filters]
        outputs.set_shape(static_out)
        return outputs


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
                     data_format="channels_last", activation=None, use_bias=True, kernel_initializer=None,
                     bias_initializer=_ZEROS, kernel_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                     name=None, reuse=None) -> Tensor:
    """Transposed 2-D convolution layer (variables ``conv2d_transpose/kernel``, ``.../bias``)."""
    layer = Conv2DTranspose(filters, kernel_size, strides, padding, data_format, (1, 1), activation,
                            use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                            bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint,
                            trainable, name=name, _reuse=reuse)
    return layer.apply(inputs)


# ---- pooling --------------------------------------------------------------------------------
class _Pooling2D(Layer):
    _pool = staticmethod(nn_ops.max_pool)

    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last", name=None,
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.pool_size, self.strides = _pair(pool_size, "pool_size"), _pair(strides, "strides")
        self.padding, self.data_format = _padding(padding), _data_format(data_format)

    def call(self, inputs):
        return self._pool(inputs, self.pool_size, self.strides, self.padding, data_format=self.data_format)


class MaxPooling2D(_Pooling2D):
    """The maximum over ``pool_size`` windows, ``strides`` apart."""

    _base_name = "max_pooling2d"


class AveragePooling2D(_Pooling2D):
    """The mean over ``pool_size`` windows, ``strides`` apart."""

    _base_name = "average_pooling2d"
    _pool = staticmethod(nn_ops.avg_pool)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None) -> Tensor:
    """2-D max pooling: ``tf.layers.max_pooling2d(conv1, pool_size=[2, 2], strides=2)``."""
    return MaxPooling2D(pool_size, strides, padding, data_format, name=name).apply(inputs)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None) -> Tensor:
    """2-D average pooling."""
    return AveragePooling2D(pool_size, strides, padding, data_format, name=name).apply(inputs)


class _Pooling1D(_Pooling2D):
    """1-D pooling of ``[batch, width, channels]``: 2-D pooling of a one-row image."""

    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last", name=None,
                 **kwargs):
        super().__init__((1, _one(pool_size, "pool_size")), (1, _one(strides, "strides")), padding,
                         data_format, name=name, **kwargs)

    def call(self, inputs):
        row_axis = 2 if self.data_format == "NCHW" else 1
        outputs = super().call(array_ops.expand_dims(inputs, row_axis))
        return array_ops.squeeze(outputs, [row_axis])


class MaxPooling1D(_Pooling1D):
    """The maximum over ``pool_size`` windows along the width."""

    _base_name = "max_pooling1d"


class AveragePooling1D(_Pooling1D):
    """The mean over ``pool_size`` windows along the width."""

    _base_name = "average_pooling1d"
    _pool = staticmethod(nn_ops.avg_pool)


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None) -> Tensor:
    """1-D max pooling of ``[batch, width, channels]``."""
    return MaxPooling1D(pool_size, strides, padding, data_format, name=name).apply(inputs)


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None) -> Tensor:
    """1-D average pooling of ``[batch, width, channels]``."""
    return AveragePooling1D(pool_size, strides, padding, data_format, name=name).apply(inputs)


# ---- dropout and flatten ----------------------------------------------------------------------
def _keep_probability(rate, training):
    """``1 - rate`` while training, 1 otherwise; None where dropout is statically off."""
    symbolic_rate = isinstance(rate, (Tensor, Variable))
    if isinstance(training, (Tensor, Variable)):
        keep = 1.0 - math_ops.cast(rate, dtypes.float32) if symbolic_rate else 1.0 - rate
        return math_ops.where(convert_to_tensor(training), keep, 1.0)
    if not training or (not symbolic_rate and rate == 0):
        return None
    return 1.0 - rate


class Dropout(Layer):
    """Zero each element with probability ``rate`` (scaling the rest by ``1 / (1 - rate)``)
    when ``training`` (a bool or a bool tensor) is true; the identity otherwise."""

    _base_name = "dropout"

    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(rate, (int, float)) and not 0 <= rate < 1:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def call(self, inputs, training=False):
        keep_prob = _keep_probability(self.rate, training)
        if keep_prob is None:
            return array_ops.identity(inputs)
        if not isinstance(keep_prob, Tensor):
            keep_prob = convert_to_tensor(keep_prob, dtype=inputs.dtype)
        return nn_ops.dropout(inputs, math_ops.cast(keep_prob, inputs.dtype), self.noise_shape, self.seed)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None) -> Tensor:
    """Dropout that is on only when ``training`` is true (a Python bool or a bool tensor):
    ``tf.layers.dropout(fc, rate=0.4, training=mode == TRAIN)``."""
    return Dropout(rate, noise_shape, seed, name=name).apply(inputs, training=training)


class Flatten(Layer):
    """``[batch, ...]`` to ``[batch, features]`` (channels-first inputs are first made channels-last,
    as TF does, so the features' order does not depend on the layout)."""

    _base_name = "flatten"

    def __init__(self, data_format="channels_last", name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.data_format = _data_format(data_format)

    def call(self, inputs):
        rank = inputs.shape.ndims
        if rank is None:
            raise ValueError("flatten needs inputs of known rank")
        if self.data_format == "NCHW" and rank > 2:
            inputs = array_ops.transpose(inputs, [0, *range(2, rank), 1])
        rest = inputs.shape.as_list()[1:]
        if None in rest:  # known only when run: keep the batch, fold the rest
            return array_ops.reshape(inputs, array_ops.stack([array_ops.shape(inputs)[0], -1]))
        return array_ops.reshape(inputs, [-1, math.prod(rest)])


def flatten(inputs, name=None, data_format="channels_last") -> Tensor:
    """``[batch, ...]`` to ``[batch, features]``."""
    return Flatten(data_format, name=name).apply(inputs)


# ---- batch normalization ---------------------------------------------------------------------
class BatchNormalization(Layer):
    """Normalize over every axis but ``axis`` with the batch's moments while ``training``
    (a bool or a bool tensor), with moving averages of them otherwise.

    While training, ``moving -= (moving - batch) * (1 - momentum)`` is added to
    ``GraphKeys.UPDATE_OPS``: run those with the train op, as in TF 1.x. 4-D inputs
    normalized over axis 1 or 3 take one ``FusedBatchNorm`` op unless ``fused=False``, as in
    TF 1.x (where ``training`` is a tensor, in a ``tf.cond``: the step runs one of the two);
    then the moving variance averages the unbiased batch variance (``n / (n - 1)``), as TF's
    fused kernel's does.
    """

    _base_name = "batch_normalization"
    _updates_collection: str | None = GraphKeys.UPDATE_OPS

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=_ZEROS, gamma_initializer=_ONES,
                 moving_mean_initializer=_ZEROS, moving_variance_initializer=_ONES,
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 renorm=False, renorm_clipping=None, renorm_momentum=0.99, fused=None, trainable=True,
                 virtual_batch_size=None, adjustment=None, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        _no_constraint(beta_constraint=beta_constraint, gamma_constraint=gamma_constraint)
        if renorm or virtual_batch_size is not None or adjustment is not None:
            raise ValueError("batch renormalization, virtual_batch_size and adjustment are not supported "
                             "by dflow's batch_normalization")
        if not isinstance(axis, int):
            if len(axis) != 1:
                raise ValueError(f"batch_normalization over several axes {axis} is not supported by dflow")
            axis = axis[0]
        self.axis, self.momentum, self.epsilon = axis, momentum, epsilon
        self.center, self.scale = center, scale
        self.initializers = (gamma_initializer, beta_initializer, moving_mean_initializer,
                             moving_variance_initializer)
        self.beta_regularizer, self.gamma_regularizer = beta_regularizer, gamma_regularizer
        self.fused = fused

    def build(self, input_shape):
        if input_shape.ndims is None:
            raise ValueError("batch_normalization needs inputs of known rank")
        self.axis %= input_shape.ndims
        channels = [_channels(input_shape, self.axis, "batch_normalization")]
        gamma_init, beta_init, mean_init, variance_init = self.initializers
        self.gamma = self.add_weight("gamma", channels, initializer=gamma_init,
                                     regularizer=self.gamma_regularizer) if self.scale else None
        self.beta = self.add_weight("beta", channels, initializer=beta_init,
                                    regularizer=self.beta_regularizer) if self.center else None
        self.moving_mean = self.add_weight("moving_mean", channels, initializer=mean_init, trainable=False)
        self.moving_variance = self.add_weight("moving_variance", channels, initializer=variance_init,
                                               trainable=False)

    def call(self, inputs, training=False):
        rank = inputs.shape.ndims
        if rank == 4 and self.axis in (1, 3) and self.fused is not False:
            return self._fused_call(inputs, training)
        reduce_axes = [a for a in range(rank) if a != self.axis]
        moving = (self.moving_mean.value(), self.moving_variance.value())
        if isinstance(training, (Tensor, Variable)) or training:
            batch_mean, batch_variance = nn_ops.moments(inputs, reduce_axes)
            self._add_updates(inputs, batch_mean, batch_variance, training)
        if isinstance(training, (Tensor, Variable)):
            # a scalar, as TF requires: a placeholder of unknown shape would leave the moments so
            training = array_ops.reshape(convert_to_tensor(training), [])
            mean = math_ops.where(training, batch_mean, moving[0])
            variance = math_ops.where(training, batch_variance, moving[1])
        else:
            mean, variance = (batch_mean, batch_variance) if training else moving
        return self._normalize(inputs, mean, variance)

    def _fused_call(self, inputs, training):
        data_format = "NCHW" if self.axis == 1 else "NHWC"
        # read once, outside any branch: the branches take the values
        moving_mean, moving_variance = self.moving_mean.value(), self.moving_variance.value()
        scale = convert_to_tensor(self.gamma) if self.gamma is not None else array_ops.ones_like(moving_mean)
        offset = convert_to_tensor(self.beta) if self.beta is not None else array_ops.zeros_like(moving_mean)

        def normalized(is_training: bool):
            return lambda: batch_norm_ops.fused_batch_norm(
                inputs, scale, offset, None if is_training else moving_mean,
                None if is_training else moving_variance, self.epsilon, data_format, is_training)

        if isinstance(training, (Tensor, Variable)):
            outputs, mean, variance = control_flow_ops.cond(
                convert_to_tensor(training), normalized(True), normalized(False))
        else:
            outputs, mean, variance = normalized(bool(training))()
        if isinstance(training, (Tensor, Variable)) or training:
            self._add_updates(inputs, mean, variance, training)
        return outputs

    def _normalize(self, inputs, mean, variance):
        """``tf.nn.batch_normalization``, the channel vectors shaped to broadcast where the channels
        are not the last axis (where they are, it is one op)."""
        rank = inputs.shape.ndims
        vectors = [mean, variance, self.beta, self.gamma]
        if self.axis % rank != rank - 1:
            broadcast = [1] * rank
            broadcast[self.axis] = -1
            vectors = [None if v is None else array_ops.reshape(v, broadcast) for v in vectors]
        mean, variance, offset, scale = vectors
        return nn_ops.batch_normalization(inputs, mean, variance, offset, scale, self.epsilon)

    def _add_updates(self, inputs, batch_mean, batch_variance, training):
        decay = 1.0 - self.momentum
        if isinstance(training, (Tensor, Variable)):  # no update where training is fed False
            decay = math_ops.cast(math_ops.where(convert_to_tensor(training), decay, 0.0), inputs.dtype)
        graph = get_default_graph()
        for variable, batch in ((self.moving_mean, batch_mean), (self.moving_variance, batch_variance)):
            with graph.colocate_with(variable):
                update = state_ops.assign_sub(variable, (variable - batch) * decay, name="AssignMovingAvg")
            self.updates.append(update)
            if self._updates_collection is not None:
                graph.add_to_collection(self._updates_collection, update)


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=_ZEROS, gamma_initializer=_ONES,
                        moving_mean_initializer=_ZEROS,
                        moving_variance_initializer=_ONES, beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, training=False,
                        trainable=True, name=None, reuse=None, renorm=False, renorm_clipping=None,
                        renorm_momentum=0.99, fused=None, virtual_batch_size=None, adjustment=None) -> Tensor:
    """Batch normalization (variables ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     x, is_training = tf.random_normal([8, 4]), tf.placeholder_with_default(True, [])
    ...     y = tf.layers.batch_normalization(x, training=is_training)
    ...     loss = tf.reduce_mean(tf.square(y))
    ...     with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
    ...         train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    ...     len(tf.get_collection(tf.GraphKeys.UPDATE_OPS))  # moving mean and variance
    2
    """
    layer = BatchNormalization(axis, momentum, epsilon, center, scale, beta_initializer, gamma_initializer,
                               moving_mean_initializer, moving_variance_initializer, beta_regularizer,
                               gamma_regularizer, beta_constraint, gamma_constraint, renorm, renorm_clipping,
                               renorm_momentum, fused, trainable, virtual_batch_size, adjustment, name=name,
                               _reuse=reuse)
    return layer.apply(inputs, training=training)
