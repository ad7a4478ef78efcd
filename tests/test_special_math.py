"""tf.einsum and tf.tensordot: NumPy's values and shapes, finite-difference gradients, and the
equations dflow refuses, each saying why."""

import numpy as np
import pytest
from gradcheck import check_gradients

import dflow as tf

EQUATIONS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("ij->ji", [(2, 3)]),
             ("i,i->", [(3,), (3,)]), ("ij,kj->ik", [(2, 3), (4, 3)]), ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
             ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij->", [(2, 3)]),
             ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)]), ("ij,k->ijk", [(2, 3), (4,)]),
             ("ijk->kj", [(2, 3, 4)])]


@pytest.mark.parametrize("equation, shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_is_numpys_with_its_gradients(equation, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    with tf.Graph().as_default():
        result = tf.einsum(equation, *[tf.constant(a) for a in arrays])
        value = tf.Session().run(result)
    expected = np.einsum(equation, *arrays)
    assert result.shape.as_list() == list(expected.shape)
    np.testing.assert_allclose(value, expected, rtol=1e-12)
    check_gradients(lambda *xs: tf.einsum(equation, *xs), arrays)


def test_tensordot_and_unknown_dims():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3, 5))
    with tf.Graph().as_default() as graph:
        batch = tf.placeholder(tf.float64, [None, 3])
        mixed = tf.einsum("bi,ij->bj", batch, tf.ones([3, 2], tf.float64))
        pairs, last = tf.tensordot(a, b, [[1, 2], [1, 0]]), tf.tensordot(a, b, 1)
        with tf.Session(graph=graph) as sess:
            got = sess.run([pairs, last, mixed], {batch: np.ones((4, 3))})
    assert mixed.shape.as_list() == [None, 2] and last.shape.as_list() == [2, 3, 3, 5]
    np.testing.assert_allclose(got[0], np.tensordot(a, b, [[1, 2], [1, 0]]))
    np.testing.assert_allclose(got[1], np.tensordot(a, b, 1))
    assert got[2].tolist() == [[3.0, 3.0]] * 4
    check_gradients(lambda x, y: tf.tensordot(x, y, [[1, 2], [1, 0]]), [a, b])


def test_einsum_refuses_what_it_cannot_do_saying_why():
    with tf.Graph().as_default():
        x = tf.zeros([2, 2])
        for equation, message in [("ii->i", "repeats a letter"), ("...ij->ij", "no '...'"),
                                  ("ij,jk->ik", "has 2 operands, but 1 tensors"), ("ijk->i", "has rank 2"),
                                  ("ij->iz", r"output's \['z'\] are in no operand")]:
            with pytest.raises(ValueError, match=message):
                tf.einsum(equation, x)
