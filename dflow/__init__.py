"""dflow: a TensorFlow 1.x-style dataflow graph engine whose runtime is Dask.

``import dflow as tf`` gives the TF 1.x names:

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     a = tf.constant([1.0, 2.0])
...     with tf.Session() as sess:
...         sess.run(a * 2.0).tolist()
[2.0, 4.0]
"""

# the tf.* namespaces (tf.math and tf.random are TF 1.13+ names that late 1.x scripts use)
from . import (
    app,
    cluster,
    compat,
    contrib,
    data,
    debugging,
    dtypes,
    errors,
    estimator,
    feature_column,
    flags,
    gfile,
    image,  # tf.image
    keras,  # its datasets' load_data and to_categorical only
    layers,
    linalg,
    lookup,
    losses,
    math,
    metrics,
    nn,
    profiler,
    python_io,
    random,
    saved_model,
    sparse,
    strings,
    summary,
    test,
    train,
)
from . import tf_io as io
from . import tf_logging as logging
from .autodiff import NotDifferentiable, RegisterGradient, custom_gradient, gradients, no_gradient
from .compat import disable_eager_execution, disable_v2_behavior, executing_eagerly
from .dtypes import (
    DType,
    as_dtype,
    bool,
    complex64,
    complex128,
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .graph import (
    Dimension,
    Graph,
    GraphKeys,
    NodeDef,
    Operation,
    Tensor,
    TensorShape,
    add_to_collection,
    as_dimension,
    as_shape,
    colocate_with,
    control_dependencies,
    convert_to_tensor,
    device,
    get_collection,
    get_default_graph,
    name_scope,
    reset_default_graph,
    set_random_seed,
    unknown_shape,
)
from .graph_io import import_graph_def
from .ops import collective_ops, dataset_ops, iterator_ops  # noqa: F401  (op types no name below brings)
from .ops.array_extras import (
    bincount,
    confusion_matrix,
    diag,
    diag_part,
    matrix_band_part,
    matrix_diag,
    matrix_diag_part,
    meshgrid,
    roll,
    scatter_nd,
    segment_mean,
    segment_sum,
    trace,
    unsorted_segment_mean,
)
from .ops.array_ops import (
    broadcast_to,
    concat,
    constant,
    depth_to_space,
    expand_dims,
    fill,
    identity,
    identity_n,
    linspace,
    no_op,
    one_hot,
    ones,
    ones_like,
    pad,
    placeholder,
    placeholder_with_default,
    rank,
    reshape,
    reverse,
    shape,
    space_to_depth,
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
from .ops.array_ops import slice_ as slice
from .ops.control_flow_ops import case, cond, foldl, foldr, map_fn, scan, while_loop
from .ops.ctc_ops import edit_distance
from .ops.embedding_ops import (
    IndexedSlices,
    boolean_mask,
    gather,
    gather_nd,
    reverse_sequence,
    scatter_add,
    scatter_sub,
    scatter_update,
    unsorted_segment_sum,
)
from .ops.image_ops import random_crop
from .ops.io_ops import (
    FixedLengthRecordReader,
    ReaderBase,
    TextLineReader,
    TFRecordReader,
    WholeFileReader,
    count_up_to,
    decode_csv,
    decode_raw,
    read_file,
)
from .ops.linalg_ops import (
    cholesky,
    matrix_determinant,
    matrix_inverse,
    matrix_solve,
    qr,
    self_adjoint_eig,
    svd,
)
from .ops.lookup_ops import tables_initializer
from .ops.math_ops import (
    Assert,
    Print,
    abs,
    add,
    add_check_numerics_ops,
    add_n,
    arg_max,
    arg_min,
    argmax,
    argmin,
    assert_equal,
    assert_greater,
    assert_greater_equal,
    assert_less,
    assert_less_equal,
    assert_negative,
    assert_non_negative,
    assert_non_positive,
    assert_none_equal,
    assert_positive,
    cast,
    ceil,
    check_numerics,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    cos,
    count_nonzero,
    cumsum,
    divide,
    equal,
    erf,
    erfc,
    exp,
    expm1,
    eye,
    floor,
    floordiv,
    floormod,
    global_norm,
    greater,
    greater_equal,
    is_finite,
    is_inf,
    is_nan,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    matmul,
    maximum,
    minimum,
    mod,
    multiply,
    negative,
    norm,
    not_equal,
    pow,
    print_tensor,
    reciprocal,
    reduce_all,
    reduce_any,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    round,
    rsqrt,
    scalar_mul,
    sequence_mask,
    sigmoid,
    sign,
    sin,
    size,
    sqrt,
    square,
    squared_difference,
    subtract,
    tanh,
    to_double,
    to_float,
    to_int32,
    to_int64,
    truediv,
    verify_tensor_all_finite,
    where,
)
from .ops.parsing_ops import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
    parse_single_sequence_example,
)
from .ops.queue_ops import FIFOQueue, QueueBase, RandomShuffleQueue
from .ops.script_ops import py_func
from .ops.sort_ops import argsort, setdiff1d, sort, unique
from .ops.sparse_ops import (
    SparseTensor,
    SparseTensorValue,
    sparse_placeholder,
    sparse_retain,
    sparse_tensor_dense_matmul,
    sparse_tensor_to_dense,
)
from .ops.special_math_ops import einsum, tensordot
from .ops.state_ops import (
    assign,
    assign_add,
    assign_sub,
    is_variable_initialized,
    multinomial,
    random_normal,
    random_shuffle,
    random_uniform,
    truncated_normal,
)
from .ops.string_ops import (
    as_string,
    reduce_join,
    regex_replace,
    string_join,
    string_split,
    string_strip,
    string_to_number,
    substr,
)
from .ops.tensor_array_ops import TensorArray
from .placement import DeviceSpec
from .runtime.run_options import RunMetadata, RunOptions
from .runtime.session import (
    ConfigProto,
    GPUOptions,
    GraphOptions,
    InteractiveSession,
    OptimizerOptions,
    Session,
    get_default_session,
)
from .train.moving_averages import moving_average_variables
from .variables import (
    AUTO_REUSE,
    Variable,
    constant_initializer,
    get_variable,
    get_variable_scope,
    global_variables,
    global_variables_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    group,
    initialize_all_variables,
    initialize_local_variables,
    initialize_variables,
    local_variables,
    local_variables_initializer,
    ones_initializer,
    orthogonal_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    report_uninitialized_variables,
    trainable_variables,
    truncated_normal_initializer,
    variable_scope,
    variables_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)
from .version import DFLOW_VERSION, __version__

sub, mul, div = subtract, multiply, divide
newaxis = None
lin_space = linspace
neg, select, pack, unpack = negative, where, stack, unstack  # TF 0.x names older scripts still use

initialize_all_tables = tables_initializer  # TF 1.x's deprecated name
VERSION = __version__
GIT_VERSION = f"dflow-{DFLOW_VERSION}"  # TF's names the build here: this is dflow


def replicate(train_fn, cluster, *args, job: str = "worker", **kwargs) -> list:  # noqa: F811
    """Between-graph replication: ``train_fn(task_index, *args, **kwargs)`` on every task of
    ``job``, each as its own client in its worker's process (see :mod:`dflow.distributed.replicate`)."""
    from .distributed.replicate import replicate as run  # imports distributed: only when asked

    return run(train_fn, cluster, *args, job=job, **kwargs)


def __getattr__(name: str):
    # tf.Summary and its protobuf kin import tensorboardX (0.2 s) only when a script uses them
    if name in summary.PROTO_CLASSES:
        return summary.proto_class(name)
    if name in summary.REMOVED_NAMES:
        raise summary.removed_name_error(name)
    raise AttributeError(f"module 'dflow' has no attribute {name!r}: tf.{name} is not part of the TF 1.x "
                         "API dflow implements (README, 'What exists' lists it)")
