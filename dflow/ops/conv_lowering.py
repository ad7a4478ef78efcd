"""Array-level lowerings of convolution, pooling and LRN, over an array namespace ``xp``.

Everything here is NHWC and uses only the Python array API standard (strided
basic slicing, ``stack``, ``reshape``, ``matmul``...), so the same code runs on
NumPy, CuPy and ``array_api_strict``. On x86-64 Linux, float32 NumPy convolutions and LRN
are oneDNN's direct kernels instead (:mod:`.onednn`, 1.5-4x faster); what follows runs for
every other namespace and dtype, and where oneDNN cannot load. Its choices follow
docs/measured.md, then measurements of the CIFAR-10 step at batch 100 on 2 cores:

- a 1x1 convolution is one matmul of the (strided) pixels by the ``(C, O)`` filter;
- a stride-1 convolution over >= 8 channels needs no im2col: with the padded
  input laid out as an ``(H*N, W*C)`` matrix of ``(h, n)`` rows, kernel row ``i``
  of all the windows under one output column is a strided ``(OH*N, kw*C)`` view
  that matmul reads in place, so ``y`` is ``kh*OW`` matmuls (:func:`_conv_rows`);
  2.2x faster than im2col for the 5x5x64x64 conv, and no 25x buffer;
- otherwise a convolution is im2col + ONE matmul: the ``kh*kw`` strided slices
  of the padded input are stacked on a new axis, giving ``(N, OH, OW, kh*kw, C)``,
  which reshapes for free to the ``(N*OH*OW, kh*kw*C)`` patch matrix (channel-major
  ``(C*kh*kw, N*OH*OW)`` for RGB input);
- the input gradient is a *full* convolution of the (stride-dilated) output
  gradient with the flipped, in/out-transposed filter, through the same two
  lowerings (no scatter-add col2im);
- the filter gradient is ``patches.T @ dy``, or its row form;
- max-pooling is ``maximum`` over the ``kh*kw`` strided slices;
- on a GPU (CuPy) every op takes its batch whole and every convolution is im2col + ONE
  matmul: each kernel launch costs ~10-20 us of Python and driver time, so the CPU's
  pieces and ``kh*OW`` row matmuls (1,500 launches for one layer at batch 100) cost more
  than the arithmetic, and the GPU has the memory for the whole patch matrix;
- on a CPU big batches are processed in pieces: :data:`BATCH_PIECE` images per im2col
  buffer (25x the input for a 5x5 filter), :data:`ROWS_PIECE` for the lowerings
  whose buffers are input-sized (bigger matmuls are faster), :data:`POOL_PIECE`
  for pooling (its per-window temporaries then stay in cache).

Window geometry is TensorFlow's: ``SAME`` gives ``ceil(in/stride)`` outputs and
pads ``max((out-1)*stride + k_eff - in, 0)`` in total, ``total // 2`` before.
"""

from __future__ import annotations

import math

import array_api_compat

from . import fused, onednn
from .parallel import map_pieces, pieces_for, stacked_pieces

__all__ = [
    "BATCH_PIECE", "ROWS_PIECE", "POOL_PIECE", "window_geometry",
    "conv2d", "conv2d_bias_relu", "conv2d_input_grad", "conv2d_filter_grad", "conv2d_filter_and_bias_grad",
    "max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad", "lrn", "lrn_grad",
]

BATCH_PIECE = 32  # images per im2col buffer; docs/measured.md: peak 1,040 MB -> 167 MB
ROWS_PIECE = 128  # row lowering / RGB im2col: conv2 22 vs 24 ms, conv1 9.5 vs 12.5 (batch 100)
POOL_PIECE = 16  # MaxPoolGrad of 24x24x64: 15 ms vs 22 at 32 and 35 at 100
CHANNEL_MAJOR_BELOW = 8  # inputs with fewer channels use the (c, i, j) patch order


