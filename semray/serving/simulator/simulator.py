"""The simulated model tier: answers OpenAI-style requests from ground-truth labels.

One code path serves in-process callers (``complete``/``complete_sync``) and HTTP (``server.py``):
match the prompt's documents, classify the task, look up the truth, make it wrong when the
question's hash falls under the model's error rate, draw a confidence, render the format asked for.
A prompt it has no label for (no row matched, no task, a null label) raises ``NoLabelError``
and costs nothing, unless the config's ``unlabelled`` is ``answer``.

>>> simulator = Simulator(config)  # doctest: +SKIP
>>> simulator.complete_sync(ChatCompletionRequest(model="sim-small", messages=[...]))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from semray.log import get_logger
from semray.serving.simulator.aggregates import (
    PARTIAL_CUE,
    aggregate_truth,
    aggregate_wrong,
    format_counts,
    partial_counts,
    row_counts,
)
from semray.serving.simulator.answers import alternatives, default_answer, option_count, render, wrong_answer
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.serving.simulator.draws import confidence, is_wrong, question_key
from semray.serving.simulator.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    NoLabelError,
    NoLabelReason,
    UnknownModelError,
)
from semray.serving.simulator.logprobs import ScoredToken, apply_stop, score_tokens, truncate
from semray.serving.simulator.matching import PromptMatch, ShingleIndex
from semray.serving.simulator.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChoiceLogprobs,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    ResponseFormat,
    SimulationNote,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from semray.serving.simulator.stats import SimulatorStats, StatsRecorder
from semray.serving.simulator.tokens import TokenCounter
from semray.serving.simulator.truth import Answer, LabelStore, RowRef
from semray.serving.simulator.understanding import TaskClassifier, detect_format

log = get_logger(__name__)
_async_sleep = asyncio.sleep  # module attribute so tests can observe waits without waiting


@dataclass(frozen=True, slots=True)
class Outcome:
    """One simulated completion, before it is wrapped in a response."""

    model: str
    task: TaskSpec | None
    rows: tuple[RowRef, ...]
    tokens: tuple[ScoredToken, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float

    @property
    def text(self) -> str:
        return "".join(token.token for token in self.tokens)


class Simulator:
    """A deterministic, label-driven stand-in for every model tier."""

    def __init__(self, config: SimulatorConfig, *, token_counter: TokenCounter | None = None) -> None:
        self.config = config
        self._store = LabelStore.build(config)
        documents = (
            (name, index, text, column)
            for name, rows in self._store.datasets.items()
            for column, texts in rows.texts.items()
            for index, text in enumerate(texts)
        )
        self._index = ShingleIndex.build(documents, config.matching)
        self._classifier = TaskClassifier(config.tasks)
        self._tokens = token_counter or TokenCounter()
        self._stats = StatsRecorder()
        self._async_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )
        self._thread_slots = {name: threading.BoundedSemaphore(p.max_concurrency) for name, p in config.models.items()}
        log.warning(
            "simulated_model_tier",
            message="answers come from a label-driven simulator, not a language model",
            models=sorted(config.models),
            datasets=sorted(config.datasets),
            tasks=[task.name for task in config.tasks],
            documents=self._index.document_count,
        )

    # -- public API -------------------------------------------------------------------------

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletionResponse:
        """Answer a chat completion, waiting out the model's simulated latency."""
        outcome = self._chat_outcome(request)
        await self._wait_async(outcome)
        return self._chat_response(request, outcome)

    def complete_sync(self, request: ChatCompletionRequest) -> ChatCompletionResponse:
        """``complete`` for synchronous callers (blocks for the simulated latency)."""
        outcome = self._chat_outcome(request)
        self._wait_sync(outcome)
        return self._chat_response(request, outcome)

    async def complete_text(self, request: CompletionRequest) -> CompletionResponse:
        """Answer a legacy text completion (one choice per prompt, times ``n``)."""
        outcomes = self._text_outcomes(request)
        for outcome in outcomes:
            await self._wait_async(outcome)
        return self._text_response(request, outcomes)

    def complete_text_sync(self, request: CompletionRequest) -> CompletionResponse:
        outcomes = self._text_outcomes(request)
        for outcome in outcomes:
            self._wait_sync(outcome)
        return self._text_response(request, outcomes)

    def stats(self) -> SimulatorStats:
        """Calls and tokens per model, and how many prompts matched no row."""
        return self._stats.snapshot()

    def models(self) -> ModelList:
        return ModelList(
            data=[
                ModelCard(
                    id=name,
                    context_length=p.context_length,
                    max_model_len=p.context_length,
                    description=p.description or "simulated model",
                )
                for name, p in self.config.models.items()
            ]
        )

    def match(self, prompt: str) -> PromptMatch:
        """Which documents ``prompt`` quotes (exposed for diagnostics and tests)."""
        return self._index.match(prompt)

    # -- one code path for every caller -----------------------------------------------------

    def _profile(self, model: str) -> ModelProfile:
        try:
            return self.config.models[model]
        except KeyError:
            raise UnknownModelError(model, tuple(self.config.models)) from None

    def _chat_outcome(self, request: ChatCompletionRequest) -> Outcome:
        if request.stream:
            raise InvalidRequestError("the simulator does not stream; send stream=false", param="stream")
        prompt_tokens = self._tokens.count_chat([message.text for message in request.messages])
        return self.answer(
            request.model,
            request.prompt_text,
            prompt_tokens=prompt_tokens,
            response_format=request.response_format,
            completion_limit=request.completion_limit,
            stop=request.stop,
        )

    def _text_outcomes(self, request: CompletionRequest) -> list[Outcome]:
        if request.stream:
            raise InvalidRequestError("the simulator does not stream; send stream=false", param="stream")
        return [
            self.answer(
                request.model,
                prompt,
                prompt_tokens=self._tokens.count(prompt),
                response_format=request.response_format,
                completion_limit=request.max_tokens,
                stop=request.stop,
            )
            for prompt in request.prompts
        ]

    def answer(
        self,
        model: str,
        prompt: str,
        *,
        prompt_tokens: int | None = None,
        response_format: ResponseFormat | None = None,
        completion_limit: int | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> Outcome:
        """Simulate ``model`` answering ``prompt``: no waiting, but counted in ``stats``.

        Raises ``NoLabelError`` (counted in ``stats().no_label``, nothing charged) for a prompt
        the labels do not answer, unless the config's ``unlabelled`` is ``answer``.
        """
        profile = self._profile(model)
        prompt_tokens = self._tokens.count(prompt) if prompt_tokens is None else prompt_tokens
        requested = completion_limit or 0
        if prompt_tokens + requested > profile.context_length or prompt_tokens >= profile.context_length:
            self._stats.record_rejection(model)
            raise ContextLengthExceededError(model, profile.context_length, prompt_tokens, requested)
        match = self._index.match(prompt)
        fmt = detect_format(response_format, match.instruction_words, prompt)
        present = {row.dataset for row in match.rows}
        quoted = match.quoted_rows
        task = self._classifier.classify(match.instruction_words, fmt.fields, present, len(quoted))
        rows = _rows_for(task, quoted)
        seed = self.config.seed
        options = option_count(task, self._store)
        if task is not None and task.kind == "aggregate":
            question, value, conf = self._aggregate(model, profile, task, rows, match, prompt)
        elif task is not None and rows:
            question = question_key(seed, model, task.name, [self._store.row_id(row) for row in rows])
            truth = self._store.true_answer(task, rows)
            if self._label_missing(task, rows, truth):
                row_id = self._store.row_id(rows[0])
                self._refuse(model, task, match, prompt, "null_label", f"row {row_id} has no {task.name!r} label")
            wrong = is_wrong(question, profile.error_rate)
            value = wrong_answer(task, truth, self._store, question) if wrong else truth
            conf = confidence(question, not wrong, profile.confidence, options)
        else:
            if not match.rows:
                datasets = ", ".join(sorted(self.config.datasets)) or "none configured"
                self._refuse(model, task, match, prompt, "no_match", f"it quotes no row of the datasets ({datasets})")
            elif task is None:
                names = ", ".join(t.name for t in self.config.tasks) or "none configured"
                self._refuse(model, task, match, prompt, "no_task", f"no task fits the instruction (tasks: {names})")
            else:
                self._refuse(model, task, match, prompt, "no_task", f"task {task.name!r} needs rows the prompt lacks")
            digest = hashlib.blake2b(" ".join(match.instruction_words).encode(), digest_size=8).hexdigest()
            question = question_key(seed, model, task.name if task else "", [f"prompt:{digest}"])
            value = default_answer(task, self._store) if task is not None else default_answer(None, self._store)
            conf = confidence(question, False, profile.confidence, options)
        pieces = render(task, value, alternatives(task, value, self._store), fmt)
        limit = completion_limit or profile.context_length - prompt_tokens
        tokens, _ = apply_stop(score_tokens(pieces, conf, options), stop)
        tokens, cut = truncate(tokens, limit, self._tokens)
        completion_tokens = max(self._tokens.count("".join(t.token for t in tokens)), 1)
        cost = (prompt_tokens * profile.price_in_per_million + completion_tokens * profile.price_out_per_million) / 1e6
        latency = profile.latency_base_s + profile.latency_per_token_s * (prompt_tokens + completion_tokens)
        self._stats.record(
            model, prompt_tokens, completion_tokens, cost, task.name if task else None, bool(match.rows), prompt
        )
        return Outcome(
            model,
            task,
            rows,
            tuple(tokens),
            "length" if cut else "stop",
            prompt_tokens,
            completion_tokens,
            cost,
            latency,
        )

    def _label_missing(self, task: TaskSpec, rows: tuple[RowRef, ...], truth: Answer) -> bool:
        """True when the labels do not answer ``task`` about ``rows``: a null label of a filter
        (its raw label), a label, a score, or a free text with a label column. Extractions answer
        null fields with nulls (a field may truly be absent) and pairs keep their rule (a null
        label never relates)."""
        if task.kind == "filter" and task.label_column is not None:
            return bool(self._store.value(rows[0], task.label_column) is None)
        if task.kind in ("label", "score") or (task.kind == "free_text" and task.label_column is not None):
            return truth is None
        return False

    def _refuse(
        self, model: str, task: TaskSpec | None, match: PromptMatch, prompt: str, reason: NoLabelReason, detail: str
    ) -> None:
        """Raise ``NoLabelError`` (counted, not charged); does nothing when the config answers anyway."""
        if self.config.unlabelled == "answer":
            return
        self._stats.record_no_label(model, task.name if task else None, bool(match.rows), prompt)
        raise NoLabelError(reason, detail)

    def _aggregate(
        self,
        model: str,
        profile: ModelProfile,
        task: TaskSpec,
        rows: tuple[RowRef, ...],
        match: PromptMatch,
        prompt: str,
    ) -> tuple[tuple[str | int, ...], Answer, float]:
        """Counts over the quoted rows plus the partial counts the prompt carries (a reduce step)."""
        choices = self._store.choices(task)
        counts = row_counts(task, rows, self._store) + partial_counts(prompt, choices)
        partial = PARTIAL_CUE in " ".join(match.instruction_words)
        ids = sorted(self._store.row_id(row) for row in rows)
        if not rows:
            ids = [f"counts:{format_counts(counts)}"]
        question = question_key(self.config.seed, model, task.name, ids)
        wrong = is_wrong(question, profile.error_rate)
        truth = aggregate_truth(task, counts, partial)
        value = aggregate_wrong(task, counts, partial, self._store, question) if wrong else truth
        return question, value, confidence(question, not wrong, profile.confidence, 2)

    # -- latency under a concurrency limit ---------------------------------------------------

    async def _wait_async(self, outcome: Outcome) -> None:
        if outcome.latency_s <= 0:
            return
        loop = asyncio.get_running_loop()
        slots = self._async_slots.setdefault(loop, {})
        if outcome.model not in slots:
            slots[outcome.model] = asyncio.Semaphore(self.config.models[outcome.model].max_concurrency)
        async with slots[outcome.model]:
            await _async_sleep(outcome.latency_s)

    def _wait_sync(self, outcome: Outcome) -> None:
        if outcome.latency_s <= 0:
            return
        with self._thread_slots[outcome.model]:
            time.sleep(outcome.latency_s)

    # -- responses ---------------------------------------------------------------------------

    def _note(self, outcome: Outcome) -> SimulationNote:
        return SimulationNote(
            task=outcome.task.name if outcome.task else None, matched_rows=len(outcome.rows), cost_usd=outcome.cost_usd
        )

    def _chat_response(self, request: ChatCompletionRequest, outcome: Outcome) -> ChatCompletionResponse:
        logprobs = None
        if request.logprobs:
            top_n = request.top_logprobs or 0
            logprobs = ChoiceLogprobs(content=[_token_logprob(token, top_n) for token in outcome.tokens])
        choice = ChatChoice(
            index=0,
            message=AssistantMessage(content=outcome.text),
            logprobs=logprobs,
            finish_reason="length" if outcome.finish_reason == "length" else "stop",
        )
        return ChatCompletionResponse(
            id=_response_id("chatcmpl", request.model, request.prompt_text),
            created=int(time.time()),
            model=request.model,
            choices=[choice.model_copy(update={"index": i}) for i in range(request.n)],
            usage=_usage([outcome], request.n),
            simulator=self._note(outcome),
        )

    def _text_response(self, request: CompletionRequest, outcomes: Sequence[Outcome]) -> CompletionResponse:
        choices: list[CompletionChoice] = []
        for outcome in outcomes:
            logprobs = _text_logprobs(outcome.tokens, request.logprobs) if request.logprobs is not None else None
            for _ in range(request.n):
                choices.append(
                    CompletionChoice(
                        index=len(choices),
                        text=outcome.text,
                        logprobs=logprobs,
                        finish_reason="length" if outcome.finish_reason == "length" else "stop",
                    )
                )
        return CompletionResponse(
            id=_response_id("cmpl", request.model, "\x00".join(request.prompts)),
            created=int(time.time()),
            model=request.model,
            choices=choices,
            usage=_usage(outcomes, request.n),
            simulator=[self._note(outcome) for outcome in outcomes],
        )


def _rows_for(task: TaskSpec | None, matched: Sequence[RowRef]) -> tuple[RowRef, ...]:
    """The rows a task is about: the last quoted row of its dataset (earlier ones read as
    examples), or for a pair the last one of each side (the last two when both sides share a dataset)."""
    if task is None:
        return ()
    left = [row for row in matched if row.dataset == task.dataset]
    if task.kind == "aggregate":
        return tuple(left)
    if task.kind != "pair":
        return (left[-1],) if left else ()
    right_dataset = task.right_dataset or task.dataset
    if right_dataset == task.dataset:
        return tuple(left[-2:]) if len(left) >= 2 else ()
    right = [row for row in matched if row.dataset == right_dataset]
    return (left[-1], right[-1]) if left and right else ()


def _response_id(prefix: str, model: str, prompt: str) -> str:
    digest = hashlib.blake2b(f"{model}\x00{prompt}".encode(), digest_size=12).hexdigest()
    return f"{prefix}-sim-{digest}"


def _usage(outcomes: Sequence[Outcome], n: int) -> Usage:
    prompt = sum(outcome.prompt_tokens for outcome in outcomes)
    completion = sum(outcome.completion_tokens for outcome in outcomes) * n
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def _token_logprob(token: ScoredToken, top_n: int) -> TokenLogprob:
    return TokenLogprob(
        token=token.token,
        logprob=token.logprob,
        bytes=list(token.token.encode("utf-8")),
        top_logprobs=[
            TopLogprob(token=text, logprob=lp, bytes=list(text.encode("utf-8"))) for text, lp in token.top[:top_n]
        ],
    )


def _text_logprobs(tokens: Sequence[ScoredToken], top_n: int) -> CompletionLogprobs:
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token.token)
    return CompletionLogprobs(
        tokens=[token.token for token in tokens],
        token_logprobs=[token.logprob for token in tokens],
        top_logprobs=[dict(token.top[:top_n]) for token in tokens] if top_n else None,
        text_offset=offsets,
    )
