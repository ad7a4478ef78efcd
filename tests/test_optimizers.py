"""Adagrad, RMSProp (plain, with momentum, centered), Adadelta and FTRL: a few steps
against NumPy implementations of TF's documented update equations, their slots named as
TF names them, and their bad hyperparameters refused."""

import numpy as np
import pytest
from conftest import local_cluster_fixture

import dflow as tf

W0 = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]], np.float32)
TARGET = np.array([[0.0, 1.0, 2.0], [-1.0, 0.5, 0.0]], np.float32)
B0 = np.float32(3.0)


def _model():
    """loss = sum((W - T)^2) + 3 (b - 1)^2, so dW = 2 (W - T), db = 6 (b - 1)."""
    w = tf.Variable(W0, name="w")
    b = tf.Variable(B0, name="b")
    loss = tf.reduce_sum(tf.square(w - TARGET)) + 3.0 * tf.square(b - 1.0)
    return w, b, loss


def _grads(w, b):
    return [2.0 * (w - TARGET), 6.0 * (b - 1.0)]


# ---- NumPy references of TF's kernels (float64), one step of one variable each --------------
def _adagrad(lr, initial=0.1):
    def step(p, g, s):
        accum = (s if s is not None else np.full_like(p, initial)) + g * g
        return p - lr * g / np.sqrt(accum), accum
    return step


def _rms_prop(lr, decay=0.9, momentum=0.0, eps=1e-10, centered=False):
    def step(p, g, s):
        ms, mg, mom = s if s is not None else (np.ones_like(p), np.zeros_like(p), np.zeros_like(p))
        ms = decay * ms + (1 - decay) * g * g
        mg = decay * mg + (1 - decay) * g
        denominator = ms - mg * mg if centered else ms
        mom = momentum * mom + lr * g / np.sqrt(denominator + eps)
        return p - mom, (ms, mg, mom)
    return step


def _adadelta(lr, rho=0.95, eps=1e-8):
    def step(p, g, s):
        accum, accum_update = s if s is not None else (np.zeros_like(p), np.zeros_like(p))
        accum = rho * accum + (1 - rho) * g * g
        update = np.sqrt(accum_update + eps) / np.sqrt(accum + eps) * g
        accum_update = rho * accum_update + (1 - rho) * update * update
        return p - lr * update, (accum, accum_update)
    return step


def _ftrl(lr, power=-0.5, initial=0.1, l1=0.0, l2=0.0, shrinkage=0.0):
    def step(p, g, s):
        accum, linear = s if s is not None else (np.full_like(p, initial), np.zeros_like(p))
        new_accum = accum + g * g
        linear = linear + g + 2 * shrinkage * p - (new_accum ** -power - accum ** -power) / lr * p
        quadratic = new_accum ** -power / lr + 2 * l2
        p = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, 0.0)
        return p, (new_accum, linear)
    return step


OPTIMIZERS = [  # (id, build the optimizer, NumPy step)
    ("adagrad", lambda: tf.train.AdagradOptimizer(0.3), _adagrad(0.3)),
    ("adagrad-initial", lambda: tf.train.AdagradOptimizer(0.1, initial_accumulator_value=2.0),
     _adagrad(0.1, 2.0)),
    ("rmsprop", lambda: tf.train.RMSPropOptimizer(0.01), _rms_prop(0.01)),
    ("rmsprop-momentum", lambda: tf.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.9, epsilon=1e-4),
     _rms_prop(0.01, 0.8, 0.9, 1e-4)),
    ("rmsprop-centered", lambda: tf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
     _rms_prop(0.01, 0.9, 0.5, centered=True)),
    ("adadelta", lambda: tf.train.AdadeltaOptimizer(1.0), _adadelta(1.0)),
    ("adadelta-hyper", lambda: tf.train.AdadeltaOptimizer(0.5, rho=0.9, epsilon=1e-3),
     _adadelta(0.5, 0.9, 1e-3)),
    ("ftrl", lambda: tf.train.FtrlOptimizer(0.5), _ftrl(0.5)),
    ("ftrl-l1-l2", lambda: tf.train.FtrlOptimizer(
        0.5, l1_regularization_strength=0.3, l2_regularization_strength=0.2), _ftrl(0.5, l1=0.3, l2=0.2)),
    ("ftrl-power-shrinkage", lambda: tf.train.FtrlOptimizer(
        0.5, learning_rate_power=-0.7, initial_accumulator_value=0.5,
        l2_shrinkage_regularization_strength=0.1), _ftrl(0.5, power=-0.7, initial=0.5, shrinkage=0.1)),
]