def window_geometry(size: int, k: int, stride: int, dilation: int, padding: str):
    """``(out, pad_before, pad_after)`` of one spatial axis, exactly as TensorFlow."""
    k_eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + k_eff - size, 0)
        return out, total // 2, total - total // 2
    if padding == "VALID":
        if size < k_eff:
            raise ValueError(
                f"VALID window of size {k_eff} (k={k}, dilation={dilation}) does not fit an "
                f"input of size {size}: the output size would be negative"
            )
        return (size - k_eff) // stride + 1, 0, 0
    raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")


def _geometry2d(hw, ksize, strides, dilations, padding):
    gh = window_geometry(hw[0], ksize[0], strides[0], dilations[0], padding)
    gw = window_geometry(hw[1], ksize[1], strides[1], dilations[1], padding)
    return (gh[0], gw[0]), (gh[1], gh[2], gw[1], gw[2])


def _pad(xp, x, pads, value=0.0):
    """Pad H and W of an NHWC array by ``(top, bottom, left, right)`` with ``value``."""
    top, bottom, left, right = pads
    if not any(pads):
        return x
    n, h, w, c = x.shape
    out = xp.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    out[:, top:top + h, left:left + w, :] = x
    return out


def _window_slices(ksize, out_hw, strides, dilations):
    """The basic-index tuple of every window offset ``(i, j)``, row-major like TF's scan."""
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = ksize, out_hw, strides, dilations
    for i in range(kh):
        top = i * dh
        for j in range(kw):
            left = j * dw
            yield (slice(None), slice(top, top + (oh - 1) * sh + 1, sh),
                   slice(left, left + (ow - 1) * sw + 1, sw), slice(None))


def _im2col(xp, xpad, ksize, out_hw, strides, dilations):
    """The ``(N*OH*OW, kh*kw*C)`` patch matrix of a padded NHWC array, columns ``(i, j, c)``."""
    n, c = xpad.shape[0], xpad.shape[3]
    slices = [xpad[s] for s in _window_slices(ksize, out_hw, strides, dilations)]
    cols = xp.stack(slices, axis=3) if len(slices) > 1 else slices[0]
    return xp.reshape(cols, (n * out_hw[0] * out_hw[1], ksize[0] * ksize[1] * c))


def _im2col_channel_major(xp, xpad, ksize, out_hw, strides, dilations):
    """The ``(C*kh*kw, N*OH*OW)`` patch matrix, rows ordered ``(c, i, j)``.

    For few channels (RGB input) the ``(i, j, c)`` stack copies 3-float runs; taking
    the slices of each channel plane copies whole output rows instead (7x faster here).
    """
    n, c = xpad.shape[0], xpad.shape[3]
    planes = xp.permute_dims(xpad, (3, 0, 1, 2))
    slices = [planes[ch, ...][s[:3]] for ch in range(c)
              for s in _window_slices(ksize, out_hw, strides, dilations)]
    return xp.reshape(xp.stack(slices, axis=0), (len(slices), n * out_hw[0] * out_hw[1]))


def _whole_batch(xp) -> bool:
    """Whether ``xp`` computes on a GPU: batches whole, convolutions by im2col (module doc)."""
    return array_api_compat.is_cupy_namespace(xp)


def _channel_major(xp, channels):
    return channels < CHANNEL_MAJOR_BELOW and not _whole_batch(xp)


def _filter_matrix(xp, w):
    """``w (kh, kw, c, o)`` as the ``(kh*kw*c, o)`` matrix matching the patch order."""
    kh, kw, c, o = w.shape
    if _channel_major(xp, c):
        w = xp.permute_dims(w, (2, 0, 1, 3))
    return xp.reshape(w, (kh * kw * c, o))


def _patches_times(xp, xpad, wmat, ksize, out_hw, strides, dilations):
    """``patches(xpad) @ wmat``: ``(N*OH*OW, o)``."""
    if _channel_major(xp, xpad.shape[3]):
        return _im2col_channel_major(xp, xpad, ksize, out_hw, strides, dilations).T @ wmat
    return _im2col(xp, xpad, ksize, out_hw, strides, dilations) @ wmat


