"""Linear algebra of square matrices (batched over leading dims), over the array API's ``linalg``
extension (NumPy, CuPy): ``tf.matrix_inverse``, ``tf.matrix_determinant``, ``tf.cholesky``,
``tf.matrix_solve`` with TF's gradients; ``tf.qr``, ``tf.svd``, ``tf.self_adjoint_eig`` forward
only (their gradients are refused by name rather than left out).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     a = tf.constant([[4.0, 2.0], [2.0, 3.0]])
...     tf.Session().run([tf.matrix_determinant(a), tf.matrix_solve(a, [[2.0], [1.0]])])[1].tolist()
[[0.5], [0.0]]
"""

from __future__ import annotations

from ..graph import Tensor, convert_to_tensor, get_default_graph
from .array_extras import matrix_band_part, matrix_diag, matrix_diag_part
from .array_ops import expand_dims
from .math_ops import matmul
from .registry import ShapeError, Spec, defop

__all__ = ["matrix_inverse", "matrix_determinant", "cholesky", "matrix_solve", "qr", "svd",
           "self_adjoint_eig"]


def _square(spec: Spec, what: str) -> tuple | None:
    if not spec.dtype.is_floating:
        raise ShapeError(f"{what} takes floating-point matrices, got {spec.dtype.name}")
    shape = spec.shape
    if shape is not None and (len(shape) < 2 or None not in shape[-2:] and shape[-1] != shape[-2]):
        raise ShapeError(f"{what} takes square matrices [..., N, N], got shape {shape}")
    return shape


def _op(op_type: str, inputs: list, name, **attrs) -> list[Tensor]:
    return get_default_graph().create_op(op_type, [convert_to_tensor(x) for x in inputs], attrs,
                                         name=name or op_type).outputs


def _transposed(x: Tensor) -> Tensor:
    """The innermost matrices transposed."""
    from .array_ops import transpose

    rank = x.shape.ndims
    return transpose(x, [*range(rank - 2), rank - 1, rank - 2])


def _no_gradient(what: str):
    def refuse(op, *grads):
        raise LookupError(f"{what} {op.name!r} lies between the tensors differentiated, and dflow has no "
                          f"gradient for it")
    return refuse


# ---- inverse and determinant -----------------------------------------------------------------------
defop("MatrixInverse", lambda inputs: [Spec(_square(inputs[0], "matrix_inverse"), inputs[0].dtype)],
      lambda xp, x: xp.linalg.inv(x),
      lambda op, g: [-matmul(matmul(_transposed(op.outputs[0]), g), _transposed(op.outputs[0]))])


def matrix_inverse(input, adjoint=False, name=None) -> Tensor:  # noqa: A002 - TF's name
    """Each innermost matrix's inverse (of its transpose with ``adjoint``)."""
    x = convert_to_tensor(input)
    return _op("MatrixInverse", [_transposed(x) if adjoint else x], name)[0]


def _determinant_infer(inputs):
    shape = _square(inputs[0], "matrix_determinant")
    return [Spec(None if shape is None else shape[:-2], inputs[0].dtype)]


def _determinant_grad(op, g):
    scale = expand_dims(expand_dims(g * op.outputs[0], -1), -1)
    return [scale * _transposed(matrix_inverse(op.inputs[0]))]


defop("MatrixDeterminant", _determinant_infer, lambda xp, x: xp.linalg.det(x), _determinant_grad)


def matrix_determinant(input, name=None) -> Tensor:  # noqa: A002
    """Each innermost matrix's determinant."""
    return _op("MatrixDeterminant", [input], name)[0]


# ---- Cholesky and solve ----------------------------------------------------------------------------
def _cholesky_grad(op, g):
    """TF's (Murray, 2016): with L the factor, Phi(X) the lower triangle of X with its diagonal
    halved, dA = sym(L^-T Phi(L^T dL) L^-1) / 2."""
    factor = op.outputs[0]
    inverse = matrix_inverse(factor)
    middle = matmul(_transposed(factor), g)
    middle = matrix_band_part(middle, -1, 0) - 0.5 * matrix_diag(matrix_diag_part(middle))
    grad = matmul(matmul(_transposed(inverse), middle), inverse)
    return [0.5 * (grad + _transposed(grad))]


defop("Cholesky", lambda inputs: [Spec(_square(inputs[0], "cholesky"), inputs[0].dtype)],
      lambda xp, x: xp.linalg.cholesky(x), _cholesky_grad)


