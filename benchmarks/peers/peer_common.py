"""What both peer runners share: the simulator's /stats, label matching, and the step loop.

The runners run as scripts in their own virtual environments (no semray, no ``benchmarks``
package); Python puts this folder first on their path, so they import this module by name.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

Step = Callable[[], dict[str, Any]]


class Unsupported(Exception):
    """Raised by a step the peer cannot express (in this configuration); the message says why."""


def read_stats(base_url: str) -> dict[str, Any]:
    """The simulator's /stats now (its counters are cumulative; the benchmark takes differences per step)."""
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/stats", timeout=30) as response:  # 127.0.0.1 only
        stats: dict[str, Any] = json.loads(response.read())
    return stats


def match_label(answer: Any, labels: list[str]) -> str | None:
    """The label an answer names: exact (normalised), else the longest label it contains.

    >>> match_label("Diagnosis: Common Cold.", ["cold", "common cold"])
    'common cold'
    """
    norm = " ".join(re.findall(r"[a-z0-9]+", str(answer).casefold()))
    by_norm = {" ".join(re.findall(r"[a-z0-9]+", label.casefold())): label for label in labels}
    if norm in by_norm:
        return by_norm[norm]
    found = [label for key, label in by_norm.items() if key and key in norm]
    return max(found, key=len) if found else None


def first_number(value: Any) -> float | None:
    """The first number in an answer, or None.

    >>> first_number("4 stars"), first_number("none")
    (4.0, None)
    """
    found = re.search(r"-?\d+(?:\.\d+)?", str(value))
    return float(found.group()) if found else None


def without_answer_format(instruction: str) -> str:
    """The instruction less a closing "Answer yes or no.".

    Both peers' filter prompts ask for True or False themselves; the simulator, like a model,
    answers in the words the prompt names last (the user's ``Yes``), which LOTUS cannot parse
    (it keeps the row) and Palimpzest reads as false (it drops the row). A user of either would
    leave the sentence out.

    >>> without_answer_format("Does it rain? Answer yes or no.")
    'Does it rain?'
    """
    return re.sub(r"\s*Answer (?:with )?yes or no\.?\s*$", "", instruction, flags=re.IGNORECASE)


def run_steps(
    spec: dict[str, Any], steps: Mapping[str, Step], version: str, started: float, notes: Mapping[str, str]
) -> int:
    """Run each step of the workload, timing it and snapshotting /stats after it; print the answer as JSON.

    A failed step is a result to report (its error is recorded); the next step still runs. A step
    that raises :class:`Unsupported` is listed as one the peer cannot express.
    """
    answer: dict[str, Any] = {"steps": {}, "seconds": {}, "unsupported": {}, "errors": {}, "notes": dict(notes)}
    answer["seconds"]["startup"] = round(time.perf_counter() - started, 2)
    answer["version"] = version
    for name, step in steps.items():
        if name in spec.get("skip_steps", ()):
            continue
        began = time.perf_counter()
        try:
            answer["steps"][name] = step()
        except Unsupported as reason:
            answer["unsupported"][name] = str(reason)
            continue  # no call was made: no time and no /stats snapshot for it
        except Exception as error:  # reported in the results table, not swallowed
            traceback.print_exc()
            answer["errors"][name] = f"{type(error).__name__}: {error}"
        answer["seconds"][name] = round(time.perf_counter() - began, 2)
        answer.setdefault("stats_after", {})[name] = read_stats(spec["base_url"])
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    return 0