def _momentum(lr, momentum, nesterov=False):
    def step(p, g, s):
        accum = momentum * (s if s is not None else np.zeros_like(p)) + g
        return p - lr * (g + momentum * accum if nesterov else accum), accum
    return step


MOMENTUM = [
    ("momentum", lambda: tf.train.MomentumOptimizer(0.1, 0.9), _momentum(0.1, 0.9)),
    ("momentum-nesterov", lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
     _momentum(0.1, 0.9, True)),
]
LOOKUPS = [[1, 3, 1], [0, 1], [3, 3, 4]]  # a step's ids: rows 2 never, 3 not in the second step


@pytest.mark.parametrize("make, reference", [row[1:] for row in OPTIMIZERS + MOMENTUM],
                         ids=[row[0] for row in OPTIMIZERS + MOMENTUM])
def test_a_lookup_s_gradient_changes_only_its_rows_as_tf_1_x_s_sparse_updates(make, reference):
    """TF 1.x applies a lookup's gradient (an IndexedSlices) with its optimizers' sparse kernels:
    each row looked up takes the dense rule with its gradients summed; every other row keeps its
    value and its slots (a momentum does not carry it on, moments do not decay)."""
    table0 = (np.arange(15, dtype=np.float32).reshape(5, 3) - 7) / 4
    with tf.Graph().as_default():
        table = tf.Variable(table0, name="table")
        ids = tf.placeholder(tf.int32, [None])
        train = make().minimize(tf.reduce_sum(tf.square(tf.nn.embedding_lookup(table, ids) - 0.25)))
        assert [op.type for op in tf.get_default_graph().get_operations() if "Apply" in op.type][0] \
            .startswith("SparseApply")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            params, slots = table0.astype(np.float64), {}
            for step_ids in LOOKUPS:
                sess.run(train, {ids: step_ids})
                for row in sorted(set(step_ids)):
                    gradient = 2.0 * step_ids.count(row) * (params[row] - 0.25)
                    params[row], slots[row] = reference(params[row], gradient, slots.get(row))
                np.testing.assert_allclose(sess.run(table), params, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy-adam", "adam"])
def test_lazy_adam_steps_only_the_rows_looked_up_and_adam_every_row(lazy):
    """tf.contrib.opt.LazyAdamOptimizer: a looked-up row takes Adam's step (the step count is the
    optimizer's, not the row's), the others keep their values and moments; TF 1.x's Adam decays
    every row's moments, so rows looked up before keep moving."""
    lr, beta1, beta2, eps = 0.1, 0.9, 0.999, 1e-8
    table0 = (np.arange(15, dtype=np.float32).reshape(5, 3) - 7) / 4
    with tf.Graph().as_default():
        table = tf.Variable(table0, name="table")
        ids = tf.placeholder(tf.int32, [None])
        make = tf.contrib.opt.LazyAdamOptimizer if lazy else tf.train.AdamOptimizer
        train = make(lr).minimize(tf.reduce_sum(tf.square(tf.nn.embedding_lookup(table, ids) - 0.25)))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            params = table0.astype(np.float64)
            m, v = np.zeros_like(params), np.zeros_like(params)
            for t, step_ids in enumerate(LOOKUPS, start=1):
                sess.run(train, {ids: step_ids})
                rows = sorted(set(step_ids)) if lazy else list(range(5))
                g = np.zeros_like(params)
                for row in step_ids:
                    g[row] += 2.0 * (params[row] - 0.25)
                m[rows] = beta1 * m[rows] + (1 - beta1) * g[rows]
                v[rows] = beta2 * v[rows] + (1 - beta2) * g[rows] ** 2
                rate = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                params[rows] -= rate * m[rows] / (np.sqrt(v[rows]) + eps)
                np.testing.assert_allclose(sess.run(table), params, rtol=2e-5, atol=1e-6)
            np.testing.assert_array_equal(sess.run(table)[2], table0[2])  # never looked up


@pytest.mark.parametrize("make, reference", [row[1:] for row in OPTIMIZERS],
                         ids=[row[0] for row in OPTIMIZERS])
def test_optimizer_matches_numpy_reference(make, reference):
    with tf.Graph().as_default():
        w, b, loss = _model()
        train = make().minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            params, slots = [W0.astype(np.float64), np.float64(B0)], [None, None]
            for _ in range(4):
                sess.run(train)
                stepped = [reference(p, g, s) for p, g, s in zip(params, _grads(*params), slots)]
                params, slots = [p for p, _ in stepped], [s for _, s in stepped]
                got_w, got_b = sess.run([w, b])
                np.testing.assert_allclose(got_w, params[0], rtol=2e-5, atol=1e-6)
                np.testing.assert_allclose(got_b, params[1], rtol=2e-5, atol=1e-6)
                assert got_w.dtype == np.float32


def test_a_decaying_learning_rate_tensor_is_used():
    with tf.Graph().as_default():
        w, b, loss = _model()
        step = tf.train.get_or_create_global_step()
        lr = tf.train.exponential_decay(0.01, step, 1, 0.5)
        train = tf.train.RMSPropOptimizer(lr).minimize(loss, global_step=step)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            reference, params, slots = None, [W0.astype(np.float64), np.float64(B0)], [None, None]
            for t in range(3):
                sess.run(train)
                reference = _rms_prop(0.01 * 0.5 ** t)
                stepped = [reference(p, g, s) for p, g, s in zip(params, _grads(*params), slots)]
                params, slots = [p for p, _ in stepped], [s for _, s in stepped]
            np.testing.assert_allclose(sess.run(w), params[0], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("make, slots, names", [
    (lambda: tf.train.AdagradOptimizer(0.1), ["accumulator"], ["w/Adagrad"]),
    (lambda: tf.train.RMSPropOptimizer(0.1), ["momentum", "rms"], ["w/RMSProp_1", "w/RMSProp"]),
    (lambda: tf.train.RMSPropOptimizer(0.1, centered=True), ["mg", "momentum", "rms"],
     ["w/RMSProp_1", "w/RMSProp_2", "w/RMSProp"]),
    (lambda: tf.train.AdadeltaOptimizer(), ["accum", "accum_update"], ["w/Adadelta", "w/Adadelta_1"]),
    (lambda: tf.train.FtrlOptimizer(0.1), ["accum", "linear"], ["w/Ftrl", "w/Ftrl_1"]),
], ids=["adagrad", "rmsprop", "rmsprop-centered", "adadelta", "ftrl"])
def test_slots_named_as_tf_names_them(make, slots, names):
    with tf.Graph().as_default():
        w, _, loss = _model()
        opt = make()
        opt.minimize(loss)
        assert opt.get_slot_names() == slots
        assert [opt.get_slot(w, s).op.name for s in slots] == names
        assert not any(opt.get_slot(w, s).trainable for s in slots)
        assert {v.op.name for v in tf.trainable_variables()} == {"w", "b"}


def test_initial_slot_values():
    with tf.Graph().as_default():
        w, _, loss = _model()
        adagrad, rms = tf.train.AdagradOptimizer(0.1, 0.25), tf.train.RMSPropOptimizer(0.1)
        adagrad.minimize(loss)
        rms.minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(adagrad.get_slot(w, "accumulator")), np.full((2, 3), 0.25))
            np.testing.assert_array_equal(sess.run(rms.get_slot(w, "rms")), np.ones((2, 3)))


@pytest.mark.parametrize("make, message", [
    (lambda: tf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0), "must be positive"),
    (lambda: tf.train.FtrlOptimizer(0.1, learning_rate_power=0.5), "learning_rate_power"),
    (lambda: tf.train.FtrlOptimizer(0.1, l1_regularization_strength=-1.0), "l1_regularization_strength"),
])
def test_bad_hyperparameters_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---- on a cluster: the updates run on the parameter server -------------------------------------
cluster = local_cluster_fixture(ps=1, workers=1)


