"""Prompt templates in plans: instructions that reference columns as ``{column}``.

Only the instruction text is a template; cell values are substituted later by the
serving layer and are never parsed as template syntax.
"""

from __future__ import annotations

import string

from semray.errors import ColumnNotFoundError, PlanError


def template_columns(template: str, where: str) -> tuple[str, ...]:
    """Column references of a template, in first-use order.

    >>> template_columns("Is {review} about {product}? Answer {{yes}} or no.", "SemFilter")
    ('review', 'product')
    """
    names: dict[str, None] = {}
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise PlanError(
            f"{where}: malformed template {template!r}: {error}; write literal braces as {{{{ and }}}}"
        ) from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field:
            raise PlanError(f"{where}: empty {{}} in template {template!r}; name a column, e.g. {{review}}")
        if spec or conversion:
            raise PlanError(f"{where}: format specs are not supported in template field {{{field}}}")
        names.setdefault(field, None)
    return tuple(names)


def check_template(
    template: str, available: tuple[str, ...], where: str, *, require_column: bool = True
) -> tuple[str, ...]:
    """Check a template's references against ``available`` columns; return them."""
    names = template_columns(template, where)
    if require_column and not names:
        raise PlanError(f"{where}: instruction {template!r} references no column; add one, e.g. {{text}}")
    for name in names:
        if name not in available:
            raise ColumnNotFoundError(name, available, f"{where} instruction")
    return names


def split_side(reference: str, where: str) -> tuple[str, str]:
    """Split a join template reference ``l.col`` / ``r.col`` into (side, column)."""
    side, dot, column = reference.partition(".")
    if not dot or side not in {"l", "r"} or not column:
        raise PlanError(f"{where}: join templates reference {{l.column}} or {{r.column}}, got {{{reference}}}")
    return side, column
