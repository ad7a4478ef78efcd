"""``tf.einsum`` and ``tf.tensordot``, built of transposes, reshapes, sums and batched matmuls
(as TF 1.x's own ``einsum`` is), so their gradients are those ops' and they run wherever
``MatMul`` runs.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     a, b = tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([[5.0], [6.0]])
...     tf.Session().run([tf.einsum("ij,jk->ik", a, b), tf.tensordot(a, b, 1)])[0].tolist()
[[17.0], [39.0]]
"""

from __future__ import annotations

import math
import string

from ..graph import Tensor, convert_to_tensor, get_default_graph
from .array_ops import reshape, shape, transpose
from .math_ops import matmul, reduce_prod, reduce_sum

__all__ = ["einsum", "tensordot"]


def einsum(equation: str, *inputs, name=None) -> Tensor:
    """The sum of products ``equation`` describes, NumPy's notation: ``"bij,bjk->bik"`` (a batched
    matmul), ``"ij->ji"``, ``"i,i->"``; without ``->`` the output is the letters seen once, sorted.
    Each letter names one dimension (no ``...``, no letter twice in one operand: diagonals)."""
    terms, output = _parse(equation, len(inputs))
    operands = []
    for term, tensor in zip(terms, inputs):
        tensor = convert_to_tensor(tensor)
        if tensor.shape.ndims is not None and tensor.shape.ndims != len(term):
            raise ValueError(f"einsum {equation!r}: operand {term!r} has {len(term)} letters, but its tensor "
                             f"has rank {tensor.shape.ndims}")
        operands.append((tensor, term))
    with get_default_graph().name_scope(name or "einsum"):
        while len(operands) > 1:
            (a, left), (b, right), rest = operands[0], operands[1], operands[2:]
            kept = output + "".join(term for _, term in rest)
            a, left = _sum_out(a, left, right + kept)
            b, right = _sum_out(b, right, left + kept)
            operands = [_product(a, left, b, right, kept), *rest]
        tensor, term = operands[0]
        tensor, term = _sum_out(tensor, term, output)
        return tensor if term == output else transpose(tensor, [term.index(letter) for letter in output])


def tensordot(a, b, axes, name=None) -> Tensor:
    """Sums the products of ``a``'s and ``b``'s elements over ``axes``: an int N (``a``'s last N
    dims with ``b``'s first N) or a pair of lists of dims (``[[1], [0]]``)."""
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    if a.shape.ndims is None or b.shape.ndims is None:
        raise ValueError("tensordot needs the ranks of a and b when the graph is built")
    if isinstance(axes, int):
        axes = [list(range(a.shape.ndims - axes, a.shape.ndims)), list(range(axes))]
    a_axes, b_axes = ([int(x) % t.shape.ndims for x in ([ax] if isinstance(ax, int) else ax)]
                      for ax, t in zip(axes, (a, b)))
    if len(a_axes) != len(b_axes):
        raise ValueError(f"tensordot's axes pair {a_axes} with {b_axes}: they must be as many")
    letters = iter(string.ascii_letters)
    left = [next(letters) for _ in range(a.shape.ndims)]
    right = [next(letters) for _ in range(b.shape.ndims)]
    for i, j in zip(a_axes, b_axes):
        right[j] = left[i]
    output = [x for k, x in enumerate(left) if k not in a_axes] + \
        [x for k, x in enumerate(right) if k not in b_axes]
    return einsum(f"{''.join(left)},{''.join(right)}->{''.join(output)}", a, b, name=name or "Tensordot")


def _parse(equation: str, count: int) -> tuple[list[str], str]:
    equation = equation.replace(" ", "")
    lhs, arrow, output = equation.partition("->")
    terms = lhs.split(",")
    if "." in equation:
        raise ValueError(f"einsum {equation!r}: dflow's einsum takes no '...': name every dimension")
    if len(terms) != count:
        raise ValueError(f"einsum {equation!r} has {len(terms)} operands, but {count} tensors were given")
    for term in [*terms, output]:
        if not term.isalpha() and term:
            raise ValueError(f"einsum {equation!r}: {term!r} must be letters")
        if len(set(term)) != len(term):
            raise ValueError(f"einsum {equation!r}: {term!r} repeats a letter (a diagonal), which dflow's "
                             "einsum does not take")
    if not arrow:  # NumPy's implicit output: the letters seen once, in order
        letters = "".join(terms)
        output = "".join(sorted(x for x in set(letters) if letters.count(x) == 1))
    unknown = set(output) - set("".join(terms))
    if unknown:
        raise ValueError(f"einsum {equation!r}: the output's {sorted(unknown)} are in no operand")
    return terms, output


def _sum_out(tensor: Tensor, term: str, elsewhere: str) -> tuple[Tensor, str]:
    """Sums the dims whose letters appear nowhere else."""
    alone = [k for k, letter in enumerate(term) if letter not in elsewhere]
    if not alone:
        return tensor, term
    return reduce_sum(tensor, axis=alone), "".join(x for k, x in enumerate(term) if k not in alone)


def _product(a: Tensor, left: str, b: Tensor, right: str, kept: str) -> tuple[Tensor, str]:
    """``a`` times ``b``, summed over their shared letters that are not ``kept``: one batched matmul
    of [batch, free of a, summed] by [batch, summed, free of b]."""
    batch = [x for x in left if x in right and x in kept]
    summed = [x for x in left if x in right and x not in kept]
    free_a, free_b = [x for x in left if x not in right], [x for x in right if x not in left]
    dims = {**dict(zip(left, _dims(a))), **dict(zip(right, _dims(b)))}

    def arrange(tensor, term, order, rows, columns):
        tensor = transpose(tensor, [term.index(x) for x in order]) if list(term) != order else tensor
        return reshape(tensor, [*(dims[x] for x in batch), _size(dims, rows), _size(dims, columns)])

    product = matmul(arrange(a, left, batch + free_a + summed, free_a, summed),
                     arrange(b, right, batch + summed + free_b, summed, free_b))
    letters = batch + free_a + free_b
    return reshape(product, [dims[x] for x in letters]), "".join(letters)


def _dims(tensor: Tensor) -> list:
    """Each dim: an int where the graph knows it, else a scalar tensor of the step's size."""
    static = tensor.shape.as_list()
    return [n if n is not None else shape(tensor)[k] for k, n in enumerate(static)]


def _size(dims: dict, letters: list):
    sizes = [dims[x] for x in letters]
    if all(isinstance(n, int) for n in sizes):
        return math.prod(sizes)
    return reduce_prod([convert_to_tensor(n) for n in sizes])