def _train_with_averages(make, target=None, spec=None, steps=3):
    """``steps`` steps of ``make()``, each followed by an ExponentialMovingAverage update:
    w, its slots and its average (with ``spec``: all on the PS)."""
    with tf.Graph().as_default():
        with tf.device(tf.train.replica_device_setter(cluster=spec) if spec else None):
            w, b, loss = _model()
            opt = make()
            train = opt.minimize(loss)
            ema = tf.train.ExponentialMovingAverage(0.5)
            with tf.control_dependencies([train]):
                train = ema.apply([w, b])
        slots = [opt.get_slot(w, name) for name in opt.get_slot_names()]
        if spec:
            assert {v.device for v in [w, *slots, ema.average(w)]} == {"/job:ps/task:0"}
        with tf.Session(target) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(steps):
                sess.run(train)
            return sess.run([w, *slots, ema.average(w)])


@pytest.mark.slow
@pytest.mark.parametrize("make", [row[1] for row in OPTIMIZERS[::2]], ids=[row[0] for row in OPTIMIZERS[::2]])
def test_updates_and_averages_on_the_parameter_server_match_the_local_run(make, cluster, target):
    local = _train_with_averages(make)
    remote = _train_with_averages(make, target, cluster.spec)
    for got, expected in zip(remote, local):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


