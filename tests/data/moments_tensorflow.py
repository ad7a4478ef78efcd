"""Writes moments_tensorflow.json: TensorFlow's ``tf.nn.moments`` + ``tf.nn.batch_normalization``
values and gradients (2.21, ``compat.v1``), which test_batch_norm compares dflow's with.

    python tests/data/moments_tensorflow.py tests/data/moments_tensorflow.json   # TensorFlow installed
"""
import json
import sys

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
rng = np.random.default_rng(7)
def r(*shape, loc=0.0, scale=1.0):
    return rng.normal(loc, scale, shape).astype(np.float32)
cases = {}
for name, shape, axes, keep, eps, with_offset, with_scale in [
        ("dense", (6, 4), [0], False, 1e-3, True, True),
        ("conv_keep_dims", (2, 3, 3, 4), [0, 1, 2], True, 0.01, False, True),
        ("conv_offset_only", (3, 2, 2, 5), [0, 1, 2], False, 1e-5, True, False)]:
    x = r(*shape, loc=2.0, scale=1.5)
    dy = r(*shape)
    channels = shape[-1]
    vshape = (1,) * (len(shape) - 1) + (channels,) if keep else (channels,)
    dmean, dvariance = r(*vshape), r(*vshape)
    offset, scale = r(channels), r(channels, loc=1.0, scale=0.3)
    given_mean, given_variance = r(channels), np.abs(r(channels)) + 0.5
    with tf.Graph().as_default():
        xt = tf.constant(x)
        off = tf.constant(offset) if with_offset else None
        sc = tf.constant(scale) if with_scale else None
        mean, variance = tf.nn.moments(xt, axes, keep_dims=keep)
        y = tf.nn.batch_normalization(xt, mean, variance, off, sc, eps)
        loss = tf.reduce_sum(y * dy) + tf.reduce_sum(mean * dmean) + tf.reduce_sum(variance * dvariance)
        wrt = [xt] + [t for t in (off, sc) if t is not None]
        grads = tf.gradients(loss, wrt)
        # normalized with given statistics: their gradients too
        gm, gv = tf.constant(given_mean), tf.constant(given_variance)
        y_given = tf.nn.batch_normalization(xt, gm, gv, off, sc, eps)
        given_grads = tf.gradients(tf.reduce_sum(y_given * dy), [xt, gm, gv])
        with tf.Session() as sess:
            out = sess.run([y, mean, variance, *grads, y_given, *given_grads])
    names = ["y", "mean", "variance", "dx"] + ["doffset"] * with_offset + ["dscale"] * with_scale \
        + ["y_given", "dx_given", "dmean_given", "dvariance_given"]
    case = {"shape": list(shape), "axes": axes, "keep_dims": keep, "epsilon": eps,
            "with_offset": with_offset, "with_scale": with_scale}
    for key, value in dict(x=x, dy=dy, dmean=dmean, dvariance=dvariance, offset=offset, scale=scale,
                           given_mean=given_mean, given_variance=given_variance).items():
        case[key] = value.tolist()
    case["tensorflow"] = {n: np.asarray(v).tolist() for n, v in zip(names, out)}
    cases[name] = case
json.dump(cases, open(sys.argv[1], "w"))