def cholesky(input, name=None) -> Tensor:  # noqa: A002
    """The lower-triangular ``L`` with ``L L^T`` each innermost (symmetric positive definite)
    matrix."""
    return _op("Cholesky", [input], name)[0]


def _solve_infer(inputs):
    matrix, rhs = inputs
    shape = _square(matrix, "matrix_solve")
    if shape is not None and rhs.shape is not None and None not in (shape[-1], rhs.shape[-2]) and \
            shape[-1] != rhs.shape[-2]:
        raise ShapeError(f"matrix_solve: the matrices {shape} and the right-hand sides {rhs.shape} differ "
                         "in N")
    return [Spec(rhs.shape, rhs.dtype)]


def _solve_grad(op, g):
    matrix, solution = op.inputs[0], op.outputs[0]
    rhs_grad = matrix_solve(matrix, g, adjoint=True)
    return [-matmul(rhs_grad, _transposed(solution)), rhs_grad]


defop("MatrixSolve", _solve_infer, lambda xp, a, b: xp.linalg.solve(a, b), _solve_grad)


def matrix_solve(matrix, rhs, adjoint=False, name=None) -> Tensor:
    """``X`` with ``matrix X = rhs`` (``matrix^T X = rhs`` with ``adjoint``), for each
    ``[..., N, N]`` matrix and ``[..., N, K]`` right-hand sides."""
    matrix = convert_to_tensor(matrix)
    return _op("MatrixSolve", [_transposed(matrix) if adjoint else matrix, rhs], name)[0]


# ---- factorizations, forward only ------------------------------------------------------------------
def _qr_infer(inputs, full_matrices):
    shape = inputs[0].shape
    if shape is None or None in shape[-2:]:
        return [Spec(None, inputs[0].dtype)] * 2
    m, n = shape[-2:]
    k = m if full_matrices else min(m, n)
    return [Spec((*shape[:-2], m, k), inputs[0].dtype), Spec((*shape[:-2], k, n), inputs[0].dtype)]


def _qr_kernel(xp, x, full_matrices):
    return tuple(xp.linalg.qr(x, mode="complete" if full_matrices else "reduced"))


defop("Qr", _qr_infer, _qr_kernel, _no_gradient("tf.qr"), num_outputs=2)


def qr(input, full_matrices=False, name=None) -> tuple[Tensor, Tensor]:  # noqa: A002
    """``(q, r)``: orthonormal columns and an upper-triangular factor of each innermost matrix."""
    q, r = _op("Qr", [input], name, full_matrices=bool(full_matrices))
    return q, r


def _svd_infer(inputs, full_matrices, compute_uv):
    shape = inputs[0].shape
    if shape is None or None in shape[-2:]:
        return [Spec(None, inputs[0].dtype)] * (3 if compute_uv else 1)
    *batch, m, n = shape
    k = min(m, n)
    values = Spec((*batch, k), inputs[0].dtype)
    if not compute_uv:
        return [values]
    left, right = (m, n) if full_matrices else (k, k)
    return [values, Spec((*batch, m, left), inputs[0].dtype), Spec((*batch, n, right), inputs[0].dtype)]


def _svd_kernel(xp, x, full_matrices, compute_uv):
    if not compute_uv:
        return xp.linalg.svdvals(x)
    u, s, vh = xp.linalg.svd(x, full_matrices=full_matrices)
    rank = len(vh.shape)
    return s, u, xp.permute_dims(vh, (*range(rank - 2), rank - 1, rank - 2))  # TF gives v, not v^T


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """``(s, u, v)`` with ``tensor = u diag(s) v^T`` for each innermost matrix (``s`` alone
    without ``compute_uv``), as TF orders them."""
    outputs = _op("Svd", [tensor], name, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return tuple(outputs) if compute_uv else outputs[0]


defop("Svd", _svd_infer, _svd_kernel, _no_gradient("tf.svd"), num_outputs=None)


def _eig_infer(inputs):
    shape = _square(inputs[0], "self_adjoint_eig")
    return [Spec(None if shape is None else shape[:-1], inputs[0].dtype), Spec(shape, inputs[0].dtype)]


defop("SelfAdjointEigV2", _eig_infer, lambda xp, x: tuple(xp.linalg.eigh(x)),
      _no_gradient("tf.self_adjoint_eig"), num_outputs=2)


def self_adjoint_eig(tensor, name=None) -> tuple[Tensor, Tensor]:
    """``(e, v)``: the eigenvalues (ascending) and eigenvectors (columns) of each symmetric matrix."""
    e, v = _op("SelfAdjointEigV2", [tensor], name)
    return e, v