def _patches_t_times(xp, xpad, dy2, ksize, out_hw, strides, dilations):
    """``patches(xpad).T @ dy2``: ``(kh*kw*c, o)`` in the patch order."""
    if _channel_major(xp, xpad.shape[3]):
        return _im2col_channel_major(xp, xpad, ksize, out_hw, strides, dilations) @ dy2
    return _im2col(xp, xpad, ksize, out_hw, strides, dilations).T @ dy2


def _in_pieces(xp, fn, *arrays, size=None):
    """``fn`` applied to batch pieces of ``arrays`` (same leading dim), results stacked back,
    each written into the result as it finishes (:func:`~.parallel.stacked_pieces`)."""
    pieces = _batch_pieces(xp, arrays[0].shape[0], size)
    if len(pieces) < 2:  # whole, but still through map_pieces: one BLAS thread
        return map_pieces(xp, lambda _: fn(*arrays), [None])[0]
    return stacked_pieces(xp, fn, arrays, pieces)


def _batch_pieces(xp, n, size=None):
    """At most ``size`` images a piece, and one piece per core at least (:mod:`.parallel`);
    on a GPU one piece."""
    if _whole_batch(xp):
        return [slice(0, n)]
    return pieces_for(n, size or BATCH_PIECE)


def _conv_piece(xp, stride_h, dilation_w, channels):
    """Images per piece of a convolution: big unless its buffer is a ``(i, j, c)`` im2col."""
    if _by_rows(xp, stride_h, dilation_w, channels) or _channel_major(xp, channels):
        return ROWS_PIECE
    return BATCH_PIECE


# ---- convolution ----------------------------------------------------------------------------
def _by_rows(xp, stride_h, dilation_w, channels):
    """Whether the im2col-free row lowering applies: on a CPU, stride 1 down, no dilation across."""
    return stride_h == 1 and dilation_w == 1 and channels >= CHANNEL_MAJOR_BELOW and not _whole_batch(xp)


def _rows_layout(xp, x, offset, padded_hw, steps=(1, 1)):
    """``x (N, H, W, C)`` zero-padded into the ``(HP*N, WP*C)`` matrix whose row ``h*N + n`` is
    padded row ``h`` of image ``n``; ``x[:, a, b]`` lands at ``offset + (a, b) * steps``."""
    n, h, w, c = x.shape
    (top, left), (sh, sw), (hp, wp) = offset, steps, padded_hw
    rows = xp.zeros((hp, n, wp, c), dtype=x.dtype)
    rows[top:top + (h - 1) * sh + 1:sh, :, left:left + (w - 1) * sw + 1:sw, :] = \
        xp.permute_dims(x, (1, 0, 2, 3))
    return xp.reshape(rows, (hp * n, wp * c))


def _row_window(rows, n, c, kw, i, col, out_h):
    """Kernel row ``i`` of the windows starting at padded column ``col``: ``(OH*N, kw*C)``.

    Rows are ``(h, n)``-ordered, so kernel row ``i`` of every window is one row offset and
    its ``kw*C`` values are contiguous: a strided matrix that BLAS reads in place.
    """
    return rows[i * n:(i + out_h) * n, col * c:(col + kw) * c]


def _conv_rows(xp, rows, n, w, out_hw, stride_w, dilation_h):
    """``conv(x, w)`` from :func:`_rows_layout`: ``kh*OW`` matmuls with ``K = kw*C``, no patches.

    ``y[:, :, col] = sum_i window(i*dh, col*sw) @ w[i]``: the only copies are the row layout
    and the output, so nothing grows with ``kh*kw`` (an im2col buffer is 25x the input).
    """
    kh, kw, c, o = w.shape
    oh, ow = out_hw
    w_rows = [xp.reshape(w[i, ...], (kw * c, o)) for i in range(kh)]
    y = xp.empty((n, oh, ow, o), dtype=rows.dtype)
    for col in range(ow):
        acc = None
        for i in range(kh):
            part = _row_window(rows, n, c, kw, i * dilation_h, col * stride_w, oh) @ w_rows[i]
            acc = part if acc is None else acc + part
        y[:, :, col, :] = xp.permute_dims(xp.reshape(acc, (oh, n, o)), (1, 0, 2))
    return y


