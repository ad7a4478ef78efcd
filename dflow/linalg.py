"""``tf.linalg``: TF 1.13's names of the linear algebra (:mod:`dflow.ops.linalg_ops` and others)."""

from .ops.array_extras import matrix_band_part as band_part
from .ops.array_extras import matrix_diag as diag
from .ops.array_extras import matrix_diag_part as diag_part
from .ops.array_extras import trace
from .ops.linalg_ops import cholesky, qr, svd
from .ops.linalg_ops import matrix_determinant as det
from .ops.linalg_ops import matrix_inverse as inv
from .ops.linalg_ops import matrix_solve as solve
from .ops.linalg_ops import self_adjoint_eig as eigh
from .ops.math_ops import eye, matmul
from .ops.special_math_ops import einsum, tensordot

__all__ = ["band_part", "cholesky", "det", "diag", "diag_part", "eigh", "einsum", "eye", "inv", "matmul",
           "qr", "solve", "svd", "tensordot", "trace"]