# TensorFlow 2.21's (compat.v1) schedules at these global steps, rounded to 7 digits
SCHEDULES = {
    0: [0.1, 0.1, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    1: [0.098209, 0.099001, 1.0, 0.099005, 0.1, 0.0990099, 0.0999901, 0.0998459, 0.0998459],
    37: [0.045721, 0.063037, 1.0, 0.0690734, 0.1, 0.0729927, 0.0871513, 0.0013815, 0.0013815],
    100: [0.01, 0.0001, 1.0, 0.0367879, 0.0367879, 0.05, 0.0325, 0.0146447, 0.0125],
    101: [0.01, 0.0495505, 0.5, 0.0364219, 0.0367879, 0.0497512, 0.0316888, 0.0132839, 0.0115193],
    150: [0.01, 0.025075, 0.5, 0.022313, 0.022313, 0.04, 0.01, 0.0915735, 0.0018306],
    250: [0.01, 0.01675, 0.1, 0.0082085, 0.0082085, 0.0285714, 0.01, 0.0084265, 0.0013337],
}


def test_learning_rate_schedules_are_tensorflows():
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        rates = [tf.train.polynomial_decay(0.1, step, 100, 0.01, power=2.0),
                 tf.train.polynomial_decay(0.1, step, 100, cycle=True),
                 tf.train.piecewise_constant(step, [100, 200], [1.0, 0.5, 0.1]),
                 tf.train.natural_exp_decay(0.1, step, 50, 0.5),
                 tf.train.natural_exp_decay(0.1, step, 50, 0.5, staircase=True),
                 tf.train.inverse_time_decay(0.1, step, 50, 0.5),
                 tf.train.cosine_decay(0.1, step, 150, alpha=0.1),
                 tf.train.cosine_decay_restarts(0.1, step, 40),
                 tf.train.cosine_decay_restarts(0.1, step, 40, t_mul=1.0, m_mul=0.5)]
        with tf.Session() as sess:
            for at, want in SCHEDULES.items():
                assert [round(float(r), 7) for r in sess.run(rates, {step: at})] == want, at
        with pytest.raises(ValueError, match="one more value than boundaries"):
            tf.train.piecewise_constant(step, [1, 2], [1.0, 2.0])


def test_decoupled_weight_decay_optimizers_shrink_then_step():
    """tf.contrib.opt.AdamWOptimizer: var -= weight_decay * var, then Adam's step on it (TF's
    DecoupledWeightDecayExtension), three steps against NumPy."""
    start, grad_scale, decay = np.array([1.0, -2.0, 3.0], np.float32), np.float32(0.5), 0.01
    with tf.Graph().as_default():
        w = tf.Variable(start)
        loss = tf.reduce_sum(w * w) * grad_scale
        train = tf.contrib.opt.AdamWOptimizer(decay, learning_rate=0.1).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            got = sess.run(w)
    var, m, v = start.astype(np.float64), 0.0, 0.0
    for t in range(1, 4):
        grad = 2 * var * grad_scale  # the gradient at the step's start, before the decay
        var = var - decay * var
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad * grad
        var = var - 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(got, var, rtol=1e-5)
    with pytest.raises(AttributeError, match="tf.contrib.opt.ScipyOptimizerInterface is not supported"):
        _ = tf.contrib.opt.ScipyOptimizerInterface
