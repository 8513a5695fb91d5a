"""One model tier: input checks, context fitting, cache, the backend call, strict parsing with
one repair re-ask, and pricing. Deployments (``deployments.py``) wrap this; tests use it directly.

>>> tier = ModelTier("small", TierConfig(backend="simulated", model="sim-small"), backend)  # doctest: +SKIP
>>> request = ModelRequest(prompt="...", constraint=OutputConstraint.choice("Yes", "No"))  # doctest: +SKIP
>>> responses = await tier.generate([request])  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from semray.log import get_logger
from semray.serving.backends.base import Backend, Call, RawCompletion
from semray.serving.cache import AnswerCache, cache_key
from semray.serving.config import Prices, TierConfig
from semray.serving.contract import (
    ModelRequest,
    ModelResponse,
    ResponseValue,
    Usage,
    confidence_from_logprobs,
    error_response,
    row_error,
)
from semray.serving.errors import ServingError
from semray.serving.parsing import ReplyParseError, parse_reply
from semray.serving.prompts import PROMPT_VERSION, format_instruction, repair_prompt
from semray.serving.truncation import fit_prompt
from semray.serving.validation import check_completion, token_bound

log = get_logger(__name__)
_T = TypeVar("_T")
CACHE_KEY_VERSION = 2
"""Bumped when what a cache key covers changes, so older entries are never served under new rules."""
REPAIRABLE = frozenset({"truncated", "empty"})
"""Row error codes (besides an off-format reply) worth the one repair re-ask."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A request ready to send: its call, cache key and whether the prompt was cut."""

    index: int
    request: ModelRequest
    call: Call
    key: str
    truncated: bool


