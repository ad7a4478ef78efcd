"""``tf.debugging``: the TF 1.13+ namespace of the checks (``tf.debugging.check_numerics`` is
``tf.check_numerics``).

>>> import dflow as tf
>>> tf.debugging.check_numerics(tf.constant([1.0]), "finite").op.type
'CheckNumerics'
"""

from .ops.math_ops import (
    Assert,
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
    check_numerics,
    is_finite,
    is_inf,
    is_nan,
)

__all__ = ["Assert", "assert_equal", "assert_greater", "assert_greater_equal", "assert_less",
           "assert_less_equal", "assert_negative", "assert_non_negative", "assert_non_positive",
           "assert_none_equal", "assert_positive", "check_numerics", "is_finite", "is_inf", "is_nan"]