def _filter_grad_rows(xp, rows, dy, filter_shape, stride_w, dilation_h):
    """``dw[i] = sum_col window(i*dh, col*sw).T @ dy[:, :, col]`` from :func:`_rows_layout`."""
    kh, kw, c, o = filter_shape
    n, oh, ow, _ = dy.shape
    dy_cols = xp.reshape(xp.permute_dims(dy, (2, 1, 0, 3)), (ow, oh * n, o))  # rows (oh, n) as well
    per_row = []
    for i in range(kh):
        acc = None
        for col in range(ow):
            part = _row_window(rows, n, c, kw, i * dilation_h, col * stride_w, oh).T @ dy_cols[col, ...]
            acc = part if acc is None else acc + part
        per_row.append(acc)
    return xp.reshape(xp.stack(per_row, axis=0), (kh, kw, c, o))


# ---- 1x1 convolutions -------------------------------------------------------------------------
# A 1x1 window needs no padding (SAME and VALID agree) nor dilation: the convolution is ONE
# matmul of the (strided) pixels by the (C, O) filter, 1.7-2.3x faster than the row lowering's
# OW matmuls (56x56x64 -> 256, batch 8: 8.2 vs 13.7 ms forward; ResNet and Inception are full
# of them).
def _pixels(xp, x, strides):
    """The pixels a 1x1 window with ``strides`` reads: ``(N*OH*OW, C)``."""
    sh, sw = strides
    x = x[:, ::sh, ::sw, :] if (sh, sw) != (1, 1) else x
    return xp.reshape(x, (x.shape[0] * x.shape[1] * x.shape[2], x.shape[3]))


def _pointwise_input_grad(xp, dy, w, input_shape, strides):
    n, oh, ow, o = dy.shape
    dx_read = xp.reshape(xp.reshape(dy, (n * oh * ow, o)) @ xp.reshape(w, w.shape[2:]).T,
                         (n, oh, ow, input_shape[3]))
    if tuple(strides) == (1, 1):
        return dx_read
    dx = xp.zeros(tuple(input_shape), dtype=dy.dtype)
    dx[:, ::strides[0], ::strides[1], :] = dx_read  # the pixels the windows skipped get nothing
    return dx


def conv2d(xp, x, w, strides, dilations, padding):
    """``y[n, oh, ow, o] = sum_{i,j,c} xpad[n, oh*sh + i*dh, ow*sw + j*dw, c] * w[i, j, c, o]``."""
    kh, kw, c, o = w.shape
    if onednn.takes(xp, x, w):  # direct kernels: 1.5-4x the lowering below
        out_hw, pads = _geometry2d(x.shape[1:3], (kh, kw), strides, dilations, padding)
        y = onednn.conv2d(x, w, strides, dilations, pads, out_hw)
        if y is not None:
            return y
    if (kh, kw) == (1, 1):
        out_hw, _ = _geometry2d(x.shape[1:3], (1, 1), strides, dilations, padding)
        return xp.reshape(_pixels(xp, x, strides) @ xp.reshape(w, (c, o)), (x.shape[0], *out_hw, o))
    out_hw, pads = _geometry2d(x.shape[1:3], (kh, kw), strides, dilations, padding)
    padded_hw = (x.shape[1] + pads[0] + pads[1], x.shape[2] + pads[2] + pads[3])
    wmat = _filter_matrix(xp, w)

    def piece(xs):
        if _by_rows(xp, strides[0], dilations[1], c):
            rows = _rows_layout(xp, xs, (pads[0], pads[2]), padded_hw)
            return _conv_rows(xp, rows, xs.shape[0], w, out_hw, strides[1], dilations[0])
        y = _patches_times(xp, _pad(xp, xs, pads), wmat, (kh, kw), out_hw, strides, dilations)
        return xp.reshape(y, (xs.shape[0], *out_hw, o))

    return _in_pieces(xp, piece, x, size=_conv_piece(xp, strides[0], dilations[1], c))