class ModelTier:
    """Serves ``ModelRequest`` batches for one tier through one backend."""

    def __init__(self, name: str, config: TierConfig, backend: Backend, cache: AnswerCache | None = None) -> None:
        self.name = name
        self.config = config
        self.backend = backend
        self.cache = cache
        self._cache_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"semray-cache-{name}")
        self.prices: Prices = config.prices or backend.default_prices
        self._identity = tier_identity(config, backend)
        self._token_bound = token_bound(backend.context_length)

    async def generate(self, requests: Sequence[ModelRequest], *, batch: str | None = None) -> list[ModelResponse]:
        """Answer every request, in order; per-row problems are error responses, never exceptions.

        ``batch`` (the id ``TierHandles`` sends with every attempt of one batch): the answers the
        model is paid for are recorded under it with the cached ones, and the answers an earlier,
        lost attempt of the same batch was paid for are returned as it answered them, usage
        included (paid once, counted once), instead of calling the model again.
        """
        results: list[ModelResponse | None] = [None] * len(requests)
        prepared: list[_Prepared] = []
        for index, request in enumerate(requests):
            item = self._prepare(index, request)
            if isinstance(item, ModelResponse):
                results[index] = item
            else:
                prepared.append(item)
        started = time.perf_counter()
        keys = sorted({p.key for p in prepared})
        # Off the event loop: a cache waits for SQLite's lock, or for the cluster's cache actor.
        paid, cached = (
            await self._in_cache_thread(self._look_up, batch, keys) if keys and self.cache is not None else ({}, {})
        )
        lookup_s = time.perf_counter() - started
        first_of: dict[str, _Prepared] = {}
        misses: list[_Prepared] = []
        for item in prepared:
            if item.key in cached:
                results[item.index] = _as_hit(cached[item.key], item, lookup_s, self.name)
            elif item.key in first_of:
                continue  # a duplicate within the batch: answered from its first copy below
            else:
                first_of[item.key] = item
                if item.key not in paid:
                    misses.append(item)
        answered = await self._answer(misses)
        fresh = {item.key: response for item, response in zip(misses, answered, strict=True)}
        recovered = {key: _as_recovered(paid[key], first_of[key]) for key in paid if key in first_of}
        for item in prepared:
            if results[item.index] is not None:
                continue
            response = fresh[item.key] if item.key in fresh else recovered[item.key]
            if first_of[item.key] is item:
                results[item.index] = response
            else:
                results[item.index] = _as_hit(response, item, 0.0, self.name)
        if self.cache is not None and fresh:
            await self._in_cache_thread(functools.partial(self.cache.put_many, list(fresh.items()), batch=batch))
        log.debug(
            "tier_batch",
            tier=self.name,
            rows=len(requests),
            cache_hits=len(prepared) - len(misses) - len(recovered),
            calls=len(misses),
            recovered=len(recovered),
        )
        return [response for response in results if response is not None]

    async def _in_cache_thread(self, work: Callable[..., _T], *args: Any) -> _T:
        """Run ``work`` on the tier's one cache thread: off the event loop (a cache waits for SQLite's
        lock, or for the cluster's cache actor), and always the same thread (SQLite's connection)."""
        return await asyncio.get_running_loop().run_in_executor(self._cache_thread, work, *args)

    def _look_up(self, batch: str | None, keys: list[str]) -> tuple[dict[str, ModelResponse], dict[str, ModelResponse]]:
        """The answers an earlier attempt of ``batch`` paid for, and the cached ones of the other keys."""
        return self.cache.look_up(batch, keys) if self.cache is not None else ({}, {})

    # -- preparing calls ---------------------------------------------------------------------

    def _prepare(self, index: int, request: ModelRequest) -> _Prepared | ModelResponse:
        if request.input_error:
            return self._error(request, request.input_error)
        if not request.prompt.strip():
            return self._error(request, "empty_input: the prompt is empty")
        native = self.backend.native_json and self.config.native_structured_output
        instruction = format_instruction(request.constraint, native_json=native, prompt=request.prompt)
        fixed = [text for text in (request.system, instruction) if text]
        prompt, truncated = request.prompt, False
        context = self.backend.context_length
        if context is not None:
            fitted = fit_prompt(request.prompt, fixed, request.max_tokens, context, self.config.truncation)
            if fitted.error is not None:
                return self._error(request, fitted.error)
            prompt, truncated = fitted.prompt, fitted.truncated
        user = f"{prompt}\n\n{instruction}" if instruction else prompt
        messages = ((("system", request.system),) if request.system else ()) + (("user", user),)
        schema = request.constraint.json_schema if native and request.constraint.kind == "json_schema" else None
        call = Call(messages, request.max_tokens, request.temperature, request.logprobs, schema)
        key = cache_key(
            self._identity,
            {
                "messages": messages,
                "max_tokens": request.max_tokens,
                "temperature": request.temperature,
                "logprobs": request.logprobs,
                "json_schema": schema,
                "constraint": request.constraint.model_dump(mode="json"),
                "prompts": PROMPT_VERSION,
                "key_version": CACHE_KEY_VERSION,
            },
        )
        return _Prepared(index, request, call, key, truncated)

    def _error(self, request: ModelRequest, error: str) -> ModelResponse:
        return error_response(request, error, tier=self.name, model=self.config.model)

    # -- calling, parsing, repairing ---------------------------------------------------------

    async def _answer(self, items: list[_Prepared]) -> list[ModelResponse]:
        if not items:
            return []
        started = time.perf_counter()
        raw = self._checked(items, await self.backend.complete([item.call for item in items]))
        elapsed = time.perf_counter() - started
        parsed = [self._parse(item, completion) for item, completion in zip(items, raw, strict=True)]
        retry = [i for i, (_, _, reason) in enumerate(parsed) if reason is not None]
        repaired: dict[int, RawCompletion] = {}
        if retry:
            calls = [self._repair_call(items[i], raw[i].text, parsed[i][2] or "") for i in retry]
            again = self._checked([items[i] for i in retry], await self.backend.complete(calls))
            elapsed = time.perf_counter() - started
            for i, completion in zip(retry, again, strict=True):
                repaired[i] = completion
                parsed[i] = self._parse(items[i], completion)
        return [self._response(items[i], raw[i], repaired.get(i), parsed[i], elapsed) for i in range(len(items))]

    def _checked(self, items: Sequence[_Prepared], raw: Sequence[RawCompletion]) -> list[RawCompletion]:
        """The engine's completions after the boundary checks (impossible values become row errors)."""
        if len(raw) != len(items):
            raise ServingError(
                f"backend {type(self.backend).__name__} of tier {self.name!r} answered {len(raw)} calls "
                f"for {len(items)} requests; every call needs exactly one completion"
            )
        checked = [
            check_completion(completion, max_tokens=item.call.max_tokens, bound=self._token_bound)
            for item, completion in zip(items, raw, strict=True)
        ]
        for completion in checked:
            code = completion.error.split(":", 1)[0] if completion.error else None
            if code in ("invalid_logprobs", "invalid_usage", "too_long"):
                log.warning("tier_reply_rejected", tier=self.name, model=self.config.model, error=completion.error)
        return checked

    def _parse(self, item: _Prepared, completion: RawCompletion) -> tuple[ResponseValue, str | None, str | None]:
        """(value, row error, repair reason): the reason is set when the one re-ask may help."""
        if completion.error is not None:
            code = completion.error.split(":", 1)[0]
            return None, completion.error, _repair_reason(code, item.call.max_tokens)
        try:
            return parse_reply(completion.text, item.request.constraint), None, None
        except ReplyParseError as error:
            return None, row_error("unparseable", str(error)), str(error)

    def _repair_call(self, item: _Prepared, reply: str, reason: str) -> Call:
        prompt = repair_prompt(item.call.messages[-1][1], reply, reason, item.request.constraint)
        messages = (*item.call.messages[:-1], ("user", prompt))
        return Call(messages, item.call.max_tokens, item.call.temperature, item.call.logprobs, item.call.json_schema)

    def _response(
        self,
        item: _Prepared,
        first: RawCompletion,
        second: RawCompletion | None,
        parsed: tuple[ResponseValue, str | None, str | None],
        elapsed: float,
    ) -> ModelResponse:
        completions = [first] if second is None else [first, second]
        final = completions[-1]
        input_tokens = sum(c.input_tokens for c in completions)
        output_tokens = sum(c.output_tokens for c in completions)
        gpu_seconds = sum(c.gpu_seconds for c in completions)
        usage = Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            gpu_seconds=gpu_seconds,
            dollars=self.prices.dollars(input_tokens, output_tokens, gpu_seconds),
        )
        value, error, _ = parsed
        return ModelResponse(
            text=final.text,
            value=None if error else value,
            confidence=None if error else confidence_from_logprobs(final.token_logprobs),
            token_logprobs=final.token_logprobs,
            usage=usage,
            latency_s=elapsed,
            tier=self.name,
            model=self.config.model,
            error=error,
            request_id=item.request.request_id,
            truncated=item.truncated,
            repaired=second is not None,
            calls=sum(1 for completion in completions if not completion.extra.get("unpaid")),
        )

    async def aclose(self) -> None:
        await self.backend.aclose()
        if self.cache is not None:
            await self._in_cache_thread(self.cache.close)
        self._cache_thread.shutdown(wait=False)


