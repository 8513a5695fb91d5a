"""Turn what is wrong with a CSV file into a SourceError that names the row, column and fix.

Headers are checked before any row is read: every column needs a name, no name may
appear twice (pyarrow would keep only one of them), and every column of a file must be in
the source's schema (a file beyond the inference sample could add one). A failed read is
explained by reading the file again on one thread, where pyarrow numbers the rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from semray.errors import SourceError
from semray.sources.inference import InferenceWindow

_CONVERSION = re.compile(
    r"In CSV column #(\d+): Row #(\d+): CSV conversion error to ([^:]+): invalid value '(.*)'$", re.S
)
_COLUMNS = re.compile(r"Row #(\d+): Expected (\d+) columns, got (\d+): (.*)$", re.S)
STRADDLING = "straddling object straddles two block boundaries"


def check_header(names: Sequence[str], path: str) -> None:
    """Every header name present and distinct.

    >>> check_header(["id", "id", "text"], "a.csv")
    Traceback (most recent call last):
    ...
    semray.errors.SourceError: the header of CSV 'a.csv' names column 'id' twice (columns 1 and 2); ...
    """
    for index, name in enumerate(names):
        if name == "":
            raise SourceError(
                f"the header of CSV {path!r} leaves column {index + 1} of {len(names)} without a name; "
                "name every column in the header, or read the file with header=false (columns f0, f1, ...)"
            )
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        name = repeated[0]
        places = " and ".join(str(index + 1) for index, other in enumerate(names) if other == name)
        more = f" (also {', '.join(map(repr, repeated[1:]))})" if len(repeated) > 1 else ""
        raise SourceError(
            f"the header of CSV {path!r} names column {name!r} twice (columns {places}){more}; semray would "
            "read only one of them, so give every column its own name in the header, or read the file with "
            "header=false (columns f0, f1, ...)"
        )


def check_known_columns(names: Sequence[str], known: Sequence[str], path: str, advice: str) -> None:
    """A file read after inference may not bring columns the schema lacks (they would be dropped)."""
    unknown = [name for name in names if name not in set(known)]
    if unknown:
        listed = ", ".join(map(repr, unknown))
        raise SourceError(
            f"CSV {path!r} has column(s) {listed} that the source's schema lacks (it was inferred from other "
            f"files); {advice}"
        )


def explain_conversion(
    message: str, path: str, names: Sequence[str], header: bool, prefix: str, window: InferenceWindow, advice: str
) -> SourceError | None:
    """The error for a value that does not fit its inferred type, from a single-threaded pyarrow message."""
    found = _CONVERSION.search(message)
    if found is None:
        return None
    column, row_number, kind, value = int(found[1]), int(found[2]), found[3], found[4]
    row = row_number - (2 if header else 1)
    name = names[column] if column < len(names) else f"#{column}"
    return SourceError(
        f"cannot read CSV {path!r}: column {name!r} was inferred as {kind} from {window.seen}, but data row "
        f"{row + 1} (row id {prefix + str(row)!r}) holds {value!r}, which is not a valid {kind}; {advice}"
    )


def explain_columns(message: str, path: str, header: bool, delimiter: str) -> SourceError | None:
    """The error for a row with more or fewer fields than the header."""
    found = _COLUMNS.search(message)
    if found is None:
        return None
    row = int(found[1]) - (2 if header else 1)
    return SourceError(
        f"cannot parse CSV {path!r}: data row {row + 1} has {found[3]} fields but the file has {found[2]} "
        f"columns: {found[4][:200]!r}; quote values that contain the delimiter {delimiter!r}, or check the "
        "delimiter and quote_char options"
    )


def too_long(path: str, block_size: int) -> SourceError:
    return SourceError(
        f"cannot read CSV {path!r}: a row is longer than {block_size} bytes, the most semray reads at once; "
        "check for a quote that is never closed (quote_char option) or a wrong delimiter, or split the file"
    )