def conv2d_bias_relu(xp, x, w, bias, strides, dilations, padding):
    """``max(conv2d(x, w) + bias, 0)`` (``bias`` None: no bias) in one oneDNN pass (the bias and
    ReLU applied as each output block is made: TF's ``_FusedConv2D``); None where oneDNN does not
    take the arrays."""
    arrays = (x, w) if bias is None else (x, w, bias)
    if not onednn.takes(xp, *arrays) or (bias is not None and bias.shape != (w.shape[3],)):
        return None
    out_hw, pads = _geometry2d(x.shape[1:3], w.shape[:2], strides, dilations, padding)
    return onednn.conv2d(x, w, strides, dilations, pads, out_hw, bias=bias, relu=True)


def conv2d_input_grad(xp, dy, w, input_shape, strides, dilations, padding):
    """dL/dx as a full convolution of the stride-dilated ``dy`` with the flipped filter.

    ``dx[h] = sum_i dy_dil[pad_top + h - i*dh] w[i]``; storing ``dy_dil`` after
    ``(kh-1)*dh`` zero rows turns this into a stride-1 correlation with
    ``w[kh-1-i]`` read from offset ``pad_top``: the row lowering, or im2col + one matmul.
    """
    _, h, wd, c = input_shape
    kh, kw, _, o = w.shape
    if onednn.takes(xp, dy, w):
        _, pads = _geometry2d((h, wd), (kh, kw), strides, dilations, padding)
        dx = onednn.conv2d_input_grad(dy, w, input_shape, strides, dilations, pads)
        if dx is not None:
            return dx
    if (kh, kw) == (1, 1):
        return _pointwise_input_grad(xp, dy, w, input_shape, strides)
    (oh, ow), (pt, _, pl, _) = _geometry2d((h, wd), (kh, kw), strides, dilations, padding)
    (sh, sw), (dh, dw) = strides, dilations
    front_h, front_w = (kh - 1) * dh, (kw - 1) * dw
    rows = max(pt + h + front_h, front_h + (oh - 1) * sh + 1)
    cols = max(pl + wd + front_w, front_w + (ow - 1) * sw + 1)
    flipped = xp.permute_dims(xp.flip(w, axis=(0, 1)), (0, 1, 3, 2))
    wmat = _filter_matrix(xp, flipped)

    def piece(dys):
        n = dys.shape[0]
        if _by_rows(xp, 1, dw, o):  # rows, cols: the part of the dilated dy from (pad_top, pad_left) on
            layout = _rows_layout(xp, dys, (front_h - pt, front_w - pl), (rows - pt, cols - pl), strides)
            return _conv_rows(xp, layout, n, flipped, (h, wd), 1, dh)
        full = xp.zeros((n, rows, cols, o), dtype=dys.dtype)
        full[:, front_h:front_h + (oh - 1) * sh + 1:sh, front_w:front_w + (ow - 1) * sw + 1:sw, :] = dys
        # start reading at (pad_top, pad_left): the rows of dx that are not padding
        full = full[:, pt:, pl:, :]
        dx = _patches_times(xp, full, wmat, (kh, kw), (h, wd), (1, 1), dilations)
        return xp.reshape(dx, (n, h, wd, c))

    return _in_pieces(xp, piece, dy, size=_conv_piece(xp, 1, dilations[1], o))


def conv2d_filter_and_bias_grad(xp, x, dy, filter_shape, strides, dilations, padding):
    """(dL/dw, dL/db) of ``conv2d(x, w) + b`` in one oneDNN pass over ``dy`` (its sum per channel
    made as the filter's gradient reads it); None where oneDNN does not take the arrays."""
    if not onednn.takes(xp, x, dy):
        return None
    _, pads = _geometry2d(x.shape[1:3], filter_shape[:2], strides, dilations, padding)
    return onednn.conv2d_filter_grad(x, dy, filter_shape, strides, dilations, pads, bias_grad=True)


