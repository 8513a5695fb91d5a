"""``semray models schema|show|check``: the model profile every command runs on.

Registered on the ``semray`` parser by ``add_models_commands(commands)``. The profile comes from
``--models FILE`` (or ``SEMRAY_MODELS``), else ``./semray.toml``, else the defaults
(``semray.serving.profiles``).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

from semray.errors import SemrayError
from semray.settings import Settings


def add_models_commands(subparsers: Any) -> None:
    """Add ``models`` and its actions to the ``semray`` command's subparsers."""
    models = subparsers.add_parser("models", help="the model profile (semray.toml): schema, tiers, a live check")
    actions = models.add_subparsers(title="actions", required=True, metavar="ACTION")
    actions.add_parser("schema", help="print the JSON Schema of model profiles").set_defaults(command=schema_command)
    actions.add_parser("show", help="which profile is used and its tiers, as JSON").set_defaults(command=show_command)
    check = actions.add_parser("check", help="call each tier once and print a table: where, model, context, prices")
    check.add_argument(
        "--tier",
        action="append",
        choices=("embedding", "small", "large", "scorer"),
        help="check only these (scorer: the [scorer] table, or --agent-scorer-model; checked when one is set)",
    )
    check.set_defaults(command=check_command)


def schema_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.profiles import profile_json_schema

    sys.stdout.write(json.dumps(profile_json_schema(), indent=2) + "\n")
    return 0


def show_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.profiles import find_profile, resolve_serving

    path = find_profile(settings.models)
    config = resolve_serving(settings.models)
    document = {
        "profile": str(path) if path else None,
        "tiers": {name: config.tier(name).model_dump(mode="json", exclude_defaults=True) for name in _TIERS},
        "simulator": "configured" if config.simulator is not None else None,
        "scorer": None if config.scorer is None else config.scorer.model_dump(mode="json", exclude_defaults=True),
    }
    if path is None:
        document["note"] = "no profile: the packaged embedder and the SIMULATED small and large tiers"
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    return 0


def check_command(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from semray.planner.agents.scorer_tier import check_scorer
    from semray.serving.checking import check_tiers
    from semray.serving.profiles import find_profile, resolve_serving

    path = find_profile(settings.models)
    serving = resolve_serving(settings.models)
    tiers = tuple(args.tier or (*_TIERS, "scorer"))
    checks = check_tiers(serving, tuple(tier for tier in tiers if tier != "scorer"))
    scorer = check_scorer(settings, serving) if "scorer" in tiers else None
    if scorer is not None:
        checks.append(scorer)
    elif args.tier and "scorer" in args.tier:
        raise SemrayError(
            'no scorer tier to check: add a [scorer] table to the model profile (backend = "openai" with base_url, '
            'model, api_key_env; or backend = "hf" with model_path), or set SEMRAY_AGENT_SCORER_MODEL'
        )
    table = Table(title=f"model profile: {path or 'defaults (no semray.toml)'}")
    for column in ("tier", "backend", "model", "where", "context", "prices", "latency", "logprobs", "status"):
        table.add_column(column, overflow="fold")
    for check in checks:
        cells = (
            check.tier,
            check.backend,
            check.model,
            check.where,
            check.context,
            check.prices,
            f"{check.latency_s:.2f} s" if check.latency_s is not None else "-",
            {True: "yes", False: "no", None: "-"}[check.logprobs],
            check.status,
        )
        # As plain text: an error's "[unauthorized, HTTP 401]" is not rich markup to swallow.
        table.add_row(*(Text(cell) for cell in cells))
    buffer = io.StringIO()
    Console(file=buffer, width=200, force_terminal=False).print(table)
    sys.stdout.write(buffer.getvalue())
    failed = [check.tier for check in checks if not check.ok]
    if failed:
        raise SemrayError(f"tier(s) {', '.join(failed)} did not answer; see the status column")
    return 0


_TIERS = ("embedding", "small", "large")
