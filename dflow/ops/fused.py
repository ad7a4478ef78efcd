"""Compiled kernels for the NumPy namespace: one pass over memory where NumPy makes several.

An op written as array expressions makes a NumPy pass, and a temporary, per operator: Adam's
update is a dozen passes over the variable and its two slots (16 ms of a 70 ms deep MNIST step at
batch 50, the step's largest op type), SGD's two, max pooling's gradient a padded copy, a mask
and a pass per window offset, ReluGrad a compare, a cast and a multiply. numba compiles each into
one loop that reads every input once and writes every output once: 2-7x faster
(``docs/kernels.md``).

numba is a declared dependency, imported by the first :func:`compiled_kernels` call (importing it
and loading the kernels' cached code take about a second and 145 MiB resident, once a process,
which ``import dflow`` should not pay). Where it cannot be imported, cannot compile, or its JIT is
disabled (``NUMBA_DISABLE_JIT=1`` would run the loops in Python), the callers' NumPy code runs
(Adam's writing into preallocated outputs). Other namespaces (CuPy, ``array_api_strict``) keep
the plain array-API code. Every kernel writes new arrays, never its inputs, which other ops may
share; an optimizer's update writes its variable in place where its caller knows that nothing else
holds it (``in_place``: no second set of the variable and its slots a step, no cache misses
fetching lines that are overwritten whole).

>>> import array_api_compat.numpy as xp
>>> var, m, v, grad = (xp.ones(3, dtype=xp.float32) for _ in range(4))
>>> new_var, new_m, new_v = adam(xp, var, m, v, grad, lr_t=0.5, beta1=0.9, beta2=0.999, epsilon=0.0)
>>> new_var.tolist(), new_m.tolist()
([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import functools
import logging

import array_api_compat
import numpy

from . import parallel

__all__ = ["adam", "gradient_descent", "outer", "relu_grad", "sparse_xent", "bias_add_relu", "max_pool",
           "max_pool_grad", "lrn", "lrn_grad", "compiled_for", "compiled_kernels"]

log = logging.getLogger("dflow")
# elements (2 Mi): below, one core's compiled pass (~0.2 ms a million) ends before handing half of it to
# another pays (SGD over CIFAR-10's 0.9 M-parameter layer: 0.25 ms whole, 0.4-0.8 ms in two pieces)
FLAT_PIECES_FROM = 1 << 21
_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))
# the arrays over shared memory that a parameter server's variables are views of, by id (kept by
# dflow.distributed.shared_memory): such a view owns its memory as an array of its own does
VARIABLE_ARENAS: dict[int, object] = {}


@functools.cache
def compiled_kernels() -> dict | None:
    """The numba-compiled kernels, or None where numba cannot compile them here (said once)."""
    try:
        import numba
    except ImportError as error:
        log.warning("numba cannot be imported (%s): dflow's NumPy kernels run instead, slower", error)
        return None
    if numba.config.DISABLE_JIT:
        return None
    try:
        kernels = _compile(numba)
    except Exception as error:  # e.g. no writable cache directory for numba's compiled code
        log.warning("dflow's compiled kernels are off (%s: %s): its NumPy kernels run instead, slower; "
                    "NUMBA_CACHE_DIR can name a writable directory for them", type(error).__name__, error)
        return None
    # compiling imported SciPy, whose BLAS the intra-op threads must also keep at one thread
    parallel.forget_blas_libraries()
    return kernels


def _compile(numba) -> dict:
    # error_model="numpy": a division by zero gives inf as in NumPy, and the loop vectorizes
    # (Python's model checks every divisor); nogil: the executor's threads run two at once
    jit = numba.njit(error_model="numpy", nogil=True, cache=True)

    # an optimizer's update of one element (its math written once), and two loops over it: into
    # fresh outputs, or into the variable and its slots (in place: a loop over the inputs as its
    # outputs vectorizes no more, numba cannot tell that they alias only element by element)
    @jit
    def adam_step(var, m, v, g, lr_t, beta1, beta2, epsilon, keep1, keep2):
        m = beta1 * m + keep1 * g
        v = beta2 * v + keep2 * (g * g)
        return var - lr_t * m / (numpy.sqrt(v) + epsilon), m, v

    @jit
    def adam_into(var, m, v, grad, new_var, new_m, new_v, lr_t, beta1, beta2, epsilon):
        # in the arrays' dtype: numba types a Python 1 - float32 as float64, and the float64 loop
        # (sqrt and division in double precision) took twice as long
        one = var.dtype.type(1)
        keep1, keep2 = one - beta1, one - beta2
        for i in range(var.size):
            new_var[i], new_m[i], new_v[i] = adam_step(var[i], m[i], v[i], grad[i], lr_t, beta1, beta2,
                                                       epsilon, keep1, keep2)

    @jit
    def adam_in_place(var, m, v, grad, lr_t, beta1, beta2, epsilon):
        one = var.dtype.type(1)
        keep1, keep2 = one - beta1, one - beta2
        for i in range(var.size):
            var[i], m[i], v[i] = adam_step(var[i], m[i], v[i], grad[i], lr_t, beta1, beta2, epsilon, keep1,
                                           keep2)

    @jit
    def rms_prop_step(var, ms, mom, g, lr, rho, momentum, epsilon, keep):
        ms = rho * ms + keep * (g * g)
        mom = momentum * mom + lr * g / numpy.sqrt(ms + epsilon)
        return var - mom, ms, mom

    @jit
    def rms_prop_into(var, ms, mom, grad, new_var, new_ms, new_mom, lr, rho, momentum, epsilon):
        keep = var.dtype.type(1) - rho  # in the arrays' dtype (see adam_into)
        for i in range(var.size):
            new_var[i], new_ms[i], new_mom[i] = rms_prop_step(var[i], ms[i], mom[i], grad[i], lr, rho,
                                                              momentum, epsilon, keep)

    @jit
    def rms_prop_in_place(var, ms, mom, grad, lr, rho, momentum, epsilon):
        keep = var.dtype.type(1) - rho
        for i in range(var.size):
            var[i], ms[i], mom[i] = rms_prop_step(var[i], ms[i], mom[i], grad[i], lr, rho, momentum, epsilon,
                                                  keep)

    @jit
    def momentum_step(var, accum, g, lr, momentum, nesterov):
        accum = accum * momentum + g
        return var - (lr * g + lr * momentum * accum if nesterov else lr * accum), accum

    @jit
    def momentum_into(var, accum, grad, new_var, new_accum, lr, momentum, nesterov):
        for i in range(var.size):
            new_var[i], new_accum[i] = momentum_step(var[i], accum[i], grad[i], lr, momentum, nesterov)

    @jit
    def momentum_in_place(var, accum, grad, lr, momentum, nesterov):
        for i in range(var.size):
            var[i], accum[i] = momentum_step(var[i], accum[i], grad[i], lr, momentum, nesterov)

    @jit
    def dropout_into(x, bits, out, scale, threshold, kept, dropped):
        for i in range(x.size):
            s = kept if bits[i] < threshold else dropped
            scale[i] = s
            out[i] = x[i] * s

    @jit
    def gradient_descent_into(var, delta, new_var, alpha):
        for i in range(var.size):
            new_var[i] = var[i] - alpha * delta[i]

    @jit
    def gradient_descent_in_place(var, delta, alpha):
        for i in range(var.size):
            var[i] -= alpha * delta[i]

    @jit
    def decayed_gradient_descent_into(var, delta, decayed, new_var, alpha, decay):
        for i in range(var.size):
            new_var[i] = var[i] - alpha * (delta[i] + decayed[i] * decay)

    @jit
    def add_scaled_into(addend, x, out, scale):
        for i in range(x.size):
            out[i] = addend[i] + x[i] * scale  # rounded twice, as Mul then AddN

    @jit
    def add_rows_into(table, ids, rows, scale):
        for i in range(ids.size):  # (ids checked in range by the caller; repeated ones add up)
            target = table[ids[i]]
            for j in range(rows.shape[1]):
                target[j] += rows[i, j] * scale

    @jit
    def outer_into(column, row, out):
        for i in range(column.size):
            for j in range(row.size):
                out[i, j] = column[i] * row[j]

    @jit
    def max_pool_into(x, out, kh, kw, sh, sw, top, left):
        n, h, w, c = x.shape
        _, oh, ow, _ = out.shape
        for b in range(n):
            for r in range(oh):
                h0 = r * sh - top
                for q in range(ow):
                    w0 = q * sw - left
                    for k in range(c):
                        out[b, r, q, k] = -numpy.inf  # padding is -inf, as TF's
                    for i in range(max(h0, 0), min(h0 + kh, h)):
                        for j in range(max(w0, 0), min(w0 + kw, w)):
                            for k in range(c):
                                value = x[b, i, j, k]
                                if value > out[b, r, q, k] or value != value:  # NaN wins, as np.maximum
                                    out[b, r, q, k] = value

    @jit
    def max_pool_grad_into(x, y, dy, dx, kh, kw, sh, sw, top, left, positive_only):
        n, h, w, c = x.shape
        _, oh, ow, _ = y.shape
        routed = numpy.empty(c, numpy.bool_)
        image = numpy.empty((h, w, c), dx.dtype)  # one image's gradient, in the cache; dx may be x
        for b in range(n):
            image[:] = 0
            for r in range(oh):
                h0 = r * sh - top
                for q in range(ow):
                    w0 = q * sw - left
                    routed[:] = False
                    for i in range(max(h0, 0), min(h0 + kh, h)):
                        for j in range(max(w0, 0), min(w0 + kw, w)):
                            for k in range(c):  # the first maximal element in scan order, as TF's
                                if not routed[k] and x[b, i, j, k] == y[b, r, q, k]:
                                    if not positive_only or x[b, i, j, k] > 0:  # ReluGrad's select
                                        image[i, j, k] += dy[b, r, q, k]
                                    routed[k] = True
            dx[b] = image

    # LRN over rows of channels: each row's window sums from its prefix sums (in float64: the
    # differences of a float32 prefix lose the small squares), then passes that vectorize
    @jit
    def window_sums(values, prefix, sums, radius):
        depth = values.size
        total = prefix[0] = 0.0
        for d in range(depth):
            total += values[d]
            prefix[d + 1] = total
        for d in range(depth):
            sums[d] = prefix[min(d + radius + 1, depth)] - prefix[max(d - radius, 0)]

    @jit
    def pow_neg_into(values, beta):
        # values ** -beta in place, the form chosen once a row so that the loop vectorizes
        one = values.dtype.type(1)
        if beta == 0.75:  # the CIFAR-10 model's: two roots, not the general power
            for d in range(values.size):
                root = numpy.sqrt(values[d])
                values[d] = one / (root * numpy.sqrt(root))
        elif beta == 0.5:
            for d in range(values.size):
                values[d] = one / numpy.sqrt(values[d])
        else:
            for d in range(values.size):
                values[d] = values[d] ** values.dtype.type(-beta)

    @jit
    def lrn_bases(row, squares, prefix, sums, bases, radius, bias, alpha):
        # bias + alpha * (the window sum of row^2): what LRN raises to -beta
        for d in range(row.size):
            squares[d] = row[d] * row[d]
        window_sums(squares, prefix, sums, radius)
        for d in range(row.size):
            bases[d] = bias + alpha * sums[d]

    @jit
    def lrn_into(x, out, radius, bias, alpha, beta):
        depth = x.shape[1]
        squares, prefix, sums = numpy.empty(depth), numpy.empty(depth + 1), numpy.empty(depth)
        scales = numpy.empty(depth, x.dtype)
        for i in range(x.shape[0]):
            lrn_bases(x[i], squares, prefix, sums, scales, radius, bias, alpha)
            pow_neg_into(scales, beta)
            for d in range(depth):
                out[i, d] = x[i, d] * scales[d]

    @jit
    def lrn_grad_into(dy, x, y, out, radius, bias, alpha, beta):
        # dy * base ** -beta - 2 alpha beta x * (the window sum of dy y / base)
        depth = x.shape[1]
        squares, prefix, sums = numpy.empty(depth), numpy.empty(depth + 1), numpy.empty(depth)
        ratios, crosses, scales = numpy.empty(depth), numpy.empty(depth), numpy.empty(depth, x.dtype)
        scale = x.dtype.type(2 * alpha * beta)
        for i in range(x.shape[0]):
            lrn_bases(x[i], squares, prefix, sums, scales, radius, bias, alpha)
            for d in range(depth):
                ratios[d] = dy[i, d] * y[i, d] / scales[d]
            window_sums(ratios, prefix, crosses, radius)
            pow_neg_into(scales, beta)
            for d in range(depth):
                out[i, d] = dy[i, d] * scales[d] - scale * x[i, d] * x.dtype.type(crosses[d])

    @jit
    def relu_into(x, out, zero):
        for i in range(out.size):
            out[i] = zero if x[i] < zero else x[i]  # NaN stays NaN, as np.maximum(NaN, 0)

    @jit
    def relu_grad_into(gradient, features, out):
        for i in range(out.size):  # TF's select: an inf gradient at a zero feature is 0, not NaN
            out[i] = gradient[i] if features[i] > 0 else 0

    # an activation's gradient from its output, in the order its ops multiplied
    @jit
    def sigmoid_grad_into(y, dy, out, one):
        for i in range(out.size):
            out[i] = dy[i] * y[i] * (one - y[i])

    @jit
    def tanh_grad_into(y, dy, out, one):
        for i in range(out.size):
            out[i] = dy[i] * (one - y[i] * y[i])

    @jit
    def sparse_xent_into(logits, labels, loss, backprop):
        classes = logits.shape[1]
        for i in range(logits.shape[0]):
            label = labels[i]
            if label < 0 or label >= classes:
                return i  # the caller names the row; its outputs are not used
            top = logits[i, 0]
            for k in range(1, classes):
                top = max(top, logits[i, k])
            total = logits.dtype.type(0)
            for k in range(classes):
                backprop[i, k] = numpy.exp(logits[i, k] - top)
                total += backprop[i, k]
            loss[i] = (top - logits[i, label]) + numpy.log(total)  # (the small term is not lost to top)
            for k in range(classes):
                backprop[i, k] /= total
            backprop[i, label] -= 1
        return -1

    @jit
    def bias_add_relu_into(rows, bias, out):
        for i in range(rows.shape[0]):
            for k in range(bias.size):
                value = rows[i, k] + bias[k]
                out[i, k] = 0 if value < 0 else value  # NaN stays NaN, as np.maximum(NaN, 0)

    # batch normalization over the rows of a channels-last array (a piece of them: each core
    # sums its own rows into its own accumulators, in float64 so that no row's weight is lost)
    @jit
    def channel_sums_into(rows, sums, squares):
        for i in range(rows.shape[0]):
            for k in range(rows.shape[1]):
                value = rows[i, k]
                sums[k] += value
                squares[k] += value * value

    # (x - mean) first, not x * factor + (offset - mean * factor): where the mean is large
    # against the spread, the two products would cancel and leave their rounding errors
    @jit
    def normalize_into(rows, mean, factor, offset, out):
        for i in range(rows.shape[0]):
            for k in range(rows.shape[1]):
                out[i, k] = (rows[i, k] - mean[k]) * factor[k] + offset[k]

    # (zero: the arrays' own type, so that a select between it and a value stays in that type
    # and vectorizes; a literal 0 made numba compute in float64)
    @jit
    def normalize_relu_into(rows, mean, factor, offset, zero, out):
        for i in range(rows.shape[0]):
            for k in range(rows.shape[1]):
                value = (rows[i, k] - mean[k]) * factor[k] + offset[k]
                out[i, k] = zero if value < zero else value  # NaN stays NaN, as Relu's

    @jit
    def batch_norm_grad_sums_into(dy, x, mean, sum_dy, sum_dy_centered):
        for i in range(dy.shape[0]):
            for k in range(dy.shape[1]):
                g = dy[i, k]
                sum_dy[k] += g
                sum_dy_centered[k] += g * (x[i, k] - mean[k])

    @jit
    def batch_norm_grad_into(dy, x, mean, a, b, c, dx):
        for i in range(dy.shape[0]):
            for k in range(dy.shape[1]):
                dx[i, k] = dy[i, k] * a[k] + (x[i, k] - mean[k]) * b[k] + c[k]

    # the same two passes behind a ReLU: dy is the ReLU's gradient where its output y is positive
    @jit
    def batch_norm_relu_grad_sums_into(g, y, x, mean, zero, sum_dy, sum_dy_centered):
        for i in range(g.shape[0]):
            for k in range(g.shape[1]):
                dy = g[i, k] if y[i, k] > zero else zero
                sum_dy[k] += dy
                sum_dy_centered[k] += dy * (x[i, k] - mean[k])

    @jit
    def relu_grad_scaled_into(g, y, zero, factor, out):
        for i in range(g.shape[0]):
            for k in range(g.shape[1]):
                out[i, k] = g[i, k] * factor[k] if y[i, k] > zero else zero

    @jit
    def batch_norm_relu_grad_into(g, y, x, mean, zero, a, b, c, dx):
        for i in range(g.shape[0]):
            for k in range(g.shape[1]):
                dy = g[i, k] if y[i, k] > zero else zero
                dx[i, k] = dy * a[k] + (x[i, k] - mean[k]) * b[k] + c[k]

    for dtype in _FLOATS:  # compile now (or load numba's cache): the first step should not wait
        one = numpy.ones(1, dtype)
        adam_into(*[one] * 7, *one.repeat(4))
        adam_in_place(*(one.copy() for _ in range(4)), *one.repeat(4))
        rms_prop_into(*[one] * 7, *one.repeat(4))
        rms_prop_in_place(*(one.copy() for _ in range(4)), *one.repeat(4))
        for nesterov in (False, True):
            momentum_into(*[one] * 5, one[0], one[0], nesterov)
            momentum_in_place(*(one.copy() for _ in range(3)), one[0], one[0], nesterov)
        gradient_descent_into(one, one, one.copy(), one[0])
        gradient_descent_in_place(one.copy(), one, one[0])
        decayed_gradient_descent_into(one, one, one, one.copy(), one[0], one[0])
        add_scaled_into(one, one, one.copy(), one[0])
        outer_into(one, one, one.reshape(1, 1).copy())
        for ids_dtype in (numpy.int32, numpy.int64):
            add_rows_into(one.reshape(1, 1).copy(), numpy.zeros(1, ids_dtype), one.reshape(1, 1), one[0])
        image = numpy.ones((1, 1, 1, 1), dtype)
        max_pool_into(image, image.copy(), 1, 1, 1, 1, 0, 0)
        max_pool_grad_into(image, image, image, image.copy(), 1, 1, 1, 1, 0, 0, False)
        row = one.reshape(1, 1)
        lrn_into(row, row.copy(), 1, 1.0, 1.0, 0.75)
        lrn_grad_into(row, row, row, row.copy(), 1, 1.0, 1.0, 0.75)
        relu_into(one, one.copy(), one[0])
        relu_grad_into(one, one, one.copy())
        sigmoid_grad_into(one, one, one.copy(), one[0])
        tanh_grad_into(one, one, one.copy(), one[0])
        bias_add_relu_into(one.reshape(1, 1), one, one.reshape(1, 1).copy())
        row, wide = one.reshape(1, 1), numpy.zeros(1)
        channel_sums_into(row, wide.copy(), wide.copy())
        normalize_into(row, one, one, one, row.copy())
        normalize_relu_into(row, one, one, one, one[0], row.copy())
        batch_norm_grad_sums_into(row, row, one, wide.copy(), wide.copy())
        batch_norm_grad_into(row, row, one, one, one, one, row.copy())
        batch_norm_relu_grad_sums_into(row, row, row, one, one[0], wide.copy(), wide.copy())
        batch_norm_relu_grad_into(row, row, row, one, one[0], one, one, one, row.copy())
        relu_grad_scaled_into(row, row, one[0], one, row.copy())
        for labels_dtype in (numpy.int32, numpy.int64):
            row = one.reshape(1, 1)
            sparse_xent_into(row, numpy.zeros(1, labels_dtype), one.copy(), row.copy())
    return {"adam_into": adam_into, "adam_in_place": adam_in_place, "rms_prop_in_place": rms_prop_in_place,
            "momentum_in_place": momentum_in_place, "gradient_descent_in_place": gradient_descent_in_place,
            "gradient_descent_into": gradient_descent_into,
            "decayed_gradient_descent_into": decayed_gradient_descent_into, "outer_into": outer_into,
            "add_rows_into": add_rows_into,
            "add_scaled_into": add_scaled_into,
            "max_pool_into": max_pool_into, "max_pool_grad_into": max_pool_grad_into,
            "relu_into": relu_into, "relu_grad_into": relu_grad_into, "lrn_into": lrn_into,
            "lrn_grad_into": lrn_grad_into,
            "sigmoid_grad_into": sigmoid_grad_into, "tanh_grad_into": tanh_grad_into,
            "bias_add_relu_into": bias_add_relu_into, "sparse_xent_into": sparse_xent_into,
            "rms_prop_into": rms_prop_into,
            "momentum_into": momentum_into, "dropout_into": dropout_into,
            "channel_sums_into": channel_sums_into, "normalize_into": normalize_into,
            "batch_norm_grad_sums_into": batch_norm_grad_sums_into,
            "batch_norm_grad_into": batch_norm_grad_into, "normalize_relu_into": normalize_relu_into,
            "batch_norm_relu_grad_sums_into": batch_norm_relu_grad_sums_into,
            "batch_norm_relu_grad_into": batch_norm_relu_grad_into,
            "relu_grad_scaled_into": relu_grad_scaled_into}


def _adam_into_numpy(var, m, v, grad, new_var, new_m, new_v, lr_t, beta1, beta2, epsilon):
    """``adam_into`` as NumPy passes into the outputs (``new_var`` holds the temporaries)."""
    numpy.multiply(m, beta1, out=new_m)
    numpy.multiply(grad, 1 - beta1, out=new_var)
    new_m += new_var
    numpy.multiply(grad, grad, out=new_v)
    new_v *= 1 - beta2
    numpy.multiply(v, beta2, out=new_var)
    new_v += new_var
    numpy.sqrt(new_v, out=new_var)
    new_var += epsilon
    numpy.divide(new_m, new_var, out=new_var)
    new_var *= lr_t
    numpy.subtract(var, new_var, out=new_var)


def _rms_prop_into_numpy(var, ms, mom, grad, new_var, new_ms, new_mom, lr, rho, momentum, epsilon):
    """``rms_prop_into`` as NumPy passes into the outputs (``new_var`` holds the temporaries)."""
    numpy.multiply(grad, grad, out=new_ms)
    new_ms *= 1 - rho
    numpy.multiply(ms, rho, out=new_var)
    new_ms += new_var
    numpy.add(new_ms, epsilon, out=new_var)
    numpy.sqrt(new_var, out=new_var)
    numpy.divide(grad, new_var, out=new_var)
    new_var *= lr
    numpy.multiply(mom, momentum, out=new_mom)
    new_mom += new_var
    numpy.subtract(var, new_mom, out=new_var)


def _momentum_into_numpy(var, accum, grad, new_var, new_accum, lr, momentum, nesterov):
    numpy.multiply(accum, momentum, out=new_accum)
    new_accum += grad
    if nesterov:  # var - (lr * g + lr * momentum * accum)
        numpy.multiply(new_accum, lr * momentum, out=new_var)
        new_var += grad * lr
    else:
        numpy.multiply(new_accum, lr, out=new_var)
    numpy.subtract(var, new_var, out=new_var)


def _gradient_descent_into_numpy(var, delta, new_var, alpha):
    numpy.multiply(delta, alpha, out=new_var)
    numpy.subtract(var, new_var, out=new_var)


def _decayed_gradient_descent_into_numpy(var, delta, decayed, new_var, alpha, decay):
    numpy.multiply(decayed, decay, out=new_var)
    new_var += delta
    new_var *= alpha
    numpy.subtract(var, new_var, out=new_var)


def _writable(kernels, *arrays) -> bool:
    """Whether an update may write ``arrays`` in place: the compiled kernels loaded, each array
    its own (no view of another, but for a variable's in shared memory), writable and C-ordered
    (its flat form a view). That nothing else reads them is the caller's to know
    (``SessionState.held_only_here``)."""
    if kernels is None:
        return False
    for a in arrays:  # (loops, not generators, here and in _numpy_floats: a small update's checks)
        flags = a.flags
        if ((a.base is not None and id(a.base) not in VARIABLE_ARENAS) or not flags.writeable
                or not flags.c_contiguous):
            return False
    return True


def _numpy_floats(xp, arrays) -> bool:
    """Whether ``arrays`` are NumPy arrays of one float dtype (float32 or float64)."""
    dtype = getattr(arrays[0], "dtype", None)
    if dtype not in _FLOATS or not array_api_compat.is_numpy_namespace(xp):
        return False
    for a in arrays:
        if not isinstance(a, numpy.ndarray) or a.dtype != dtype:
            return False
    return True


def compiled_for(xp, *arrays) -> dict | None:
    """The compiled kernels where they take ``arrays`` (see :func:`_numpy_floats`), else None:
    the caller's own NumPy or array-API code runs."""
    return compiled_kernels() if _numpy_floats(xp, arrays) else None


def adam(xp, var, m, v, grad, lr_t, beta1, beta2, epsilon, in_place=False):
    """TF's ``ApplyAdam`` step with the bias-corrected rate ``lr_t``: the new (var, m, v); with
    ``in_place``, where the compiled kernel runs, written into ``var``, ``m`` and ``v`` (see
    :func:`_writable`)."""
    if not _numpy_floats(xp, [var, m, v, grad]) or not var.shape == m.shape == v.shape == grad.shape:
        m_t = beta1 * m + (1 - beta1) * grad
        v_t = beta2 * v + (1 - beta2) * (grad * grad)
        return var - lr_t * m_t / (xp.sqrt(v_t) + epsilon), m_t, v_t
    scalar = var.dtype.type  # float32 math for float32 arrays, as TF's kernel
    kernels = compiled_kernels()
    if in_place and _writable(kernels, var, m, v):
        _flat_pieces(kernels["adam_in_place"], [var, m, v, grad], [scalar(lr_t), scalar(beta1), scalar(beta2),
                                                                     scalar(epsilon)])
        return var, m, v
    outputs = [numpy.empty(var.shape, var.dtype) for _ in range(3)]
    _flat_pieces(kernels["adam_into"] if kernels else _adam_into_numpy, [var, m, v, grad, *outputs],
                 [scalar(lr_t), scalar(beta1), scalar(beta2), scalar(epsilon)])
    return tuple(outputs)


def rms_prop(xp, var, ms, mom, grad, lr, rho, momentum, epsilon, in_place=False):
    """TF's ``ApplyRMSProp`` step: the new (var, ms, mom), one pass where NumPy made ten (a 2048 x
    625 layer: 0.9 against 3.2 ms; TensorFlow's kernel 1.2-1.4); ``in_place`` as :func:`adam`'s."""
    if not _numpy_floats(xp, [var, ms, mom, grad]) or not var.shape == ms.shape == mom.shape == grad.shape:
        new_ms = rho * ms + (1 - rho) * (grad * grad)
        new_mom = momentum * mom + lr * grad / xp.sqrt(new_ms + epsilon)
        return var - new_mom, new_ms, new_mom
    scalar = var.dtype.type  # float32 math for float32 arrays, as TF's kernel
    kernels = compiled_kernels()
    scalars = [scalar(lr), scalar(rho), scalar(momentum), scalar(epsilon)]
    if in_place and _writable(kernels, var, ms, mom):
        _flat_pieces(kernels["rms_prop_in_place"], [var, ms, mom, grad], scalars)
        return var, ms, mom
    outputs = [numpy.empty(var.shape, var.dtype) for _ in range(3)]
    _flat_pieces(kernels["rms_prop_into"] if kernels else _rms_prop_into_numpy,
                 [var, ms, mom, grad, *outputs], scalars)
    return tuple(outputs)


def momentum(xp, var, accum, grad, lr, momentum, nesterov=False, in_place=False):
    """TF's ``ApplyMomentum`` step: the new (var, accum); with ``nesterov``, ``var - (lr * grad +
    lr * momentum * accum)``; ``in_place`` as :func:`adam`'s."""
    if not _numpy_floats(xp, [var, accum, grad]) or not var.shape == accum.shape == grad.shape:
        new_accum = accum * momentum + grad
        if nesterov:
            return var - (lr * grad + lr * momentum * new_accum), new_accum
        return var - lr * new_accum, new_accum
    scalar = var.dtype.type
    kernels = compiled_kernels()
    scalars = [scalar(lr), scalar(momentum), bool(nesterov)]
    if in_place and _writable(kernels, var, accum):
        _flat_pieces(kernels["momentum_in_place"], [var, accum, grad], scalars)
        return var, accum
    outputs = [numpy.empty(var.shape, var.dtype) for _ in range(2)]
    _flat_pieces(kernels["momentum_into"] if kernels else _momentum_into_numpy, [var, accum, grad, *outputs],
                 scalars)
    return tuple(outputs)


def dropout(x, keep_prob, generator: numpy.random.Generator):
    """TF's dropout of an array :func:`compiled_for` takes, ``keep_prob`` in (0, 1]: ``(x * scale,
    scale)``, ``scale`` being ``1 / keep_prob`` where a uniform 32-bit draw is below ``keep_prob *
    2**32``, else 0. The generator's raw bits, two draws from each 64-bit word, and one pass: drawing
    floats and comparing, casting, dividing and multiplying took twice as long (803 K elements,
    nlintz's first dropout: 2.5 ms)."""
    size = x.size
    bits = generator.bit_generator.random_raw(-(-size // 2)).view(numpy.uint32)[:size]
    scalar = x.dtype.type
    threshold = numpy.int64(min(int(float(keep_prob) * 2.0**32), 1 << 32))  # 1 keeps every draw
    out, scale = numpy.empty(x.shape, x.dtype), numpy.empty(x.shape, x.dtype)
    _flat_pieces(compiled_kernels()["dropout_into"], [x, bits, out, scale],
                 [threshold, scalar(1) / scalar(keep_prob), scalar(0)])
    return out, scale


def gradient_descent(xp, var, alpha, delta, decayed=None, decay=None, in_place=False):
    """TF's ``ApplyGradientDescent``: ``var - alpha * delta``, one pass and no temporary; with
    ``decayed`` and ``decay``, ``var - alpha * (delta + decayed * decay)`` (an L2 weight decay's
    gradient summed in the same pass: :mod:`dflow.runtime.fusion`); ``in_place`` as :func:`adam`'s
    (without decay: the decayed array is the variable's value, which its read still holds)."""
    if decayed is not None and getattr(decayed, "ndim", 0) == 0:
        decayed, decay = decay, decayed  # Mul(s, x): the scalar first
    arrays = [var, delta] if decayed is None else [var, delta, decayed]
    if (not _numpy_floats(xp, arrays) or delta.shape != var.shape
            or (decayed is not None and (decayed.shape != var.shape or getattr(decay, "ndim", 0) != 0))):
        return var - alpha * (delta if decayed is None else delta + decayed * decay)
    kernels = compiled_kernels()
    if in_place and decayed is None and _writable(kernels, var):
        _flat_pieces(kernels["gradient_descent_in_place"], [var, delta], [var.dtype.type(alpha)])
        return var
    new_var = numpy.empty(var.shape, var.dtype)
    if decayed is None:
        _flat_pieces(kernels["gradient_descent_into"] if kernels else _gradient_descent_into_numpy,
                     [var, delta, new_var], [var.dtype.type(alpha)])
    else:
        kernel = kernels["decayed_gradient_descent_into"] if kernels else _decayed_gradient_descent_into_numpy
        _flat_pieces(kernel, [var, delta, decayed, new_var], [var.dtype.type(alpha), var.dtype.type(decay)])
    return new_var


def add_scaled(xp, addend, x, scale, out=None):
    """``addend + x * scale`` for a 0-d ``scale``: an L2 weight decay's gradient summed into the
    loss's (``AddN(g, Mul(w, s))``, fused when a stage is lowered: :mod:`dflow.runtime.fusion`) in
    one pass, where the Mul and the AddN made two and a temporary; into ``out`` where given
    (``addend`` itself, in place)."""
    if getattr(x, "ndim", 0) == 0:
        x, scale = scale, x  # Mul(s, w): the scalar first
    if (getattr(scale, "ndim", 1) != 0 or not _numpy_floats(xp, [addend, x]) or x.shape != addend.shape
            or compiled_kernels() is None):
        return addend + x * scale
    if out is not addend or not _writable(compiled_kernels(), out):
        out = numpy.empty(x.shape, x.dtype)
    _flat_pieces(compiled_kernels()["add_scaled_into"], [addend, x, out], [x.dtype.type(scale)])
    return out


def add_rows(table, ids, rows, scale=1) -> bool:
    """``table[ids[i]] += rows[i] * scale`` in place, repeated ids adding up, for a table and rows
    that :func:`compiled_for` takes (C-ordered, ``rows`` one per id of ``ids``, each id checked in
    range): a scatter's update of an embedding's rows, one pass over them where NumPy's ``add.at``
    takes about 1 us a row of 128. False where it cannot (the caller's code runs)."""
    if (compiled_kernels() is None or not table.flags.c_contiguous or not table.flags.writeable
            or table.ndim == 0 or ids.ndim != 1 or not numpy.issubdtype(ids.dtype, numpy.integer)):
        return False
    width = table.size // table.shape[0] if table.shape[0] else 0
    compiled_kernels()["add_rows_into"](table.reshape(table.shape[0], width), ids,
                                        numpy.ascontiguousarray(rows).reshape(ids.size, width),
                                        table.dtype.type(scale))
    return True


def outer(column, row):
    """``column @ row`` of an ``(m, 1)`` and a ``(1, n)`` array that :func:`compiled_for` takes (a
    dense layer's weight gradient at batch 1): one pass over the product, where BLAS's k = 1 GEMM
    and NumPy's broadcast multiply make it 8x and 5x slower (2304 x 384: 0.04 ms)."""
    out = numpy.empty((column.shape[0], row.shape[1]), numpy.result_type(column, row))
    compiled_kernels()["outer_into"](column[:, 0], row[0], out)
    return out


def relu(x):
    """``max(x, 0)`` of an array that :func:`compiled_for` takes, in one pass written straight
    into the result (NumPy's own cut into pieces copied each piece in again: 2.5 M elements 0.96
    against 0.55 ms)."""
    out = numpy.empty(x.shape, x.dtype)
    _flat_pieces(compiled_kernels()["relu_into"], [x, out], [x.dtype.type(0)])
    return out


def relu_grad(gradient, features):
    """TF's ``ReluGrad`` of arrays that :func:`compiled_for` takes: the gradient where the
    feature is positive, else 0."""
    out = numpy.empty(gradient.shape, gradient.dtype)
    _flat_pieces(compiled_kernels()["relu_grad_into"], [gradient, features, out])
    return out


def sigmoid_grad(y, dy):
    """TF's ``SigmoidGrad`` of arrays that :func:`compiled_for` takes: ``dy * y * (1 - y)``."""
    out = numpy.empty(y.shape, y.dtype)
    _flat_pieces(compiled_kernels()["sigmoid_grad_into"], [y, dy, out], [y.dtype.type(1)])
    return out


def tanh_grad(y, dy):
    """TF's ``TanhGrad`` of arrays that :func:`compiled_for` takes: ``dy * (1 - y * y)``."""
    out = numpy.empty(y.shape, y.dtype)
    _flat_pieces(compiled_kernels()["tanh_grad_into"], [y, dy, out], [y.dtype.type(1)])
    return out


def sparse_xent(logits, labels):
    """TF's ``SparseSoftmaxCrossEntropyWithLogits`` of ``(batch, classes)`` logits that
    :func:`compiled_for` takes and integer ``labels``: (loss, backprop) in one pass per row, where
    NumPy makes a dozen (75 us at batch 1, TF's kernel 12); ValueError naming a label out of range."""
    if labels.dtype not in (numpy.int32, numpy.int64):  # the types it is compiled for
        labels = labels.astype(numpy.int64)
    loss = numpy.empty(logits.shape[0], logits.dtype)
    backprop = numpy.empty(logits.shape, logits.dtype)
    bad_row = compiled_kernels()["sparse_xent_into"](logits, labels, loss, backprop)
    if bad_row >= 0:
        raise ValueError(f"labels must be in [0, {logits.shape[1]}) (the logits have {logits.shape[1]} "
                         f"classes); got {int(labels[bad_row])} at row {bad_row}")
    return loss, backprop


def bias_add_relu(value, bias, out=None):
    """``max(value + bias, 0)`` for a channels-last ``value`` and arrays that :func:`compiled_for`
    takes: one pass, where BiasAdd and Relu make two and a temporary; into ``out`` where given
    (``value`` itself, in place)."""
    out = numpy.empty(value.shape, value.dtype) if out is None else out
    rows, out_rows = value.reshape(-1, bias.size), out.reshape(-1, bias.size)
    kernel = compiled_kernels()["bias_add_relu_into"]
    if value.size < FLAT_PIECES_FROM:
        kernel(rows, bias, out_rows)
    else:
        parallel.map_pieces(numpy, lambda piece: kernel(rows[piece], bias, out_rows[piece]),
                            parallel.pieces_for(rows.shape[0], rows.shape[0]))
    return out


def _over_rows(fn, rows) -> list:
    """``fn(piece)`` over one piece of ``rows`` per core where they are many (a memory-bound pass
    the cores share); else ``fn`` of all of them here, without the pool's hand-off and BLAS thread
    switch (a compiled loop calls no BLAS): 10-20 us that a dense layer's pass does not take."""
    n = rows.shape[0]
    if rows.size < FLAT_PIECES_FROM:
        return [fn(slice(0, n))]
    return parallel.map_pieces(numpy, fn, parallel.pieces_for(n, n))


def _channel_totals(kernel, arrays: list, *args, channels: int):
    """``kernel(*pieces, *args, total_a, total_b)`` over each core's piece of the ``(rows,
    channels)`` arrays, into float64 accumulators of its own; the pieces' totals summed."""
    def piece(rows):
        totals = numpy.zeros(channels), numpy.zeros(channels)
        kernel(*(a[rows] for a in arrays), *args, *totals)
        return totals

    parts = _over_rows(piece, arrays[0])
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def _rows_into(kernel, arrays: list, per_channel: list, out) -> None:
    _over_rows(lambda rows: kernel(*(a[rows] for a in arrays), *per_channel, out[rows]), arrays[0])


def channel_moments(x):
    """``(mean, variance)`` in float64 of each channel (the last axis) of an ``x`` that
    :func:`compiled_for` takes, over every other axis, in one pass over ``x``."""
    channels = x.shape[-1]
    rows = x.reshape(-1, channels)
    sums, squares = _channel_totals(compiled_kernels()["channel_sums_into"], [rows], channels=channels)
    count = max(rows.shape[0], 1)
    mean = sums / count
    return mean, numpy.maximum(squares / count - mean * mean, 0.0)  # float64: no cancellation to fear


def normalize(x, mean, factor, offset, relu=False):
    """``(x - mean) * factor + offset`` per channel (the last axis; ``max(.., 0)`` with ``relu``),
    in one pass over ``x``."""
    channels = x.shape[-1]
    y = numpy.empty(x.shape, x.dtype)
    per_channel = [numpy.asarray(v, x.dtype).reshape(channels) for v in (mean, factor, offset)]
    zero = [x.dtype.type(0)] if relu else []
    kernel = compiled_kernels()["normalize_relu_into" if relu else "normalize_into"]
    _rows_into(kernel, [x.reshape(-1, channels)], [*per_channel, *zero], y.reshape(-1, channels))
    return y


def add_centered(addend, x, mean, slope, shift, out=None):
    """``addend + (x - mean) * slope + shift`` per channel (the last axis) in one pass, into
    ``out`` where given (``addend`` itself: each element is read before it is written)."""
    channels = x.shape[-1]
    out = numpy.empty(x.shape, x.dtype) if out is None else out
    ones = numpy.ones(channels, x.dtype)  # batch_norm_grad_into's dy * a + (x - mean) * b + c, a = 1
    per_channel = [numpy.asarray(v, x.dtype).reshape(channels) for v in (mean, ones, slope, shift)]
    rows = [a.reshape(-1, channels) for a in (addend, x)]
    _rows_into(compiled_kernels()["batch_norm_grad_into"], rows, per_channel, out.reshape(-1, channels))
    return out


def batch_norm_training(x, scale, offset, epsilon, relu=False):
    """TF's ``FusedBatchNorm`` while training, for a channels-last ``x`` that :func:`compiled_for`
    takes: ``(y, mean, variance, inverse std)`` of each channel over every other axis, in two
    passes over ``x`` (its sums, then ``y``; with ``relu``, ``max(y, 0)`` in the same pass)."""
    mean, variance = channel_moments(x)
    inverse_std = 1.0 / numpy.sqrt(variance + epsilon)
    y = normalize(x, mean, inverse_std * scale, offset, relu)
    return y, mean.astype(x.dtype), variance.astype(x.dtype), inverse_std.astype(x.dtype)


def batch_norm_grad_sums(dy, x, mean, relu_output=None):
    """``(sum dy, sum dy * (x - mean))`` in float64 of each channel, in one pass over both; with
    ``relu_output`` (a ReLU's ``y`` after the normalization), ``dy`` is the ReLU's gradient,
    taken where ``y`` is positive in the same pass."""
    channels = x.shape[-1]
    mean = numpy.asarray(mean, x.dtype).reshape(channels)
    masks = [] if relu_output is None else [relu_output]
    zero = [] if relu_output is None else [x.dtype.type(0)]
    kernel = compiled_kernels()["batch_norm_grad_sums_into" if relu_output is None else
                                "batch_norm_relu_grad_sums_into"]
    return _channel_totals(kernel, [a.reshape(-1, channels) for a in (dy, *masks, x)], mean, *zero,
                           channels=channels)


def relu_grad_scaled(gradient, relu_output, factor):
    """``gradient * factor`` per channel where ``relu_output`` is positive, else 0, in one pass."""
    channels = gradient.shape[-1]
    out = numpy.empty(gradient.shape, gradient.dtype)
    per_channel = [gradient.dtype.type(0), numpy.asarray(factor, gradient.dtype).reshape(channels)]
    rows = [a.reshape(-1, channels) for a in (gradient, relu_output)]
    _rows_into(compiled_kernels()["relu_grad_scaled_into"], rows, per_channel, out.reshape(-1, channels))
    return out


def batch_norm_training_grad(dy, x, scale, mean, inverse_std, relu_output=None):
    """``(dx, dscale, doffset)`` of :func:`batch_norm_training` from ``dy``, in two passes over
    ``dy`` and ``x`` (the channels' sums, then ``dx = dy * a + (x - mean) * b + c``); with
    ``relu_output`` (a ReLU's ``y`` after it), ``dy`` is the ReLU's gradient, taken where ``y`` is
    positive in the same passes."""
    channels = x.shape[-1]
    dy_rows, x_rows = dy.reshape(-1, channels), x.reshape(-1, channels)
    masks = [] if relu_output is None else [relu_output.reshape(-1, channels)]
    zero = [] if relu_output is None else [x.dtype.type(0)]
    sum_dy, sum_dy_centered = batch_norm_grad_sums(dy, x, mean, relu_output)
    count = max(x_rows.shape[0], 1)
    inverse_std64, scale64 = inverse_std.astype(numpy.float64), scale.astype(numpy.float64)
    a = scale64 * inverse_std64
    b = -a * inverse_std64 * inverse_std64 * sum_dy_centered / count
    c = -a * sum_dy / count
    dx = numpy.empty(x.shape, x.dtype)
    kernel = "batch_norm_grad_into" if relu_output is None else "batch_norm_relu_grad_into"
    _rows_into(compiled_kernels()[kernel], [dy_rows, *masks, x_rows],
               [mean, *zero, *(v.astype(x.dtype) for v in (a, b, c))], dx.reshape(-1, channels))
    return dx, (sum_dy_centered * inverse_std64).astype(x.dtype), sum_dy.astype(x.dtype)


def max_pool(x, ksize, strides, top, left, out_hw):
    """Max pooling of an NHWC array that :func:`compiled_for` takes, padded by ``top``/``left``."""
    out = numpy.empty((x.shape[0], *out_hw, x.shape[3]), x.dtype)
    _image_pieces(compiled_kernels()["max_pool_into"], [x], out, *ksize, *strides, top, left)
    return out


def max_pool_grad(x, y, dy, ksize, strides, top, left, positive_only=False, out=None):
    """:func:`max_pool`'s gradient: each window's ``dy`` to its first maximum in scan order
    (``positive_only``: and then ReluGrad's, where ``x`` is a ReLU's output: 0 where it is 0);
    into ``out`` where given (``x`` itself: each image is read whole before it is written)."""
    dx = numpy.empty(x.shape, dy.dtype) if out is None else out
    _image_pieces(compiled_kernels()["max_pool_grad_into"], [x, y, dy], dx, *ksize, *strides, top, left,
                  positive_only)
    return dx


def lrn(x, depth_radius, bias, alpha, beta):
    """TF's LRN over the last axis of an array that :func:`compiled_for` takes."""
    out = numpy.empty_like(x, order="C")
    _row_pieces(compiled_kernels()["lrn_into"], [x], out, depth_radius, bias, alpha, beta)
    return out


def lrn_grad(dy, x, y, depth_radius, bias, alpha, beta):
    """:func:`lrn`'s gradient from the forward's input ``x`` and output ``y``."""
    out = numpy.empty_like(x, order="C")
    _row_pieces(compiled_kernels()["lrn_grad_into"], [dy, x, y], out, depth_radius, bias, alpha, beta)
    return out


def _row_pieces(kernel, inputs: list, out, *args) -> None:
    """``kernel(*inputs, out, *args)`` over the arrays as rows of their last axis, one piece of the
    rows per core."""
    depth = out.shape[-1]
    rows = [numpy.ascontiguousarray(a).reshape(-1, depth) for a in inputs]
    flat_out = out.reshape(-1, depth)
    n = flat_out.shape[0]
    parallel.map_pieces(numpy, lambda piece: kernel(*(a[piece] for a in rows), flat_out[piece], *args),
                        parallel.pieces_for(n, n))


def _image_pieces(kernel, inputs: list, out, *args) -> None:
    """``kernel(*inputs, out, *args)`` over one piece of the images per core, each writing its own
    images of ``out``."""
    n = out.shape[0]
    parallel.map_pieces(numpy, lambda rows: kernel(*(a[rows] for a in inputs), out[rows], *args),
                        parallel.pieces_for(n, n))


def _flat_pieces(kernel, arrays: list, scalars=()) -> None:
    """``kernel(*arrays, *scalars)`` over the arrays flattened in C order (an input that is not
    C-contiguous is copied; the outputs are fresh or C-ordered, so their flat forms are views), a
    big one (from :data:`FLAT_PIECES_FROM` elements) cut into one piece per core: the cores share
    a memory-bound pass."""
    flat = [a.reshape(-1) for a in arrays]
    size = flat[0].size
    if size < FLAT_PIECES_FROM:
        kernel(*flat, *scalars)
        return
    parallel.map_pieces(numpy, lambda piece: kernel(*(a[piece] for a in flat), *scalars),
                        parallel.pieces_for(size, size))
