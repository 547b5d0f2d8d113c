"""Units and integer rounding shared by every formula.

Bytes are integers everywhere in the core. Decimal (GB = 10**9) and binary (GiB = 2**30) units exist only for
presentation and for reading vendor figures; a name always says which one it is.
"""

from __future__ import annotations

import math

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9


def cdiv(numerator: int, denominator: int) -> int:
    """Ceiling division for non-negative integers, as vLLM's ``cdiv``: ``cdiv(4096, 16) == 256``."""
    return -(numerator // -denominator)


def ceil_int(value: float) -> int:
    """``math.ceil`` for a float that is already a byte count (vLLM rounds the requested budget up)."""
    return math.ceil(value)


def gib(n_bytes: int | float) -> float:
    """Bytes → GiB (binary), for messages; vLLM's logs print GiB."""
    return n_bytes / GIB


def gb(n_bytes: int | float) -> float:
    """Bytes → GB (decimal), for messages that follow vendor or article figures."""
    return n_bytes / GB


def fmt_int(value: int) -> str:
    """Thousands separators, as vLLM prints token counts (``450,560``)."""
    return f"{value:,}"


def fmt_gib(n_bytes: int | float, digits: int = 2) -> str:
    return f"{gib(n_bytes):.{digits}f} GiB"
