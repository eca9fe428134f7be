"""The types of tandem's annotations: what a key, a value and a column may
be, and the arrays answers come in."""

from __future__ import annotations

from typing import Any, Protocol, Sequence, Union

import numpy as np
import numpy.typing as npt


class SupportsDLPack(Protocol):
    """An array of another library that exports DLPack (torch, cupy on the host, ...)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


#: One key or value: an int in [0, 2^64) (a Python or numpy integer).
Key = Union[int, np.integer]
#: A column of keys or values: a 1-D array of ints in [0, 2^64) (uint64 is
#: used in place; other integer dtypes are checked and copied), a sequence of
#: ints, a buffer, or a DLPack array.
Column = Union[npt.NDArray[Any], Sequence[int], memoryview, SupportsDLPack]
U64Array = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]
I64Array = npt.NDArray[np.int64]