def tier_identity(config: TierConfig, backend: Backend) -> str:
    """Everything about a tier that can change an answer, for its cache keys: backend kind,
    model, base URL, weights path, engine options, and the backend's own identity (the
    simulator's tables and seed, a weights fingerprint). The tier's name is left out, so two
    tiers on the same model share answers.
    """
    # getattr: a backend written before `identity` existed (a test fake) still gets a key.
    engine = str(getattr(backend, "identity", ""))
    return json.dumps(
        [
            config.backend,
            config.model,
            config.base_url or "",
            str(config.model_path or ""),
            config.engine_kwargs,
            engine,
        ],
        sort_keys=True,
        default=str,
    )


def _repair_reason(code: str, max_tokens: int) -> str | None:
    """What the repair re-ask tells the model, for the row errors worth one more try."""
    if code not in REPAIRABLE:
        return None
    if code == "truncated":
        return f"the reply was cut off at the limit of {max_tokens} tokens; answer much more briefly"
    return "the reply was empty"


def _as_recovered(response: ModelResponse, item: _Prepared) -> ModelResponse:
    """An answer a lost attempt of this batch was paid for: returned as it was answered, usage
    and calls included, since no response of that attempt carried them."""
    return response.model_copy(update={"request_id": item.request.request_id, "truncated": item.truncated})


def _as_hit(response: ModelResponse, item: _Prepared, latency_s: float, tier: str) -> ModelResponse:
    """A stored response served again (possibly stored by another tier on the same model):
    no tokens, no dollars, no calls."""
    return response.model_copy(
        update={
            "cache_hit": True,
            "usage": Usage(),
            "latency_s": latency_s,
            "request_id": item.request.request_id,
            "tier": tier,
            "truncated": item.truncated,
            "calls": 0,
        }
    )
