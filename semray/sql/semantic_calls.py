"""``SEM_*`` functions in SQL, compiled into semantic plan operators.

===============================================  =========================================
SQL                                              plan
===============================================  =========================================
``WHERE SEM_FILTER('{review} is positive')``     ``SemFilter``
``SEM_MAP('summarize {review}' [, 'type'])``     ``SemMap(output=<alias>)``
``SEM_SCORE('how positive is {review}', 1, 5)``  ``SemMap(output_type=int, lo=1, hi=5)``
``SEM_CLASSIFY('{review}', 'pos|neg|neutral')``  ``SemClassify(labels=(...))``
``SEM_EXTRACT('{body}', 'sender: text, ...')``   ``SemExtract`` (one output column per field)
``SEM_AGG('summarize {review}')``                ``SemAgg(keys=<GROUP BY keys>)``
``SEM_CODE('parse {raw}', 'day: date' [, code])``  ``SemCode`` (one output column per field)
``JOIN ... ON SEM_MATCH('{l.a} and {r.b} ...')`` ``SemJoin``
===============================================  =========================================

Template references (``{column}``, ``{table.column}``) are resolved like column
references and rewritten to plan column names; unknown names fail here, with the
position of the reference in the query.
"""

from __future__ import annotations

import contextlib
import string
from collections.abc import Callable, Iterator

from sqlglot import exp

from semray.errors import ColumnNotFoundError, PlanError
from semray.operators import ExtractField, Node, SemAgg, SemClassify, SemExtract, SemFilter, SemJoin, SemMap
from semray.operators.code import SemCode
from semray.operators.field_specs import FieldSpecError, parse_fields, parse_value_type
from semray.operators.semantic import ValueType
from semray.operators.templates import template_columns
from semray.sql.diagnostics import QueryText, UnsupportedSqlError, at_position, start_offset
from semray.sql.literals import number_literal
from semray.sql.rewrite import semantic_name
from semray.sql.scope import Relation


def instruction(call: exp.Expr, source: QueryText) -> tuple[str, exp.Expr]:
    """The instruction literal of a ``SEM_*`` call and its node (for positions)."""
    name = semantic_name(call) or "SEM_*"
    arguments = call.expressions
    if not arguments or not isinstance(arguments[0], exp.Literal) or not arguments[0].is_string:
        raise source.unsupported(
            call, f"{name} without a string instruction", f"write {name}('instruction over {{column}}', ...)"
        )
    return str(arguments[0].this), arguments[0]