def conv2d_filter_grad(xp, x, dy, filter_shape, strides, dilations, padding):
    """dL/dw = patches(x).T @ dy (or its row lowering), accumulated over batch pieces."""
    kh, kw, c, o = filter_shape
    if onednn.takes(xp, x, dy):
        _, pads = _geometry2d(x.shape[1:3], (kh, kw), strides, dilations, padding)
        dw = onednn.conv2d_filter_grad(x, dy, filter_shape, strides, dilations, pads)
        if dw is not None:
            return dw
    if (kh, kw) == (1, 1):
        dy2 = xp.reshape(dy, (dy.shape[0] * dy.shape[1] * dy.shape[2], o))
        return xp.reshape(_pixels(xp, x, strides).T @ dy2, (1, 1, c, o))
    out_hw, pads = _geometry2d(x.shape[1:3], (kh, kw), strides, dilations, padding)
    padded_hw = (x.shape[1] + pads[0] + pads[1], x.shape[2] + pads[2] + pads[3])

    def piece(xs, dys):
        if _by_rows(xp, strides[0], dilations[1], c):
            rows = _rows_layout(xp, xs, (pads[0], pads[2]), padded_hw)
            return _filter_grad_rows(xp, rows, dys, (kh, kw, c, o), strides[1], dilations[0])
        dy2 = xp.reshape(dys, (dys.shape[0] * out_hw[0] * out_hw[1], o))
        part = _patches_t_times(xp, _pad(xp, xs, pads), dy2, (kh, kw), out_hw, strides, dilations)
        if _channel_major(xp, c):
            return xp.permute_dims(xp.reshape(part, (c, kh, kw, o)), (1, 2, 0, 3))
        return xp.reshape(part, (kh, kw, c, o))

    acc = None
    pieces = _batch_pieces(xp, x.shape[0], _conv_piece(xp, strides[0], dilations[1], c))
    for part in map_pieces(xp, lambda batch: piece(x[batch, ...], dy[batch, ...]), pieces):
        acc = part if acc is None else acc + part
    return xp.zeros((kh, kw, c, o), dtype=x.dtype) if acc is None else acc  # None: empty batch


# ---- pooling --------------------------------------------------------------------------------
_NO_DILATION = (1, 1)


def max_pool(xp, x, ksize, strides, padding):
    """Maximum over the ``kh*kw`` strided slices of the ``-inf``-padded input."""
    out_hw, pads = _geometry2d(x.shape[1:3], ksize, strides, _NO_DILATION, padding)
    if fused.compiled_for(xp, x):  # one pass over the input, no padded copy: 3-5x faster
        return fused.max_pool(x, ksize, strides, pads[0], pads[2], out_hw)

    def piece(xs):
        xpad = _pad(xp, xs, pads, -math.inf)
        out = None
        for s in _window_slices(ksize, out_hw, strides, _NO_DILATION):
            out = xpad[s] if out is None else xp.maximum(out, xpad[s])
        return out

    return _in_pieces(xp, piece, x, size=POOL_PIECE)


def max_pool_grad(xp, x, y, dy, ksize, strides, padding, positive_only=False, out=None):
    """Route each window's gradient to its first maximal element in scan order, as TF does
    (``positive_only``: then ReluGrad's select by ``x``, a ReLU's output: one pass for both;
    ``out``: ``x``'s buffer, which the result may take, where nothing else reads ``x``)."""
    n, h, w, c = x.shape
    out_hw, pads = _geometry2d((h, w), ksize, strides, _NO_DILATION, padding)
    top, left = pads[0], pads[2]
    if fused.compiled_for(xp, x, y, dy):  # one pass, no padded copy or masks: 3-7x faster
        usable = out is x and x.flags.c_contiguous and x.dtype == dy.dtype
        return fused.max_pool_grad(x, y, dy, ksize, strides, top, left, positive_only,
                                   out if usable else None)
    if positive_only:
        dx = max_pool_grad(xp, x, y, dy, ksize, strides, padding)
        return xp.where(x > 0, dx, xp.zeros_like(dx))

    def piece(xs, ys, dys):
        xpad = _pad(xp, xs, pads, -math.inf)
        dx = xp.zeros(xpad.shape, dtype=dys.dtype)
        free = None  # windows whose maximum has not been claimed yet (ties: first one wins)
        for k, s in enumerate(_window_slices(ksize, out_hw, strides, _NO_DILATION)):
            hit = xpad[s] == ys
            if free is not None:
                hit = hit & free
            free = ~hit if free is None else free ^ hit
            routed = dys * xp.astype(hit, dys.dtype)  # 10x faster than where() in NumPy
            i, j = divmod(k, ksize[1])
            # offsets inside the first stride x stride block touch disjoint, untouched elements
            if i < strides[0] and j < strides[1]:
                dx[s] = routed
            else:
                dx[s] += routed
        return dx[:, top:top + h, left:left + w, :]

    return _in_pieces(xp, piece, x, y, dy, size=POOL_PIECE)


