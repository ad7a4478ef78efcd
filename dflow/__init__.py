"""dflow: a TensorFlow 1.x-style dataflow graph engine whose runtime is Dask.

``import dflow as tf`` gives the TF 1.x names:

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     a = tf.constant([1.0, 2.0])
...     with tf.Session() as sess:
...         sess.run(a * 2.0).tolist()
[2.0, 4.0]
"""

__version__ = "0.1.0"

from . import (
    cluster,
    dtypes,
    errors,
    image,  # noqa: E402,I001 - tf.image
    nn,  # noqa: E402,I001 - after the core ops it builds on
    train,  # noqa: E402,I001
)
from .autodiff import gradients
from .dtypes import (
    DType,
    as_dtype,
    bool,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
)
from .graph import (
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    TensorShape,
    add_to_collection,
    colocate_with,
    control_dependencies,
    convert_to_tensor,
    device,
    get_collection,
    get_default_graph,
    name_scope,
    reset_default_graph,
    set_random_seed,
)
from .graph_io import import_graph_def
from .ops import collective_ops  # noqa: F401  (registers the collectives' op types)
from .ops.array_ops import (
    broadcast_to,
    concat,
    constant,
    expand_dims,
    fill,
    identity,
    no_op,
    one_hot,
    ones,
    ones_like,
    pad,
    placeholder,
    placeholder_with_default,
    rank,
    reshape,
    shape,
    size,
    split,
    squeeze,
    stack,
    stop_gradient,
    strided_slice,
    tile,
    transpose,
    unstack,
    zeros,
    zeros_like,
)
from .ops.array_ops import range_ as range
from .ops.image_ops import random_crop
from .ops.io_ops import (
    FixedLengthRecordReader,
    ReaderBase,
    TextLineReader,
    WholeFileReader,
    count_up_to,
    decode_csv,
    decode_raw,
    read_file,
)
from .ops.math_ops import (
    abs,
    add,
    add_n,
    argmax,
    argmin,
    cast,
    divide,
    equal,
    exp,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    rsqrt,
    sigmoid,
    sign,
    sqrt,
    square,
    subtract,
    tanh,
    truediv,
    where,
)
from .ops.queue_ops import FIFOQueue, QueueBase, RandomShuffleQueue
from .ops.state_ops import assign, assign_add, assign_sub, random_normal, random_uniform, truncated_normal
from .placement import DeviceSpec
from .runtime.session import ConfigProto, InteractiveSession, Session, get_default_session
from .variables import (
    AUTO_REUSE,
    Variable,
    constant_initializer,
    get_variable,
    get_variable_scope,
    global_variables,
    global_variables_initializer,
    glorot_uniform_initializer,
    group,
    initialize_all_variables,
    local_variables,
    local_variables_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    report_uninitialized_variables,
    trainable_variables,
    truncated_normal_initializer,
    variable_scope,
    variables_initializer,
    zeros_initializer,
)

sub = subtract
mul = multiply
div = divide
newaxis = None


def replicate(train_fn, cluster, *args, job: str = "worker", **kwargs) -> list:  # noqa: F811
    """Between-graph replication: ``train_fn(task_index, *args, **kwargs)`` on every task of
    ``job``, each as its own client in its worker's process (see :mod:`dflow.distributed.replicate`)."""
    from .distributed.replicate import replicate as run  # imports distributed: only when asked

    return run(train_fn, cluster, *args, job=job, **kwargs)