def rewrite_template(
    template: str, literal: exp.Expr, resolve: Callable[[str, str], str], source: QueryText, where: str
) -> str:
    """Rewrite each ``{reference}`` with ``resolve(reference, position)`` and return the new template.

    >>> rewrite_template("Is {r.text} ok?", exp.Literal.string(""), lambda ref, at: "text", QueryText(""), "SEM_FILTER")
    'Is {text} ok?'
    """
    template_columns(template, where)  # raises on malformed braces, with advice
    parts: list[str] = []
    for literal_text, field, _, _ in string.Formatter().parse(template):
        parts.append(literal_text.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            parts.append("{" + resolve(field, _reference_position(field, literal, source)) + "}")
    return "".join(parts)


def _reference_position(reference: str, literal: exp.Expr, source: QueryText) -> str:
    start = start_offset(literal)
    if start is None:
        return "query"
    found = source.text.find("{" + reference, start)
    return source.position(found + 1 if found >= 0 else start)


def relation_resolver(relation: Relation, where: str) -> Callable[[str, str], str]:
    """Resolve ``{column}`` / ``{table.column}`` in a one-input template to a plan column name."""

    def resolve(reference: str, position: str) -> str:
        qualifier, _, name = reference.rpartition(".")
        found = relation.find(name, qualifier or None)
        if found is None:
            pool = relation.star(qualifier) if qualifier and relation.has_qualifier(qualifier) else relation.star()
            raise ColumnNotFoundError(name, [c.name for c in pool], f"the {where} instruction (at {position})")
        return found.plan_name

    return resolve


@contextlib.contextmanager
def located(node: exp.Expr | None, source: QueryText) -> Iterator[None]:
    """Append the query position to plan errors raised while building from ``node``."""
    try:
        yield
    except PlanError as error:
        raise at_position(error, source.locate(node)) from None


def sem_filter(node: Node, call: exp.Expr, relation: Relation, source: QueryText) -> SemFilter:
    template, literal = instruction(call, source)
    _expect_arguments(call, 1, source)
    text = rewrite_template(template, literal, relation_resolver(relation, "SEM_FILTER"), source, "SEM_FILTER")
    with located(call, source):
        return SemFilter(input=node, instruction=text)


def sem_column(node: Node, call: exp.Expr, output: str, relation: Relation, source: QueryText) -> Node:
    """The node computing one SELECT-list semantic call into column ``output``."""
    name = semantic_name(call)
    template, literal = instruction(call, source)
    text = rewrite_template(template, literal, relation_resolver(relation, str(name)), source, str(name))
    arguments = call.expressions[1:]
    with located(call, source):
        if name == "SEM_FILTER":
            _expect_arguments(call, 1, source)
            return SemMap(input=node, instruction=text, output=output, output_type="bool")
        if name == "SEM_MAP":
            _expect_arguments(call, 2, source)
            text_type = value_type(_string_argument(arguments[0], call, source), call, source) if arguments else "text"
            return SemMap(input=node, instruction=text, output=output, output_type=text_type)
        if name == "SEM_SCORE":
            if len(arguments) != 2:
                raise source.unsupported(
                    call, "SEM_SCORE without a range", "write SEM_SCORE('instruction {column}', lo, hi)"
                )
            lo, hi = (_number_argument(argument, call, source) for argument in arguments)
            kind: ValueType = "int" if isinstance(lo, int) and isinstance(hi, int) else "float"
            return SemMap(input=node, instruction=text, output=output, output_type=kind, lo=lo, hi=hi)
        if name == "SEM_CLASSIFY":
            labels = [_string_argument(argument, call, source) for argument in arguments]
            if len(labels) == 1:
                labels = list(split_labels(labels[0]))
            labels = [label.strip() for label in labels if label.strip()]
            return SemClassify(input=node, instruction=text, labels=tuple(labels), output=output)
    raise source.unsupported(call, f"{name} as a column", "use SEM_MAP, SEM_SCORE, SEM_CLASSIFY or SEM_FILTER here")


def sem_extract(node: Node, call: exp.Expr, relation: Relation, source: QueryText) -> SemExtract:
    template, literal = instruction(call, source)
    _expect_arguments(call, 2, source)
    if len(call.expressions) != 2:
        raise source.unsupported(
            call, "SEM_EXTRACT without fields", "write SEM_EXTRACT('instruction {column}', 'name: text, amount: float')"
        )
    text = rewrite_template(template, literal, relation_resolver(relation, "SEM_EXTRACT"), source, "SEM_EXTRACT")
    fields = extract_fields(_string_argument(call.expressions[1], call, source), call, source)
    with located(call, source):
        return SemExtract(input=node, instruction=text, fields=fields)


def sem_code(node: Node, call: exp.Expr, relation: Relation, source: QueryText) -> SemCode:
    """``SEM_CODE('instruction over {column}', 'name: type, ...' [, 'def transform(batch): ...'])``:
    the instruction's references are the function's inputs; without the code, the large tier
    writes it at plan time."""
    template, literal = instruction(call, source)
    _expect_arguments(call, 3, source)
    if len(call.expressions) < 2:
        raise source.unsupported(
            call, "SEM_CODE without output fields", "write SEM_CODE('instruction over {column}', 'name: type, ...')"
        )
    text = rewrite_template(template, literal, relation_resolver(relation, "SEM_CODE"), source, "SEM_CODE")
    fields = extract_fields(_string_argument(call.expressions[1], call, source), call, source)
    code = _string_argument(call.expressions[2], call, source) if len(call.expressions) == 3 else None
    with located(call, source):
        inputs = template_columns(text, "SEM_CODE")
        if not inputs:
            raise PlanError("SEM_CODE: reference the input columns in the instruction, e.g. 'Parse {raw} as a date'")
        return SemCode(input=node, instruction=text, inputs=inputs, outputs=fields, code=code)


def split_labels(labels: str) -> tuple[str, ...]:
    """``'pos|neg| neutral'`` -> ``('pos', 'neg', 'neutral')``: the one-string label list of
    ``SEM_CLASSIFY`` and `Query.sem_classify`."""
    return tuple(label.strip() for label in labels.split("|"))


def extract_fields(spec: str, call: exp.Expr, source: QueryText) -> tuple[ExtractField, ...]:
    """``'sender: text, amount: float, urgent'`` -> fields, by the grammar of
    ``semray.operators.field_specs`` (the type defaults to text; SQL synonyms such as ``varchar``)."""
    try:
        return parse_fields(spec)
    except FieldSpecError as error:
        raise source.unsupported(call, error.what, error.instead) from None


def sem_agg(
    node: Node, call: exp.Expr, keys: tuple[str, ...], output: str, relation: Relation, source: QueryText
) -> SemAgg:
    template, literal = instruction(call, source)
    _expect_arguments(call, 1, source)
    text = rewrite_template(template, literal, relation_resolver(relation, "SEM_AGG"), source, "SEM_AGG")
    with located(call, source):
        return SemAgg(input=node, instruction=text, keys=keys, output=output)


def sem_join(left: Relation, right: Relation, call: exp.Expr, source: QueryText) -> SemJoin:
    """``SEM_MATCH`` over two relations: ``{l.x}``/``{r.x}`` (the left/right input), ``{alias.x}`` or ``{x}``."""
    template, literal = instruction(call, source)
    _expect_arguments(call, 1, source)

    def resolve(reference: str, position: str) -> str:
        qualifier, _, name = reference.rpartition(".")
        sides = (("l", left), ("r", right))
        if qualifier in ("l", "r"):
            # {l.x} / {r.x} always name the join's left / right input, whatever the table aliases are.
            relation = left if qualifier == "l" else right
            found = relation.find(name, None)
            if found is None:
                where = f"the SEM_MATCH instruction, {'left' if qualifier == 'l' else 'right'} input (at {position})"
                raise ColumnNotFoundError(name, [c.name for c in relation.star()], where)
            return f"{qualifier}.{found.plan_name}"
        if qualifier:
            for side, relation in sides:
                if relation.has_qualifier(qualifier):
                    found = relation.find(name, qualifier)
                    if found is None:
                        names = [c.name for c in relation.star(qualifier)]
                        raise ColumnNotFoundError(name, names, f"the SEM_MATCH instruction (at {position})")
                    return f"{side}.{found.plan_name}"
            tables = ", ".join(left.qualifiers + right.qualifiers)
            raise UnsupportedSqlError(
                f"{{{reference}}} in SEM_MATCH (at {position}) names no table of the join;"
                f" write {{l.{name}}}, {{r.{name}}} or a table of the join ({tables})"
            )
        matches = [(side, found) for side, relation in sides if (found := relation.find(name, None)) is not None]
        if len(matches) != 1:
            if matches:
                raise UnsupportedSqlError(
                    f"{{{name}}} in SEM_MATCH (at {position}) is ambiguous; write {{l.{name}}} or {{r.{name}}}"
                )
            raise ColumnNotFoundError(
                name, [c.name for c in left.star() + right.star()], f"the SEM_MATCH instruction (at {position})"
            )
        side, found = matches[0]
        return f"{side}.{found.plan_name}"

    text = rewrite_template(template, literal, resolve, source, "SEM_MATCH")
    with located(call, source):
        return SemJoin(left=left.node, right=right.node, instruction=text)


def value_type(name: str, call: exp.Expr, source: QueryText) -> ValueType:
    try:
        return parse_value_type(name)
    except FieldSpecError as error:
        raise source.unsupported(call, error.what, error.instead) from None


def _expect_arguments(call: exp.Expr, most: int, source: QueryText) -> None:
    if len(call.expressions) > most:
        name = semantic_name(call)
        raise source.unsupported(call, f"{name} with {len(call.expressions)} arguments", f"{name} takes at most {most}")


def _string_argument(argument: exp.Expr, call: exp.Expr, source: QueryText) -> str:
    if isinstance(argument, exp.Literal) and argument.is_string:
        return str(argument.this)
    raise source.unsupported(
        argument, f"the non-literal argument {argument.sql()!r} of {semantic_name(call)}", "pass a string literal"
    )


def _number_argument(argument: exp.Expr, call: exp.Expr, source: QueryText) -> int | float:
    negative = isinstance(argument, exp.Neg)
    value = argument.this if negative else argument
    number = number_literal(value)
    if number is None:
        text = argument.sql()
        text = text if len(text) <= 40 else text[:40] + "..."
        raise source.unsupported(argument, f"the non-numeric bound {text!r} of SEM_SCORE", "pass number literals")
    return -number if negative else number