def max_pool_with_workspace(xp, x, ksize, strides, padding):
    """``(y, workspace)``: :func:`max_pool`, and where each window's maximum was, from
    oneDNN's pass for training (a byte per output); the workspace is empty where oneDNN does not
    take ``x``, and :func:`max_pool_grad_with_workspace` then routes by comparing as
    :func:`max_pool_grad` does."""
    if onednn.takes(xp, x):
        out_hw, pads = _geometry2d(x.shape[1:3], ksize, strides, _NO_DILATION, padding)
        made = onednn.max_pool(x, ksize, strides, pads, out_hw)
        if made is not None:
            return made
    return max_pool(xp, x, ksize, strides, padding), xp.zeros((0,), dtype=xp.uint8)


def max_pool_grad_with_workspace(xp, x, y, dy, workspace, ksize, strides, padding, positive_only=False,
                                 out=None):
    """:func:`max_pool_grad` from the forward's ``workspace`` where it has one: oneDNN's
    backward reads ``dy`` and the workspace only (``positive_only`` is for the other path: a
    workspace's caller masks ``dy`` itself)."""
    if workspace.shape[0] and onednn.takes(xp, dy, y):
        _, pads = _geometry2d(x.shape[1:3], ksize, strides, _NO_DILATION, padding)
        usable = out is x and x.flags.c_contiguous and x.dtype == dy.dtype
        dx = onednn.max_pool_grad(dy, workspace, x.shape, ksize, strides, pads, out if usable else None)
        if dx is not None:
            return dx
    return max_pool_grad(xp, x, y, dy, ksize, strides, padding, positive_only, out)


def _window_counts(xp, hw, ksize, strides, padding, dtype):
    """``(1, OH, OW, 1)`` numbers of non-padding elements per window (TF's SAME divisor)."""
    out_hw, pads = _geometry2d(hw, ksize, strides, _NO_DILATION, padding)

    def along(size, out, k, s, before):
        return [min(o * s - before + k, size) - max(o * s - before, 0) for o in range(out)]

    ch = along(hw[0], out_hw[0], ksize[0], strides[0], pads[0])
    cw = along(hw[1], out_hw[1], ksize[1], strides[1], pads[2])
    counts = [[a * b for b in cw] for a in ch]
    return xp.reshape(xp.asarray(counts, dtype=dtype), (1, *out_hw, 1))


def avg_pool(xp, x, ksize, strides, padding):
    """Window sums of the zero-padded input over the number of non-padding elements."""
    out_hw, pads = _geometry2d(x.shape[1:3], ksize, strides, _NO_DILATION, padding)
    counts = _window_counts(xp, x.shape[1:3], ksize, strides, padding, x.dtype)

    def piece(xs):
        xpad = _pad(xp, xs, pads)
        total = None
        for s in _window_slices(ksize, out_hw, strides, _NO_DILATION):
            total = xpad[s] if total is None else total + xpad[s]
        return total / counts

    return _in_pieces(xp, piece, x, size=POOL_PIECE)


def avg_pool_grad(xp, input_shape, dy, ksize, strides, padding):
    """Spread each window's gradient evenly over its non-padding elements."""
    _, h, w, c = input_shape
    out_hw, pads = _geometry2d((h, w), ksize, strides, _NO_DILATION, padding)
    share = dy / _window_counts(xp, (h, w), ksize, strides, padding, dy.dtype)
    dx = xp.zeros((dy.shape[0], h + pads[0] + pads[1], w + pads[2] + pads[3], c), dtype=dy.dtype)
    for s in _window_slices(ksize, out_hw, strides, _NO_DILATION):
        dx[s] = dx[s] + share
    return dx[:, pads[0]:pads[0] + h, pads[2]:pads[2] + w, :]


