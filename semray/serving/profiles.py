"""Model profiles: one TOML file that names the tiers, found the same way by every command.

A profile is a ``ServingConfig`` written as TOML: a table per tier (``[embedding]``, ``[small]``,
``[large]``, and the optional ``[scorer]`` of ``semray ask``'s confidence signals) with the fields of
``TierConfig``, plus the shared options (``cache_dir``,
``cache_enabled``, ``app_prefix``, ...). ``simulator`` is the path of a simulator config (the
JSON that ``SimulatorConfig.save`` writes, with its labelled datasets) or an inline table.
Relative paths (``model_path``, ``cache_dir``, ``simulator``) are relative to the profile's
folder, so a profile can sit beside its data. ``semray models schema`` prints the JSON Schema.

Where a profile comes from, first match wins: ``--models FILE`` / ``Settings.models``
(``SEMRAY_MODELS``), then ``semray.toml`` in the working directory, else the built-in
defaults (the packaged embedder and the simulated small and large tiers).

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "semray.toml").write_text('''
... [large]
... backend = "openai"
... model = "qwen2.5-7b-instruct"
... base_url = "http://127.0.0.1:8000/v1"
... api_key_env = "VLLM_API_KEY"
... prices = { input_per_million = 0.2, output_per_million = 0.6 }
... ''')
>>> config = load_profile(folder / "semray.toml")
>>> (config.large.backend, config.large.base_url, config.small.backend)
('openai', 'http://127.0.0.1:8000/v1', 'simulated')
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticOmit

from semray.serving.config import TIER_NAMES, ServingConfig
from semray.serving.errors import ServingConfigError
from semray.serving.simulator import SimulatorConfig

PROFILE_FILE = "semray.toml"


def find_profile(models: Path | None, cwd: Path | None = None) -> Path | None:
    """The profile to use: ``models`` when given (it must exist), else ``./semray.toml`` if present."""
    if models is not None:
        path = models.expanduser()
        if not path.is_file():
            what = "is not a regular file" if path.exists() or path.is_symlink() else "not found"
            raise ServingConfigError(
                f"model profile {str(path)!r} {what} (from --models or SEMRAY_MODELS); "
                "`semray models schema` shows the format"
            )
        return path
    local = (cwd or Path.cwd()) / PROFILE_FILE
    if (local.exists() or local.is_symlink()) and not local.is_file():
        raise ServingConfigError(
            f"{str(local)!r} is not a regular file (a folder, a named pipe or a broken link), so it cannot be "
            "read as the model profile; remove or rename it, or name a profile with --models"
        )
    return local if local.is_file() else None


def resolve_serving(models: Path | None, cwd: Path | None = None) -> ServingConfig:
    """The tiers a command runs on: the profile found by ``find_profile``, or the defaults."""
    path = find_profile(models, cwd)
    return load_profile(path) if path is not None else ServingConfig()


def load_profile(path: Path) -> ServingConfig:
    """Read a profile file (TOML, or JSON for ``ServingConfig`` files written before profiles)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ServingConfigError(f"cannot read model profile {str(path)!r}: {error}") from None
    try:
        document: dict[str, Any] = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ServingConfigError(f"model profile {str(path)!r} is not valid {_format(path)}: {error}") from None
    return profile_from_dict(document, path.parent, str(path))


def profile_from_dict(document: dict[str, Any], base: Path, where: str = "model profile") -> ServingConfig:
    """A ``ServingConfig`` from a parsed profile, relative paths taken from ``base``."""
    values = dict(document)
    for tier in (*TIER_NAMES, "scorer"):
        if isinstance(values.get(tier), dict) and values[tier].get("model_path"):
            values[tier] = {**values[tier], "model_path": _relative(values[tier]["model_path"], base)}
    if values.get("cache_dir"):
        values["cache_dir"] = _relative(values["cache_dir"], base)
    simulator = values.get("simulator")
    if isinstance(simulator, str):
        values["simulator"] = _simulator(_relative(simulator, base), where)
    elif isinstance(simulator, dict):
        values["simulator"] = _inline_simulator(simulator, base, where)
    try:
        return ServingConfig.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'profile'}: {item['msg']}" for item in error.errors()
        )
        raise ServingConfigError(f"{where} is invalid: {problems}") from None


def profile_json_schema() -> dict[str, Any]:
    """The JSON Schema of a profile (``semray models schema``)."""
    schema = ServingConfig.model_json_schema(schema_generator=_ProfileSchema)
    schema["title"] = "semray model profile (semray.toml)"
    schema["description"] = (
        "Tiers as TOML tables [embedding], [small], [large] with TierConfig fields; 'simulator' may also be "
        "the path of a simulator config file. Relative paths are relative to the profile's folder."
    )
    return schema


class _ProfileSchema(GenerateJsonSchema):
    """Leaves out what a file cannot hold (the simulator's in-process Arrow tables)."""

    def handle_invalid_for_json_schema(self, schema: Any, error_info: str) -> JsonSchemaValue:
        raise PydanticOmit


def _relative(value: Any, base: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else base / path


def _simulator(path: Path, where: str) -> SimulatorConfig:
    """A simulator config file (JSON, as ``SimulatorConfig.save`` writes it)."""
    if not path.is_file():
        raise ServingConfigError(f"{where}: simulator config {str(path)!r} not found")
    try:
        return SimulatorConfig.from_file(path)
    except (OSError, ValueError) as error:
        raise ServingConfigError(f"{where}: simulator config {str(path)!r} is invalid: {error}") from None


def _inline_simulator(raw: dict[str, Any], base: Path, where: str) -> SimulatorConfig:
    """A ``[simulator]`` table; its datasets' relative paths are relative to the profile."""
    datasets = {
        name: {
            **spec,
            **{key: str(_relative(spec[key], base)) for key in ("path", "labels_path") if spec.get(key)},
        }
        for name, spec in (raw.get("datasets") or {}).items()
    }
    try:
        return SimulatorConfig.from_mapping({**raw, "datasets": datasets}, source=where)
    except ValueError as error:
        raise ServingConfigError(f"{where}: [simulator] is invalid: {error}") from None


def _format(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "TOML"