# ---- local response normalization ------------------------------------------------------------
def _channel_window_sum(xp, v, depth_radius, scale=1.0):
    """``scale * sum_{d'=d-r}^{d+r} v[..., d']`` (clipped at the ends): one matmul with a band
    matrix, which carries ``scale`` so that no separate pass multiplies by it."""
    depth = v.shape[-1]
    idx = xp.arange(depth)
    band = xp.astype(xp.abs(idx[:, None] - idx[None, :]) <= depth_radius, v.dtype) * scale
    return xp.reshape(xp.reshape(v, (-1, depth)) @ band, v.shape)


def _times_pow_neg(xp, u, v, beta):
    """``u * v ** -beta``; the CIFAR-10 ``beta=0.75`` avoids the slow general power."""
    if beta == 0.75:
        root = xp.sqrt(v)
        return u / (root * xp.sqrt(root))
    if beta == 0.5:
        return u / xp.sqrt(v)
    if beta == 1.0:
        return u / v
    return u * xp.pow(v, -beta)


def _lrn_norm(xp, x, depth_radius, bias, alpha):
    return _channel_window_sum(xp, x * x, depth_radius, alpha) + bias


def lrn(xp, x, depth_radius, bias, alpha, beta):
    """TF's LRN: ``x / (bias + alpha * sqr_sum) ** beta`` over the channel window ``d-r..d+r``."""
    if x.ndim == 4 and onednn.takes(xp, x):  # 5-8x the band product below
        y = onednn.lrn(x, depth_radius, bias, alpha, beta)
        if y is not None:
            return y
    if x.ndim and fused.compiled_for(xp, x):  # (where oneDNN has no JIT kernel: AVX2's window of 9)
        return fused.lrn(x, depth_radius, bias, alpha, beta)

    def piece(xs):
        return _times_pow_neg(xp, xs, _lrn_norm(xp, xs, depth_radius, bias, alpha), beta)

    return _in_pieces(xp, piece, x, size=POOL_PIECE) if x.ndim else piece(x)


def lrn_with_workspace(xp, x, depth_radius, bias, alpha, beta):
    """``(y, workspace)``: :func:`lrn`, and oneDNN's window sums for :func:`lrn_grad` (empty
    where oneDNN does not take ``x``)."""
    if x.ndim == 4 and onednn.takes(xp, x):
        made = onednn.lrn_for_grad(x, depth_radius, bias, alpha, beta)
        if made is not None:
            return made
    return lrn(xp, x, depth_radius, bias, alpha, beta), xp.zeros((0,), dtype=xp.uint8)


def lrn_grad(xp, dy, x, y, depth_radius, bias, alpha, beta, workspace=None):
    """``dy * norm**-beta - 2*alpha*beta * x * window_sum(dy * y / norm)``; oneDNN reads the
    forward's ``workspace`` (:func:`lrn_with_workspace`) where it is given and not empty."""
    if x.ndim == 4 and onednn.takes(xp, dy, x):
        given = workspace if workspace is not None and workspace.shape[0] else None
        dx = onednn.lrn_grad(dy, x, depth_radius, bias, alpha, beta, given)
        if dx is not None:
            return dx
    if x.ndim and fused.compiled_for(xp, dy, x, y):
        return fused.lrn_grad(dy, x, y, depth_radius, bias, alpha, beta)

    def piece(dys, xs, ys):
        norm = _lrn_norm(xp, xs, depth_radius, bias, alpha)
        cross = _channel_window_sum(xp, dys * ys / norm, depth_radius, 2.0 * alpha * beta)
        return _times_pow_neg(xp, dys, norm, beta) - xs * cross

    return _in_pieces(xp, piece, dy, x, y, size=POOL_PIECE) if x.ndim else piece(dy, x, y)
