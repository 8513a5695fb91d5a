"""OpenAI-compatible request and response values (the subset the simulator serves).

Unknown request fields (tools, penalties, ...) are accepted and ignored, like many servers do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SYSTEM_FINGERPRINT = "semray-simulator"


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ContentPart(_Request):
    type: str = "text"
    text: str | None = None


class ChatMessage(_Request):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None

    @property
    def text(self) -> str:
        """The message's text (text parts joined by newlines; other parts ignored)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if part.text)


class JsonSchemaFormat(_Request):
    name: str = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(_Request):
    """``POST /v1/chat/completions`` body, e.g. ``ChatCompletionRequest(model="sim-small", messages=[...])``."""

    model: str
    messages: tuple[ChatMessage, ...] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    seed: int | None = None
    stream: bool = False
    user: str | None = None

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(message.text for message in self.messages)

    @property
    def completion_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Request):
    """``POST /v1/completions`` body (legacy text completions); ``logprobs`` is the top-k count."""

    model: str
    prompt: str | list[str]
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    response_format: ResponseFormat | None = None
    seed: int | None = None
    stream: bool = False
    user: str | None = None

    @property
    def prompts(self) -> tuple[str, ...]:
        return (self.prompt,) if isinstance(self.prompt, str) else tuple(self.prompt)


class TopLogprob(_Response):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(_Response):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(_Response):
    content: list[TokenLogprob]


class AssistantMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(_Response):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class Usage(_Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SimulationNote(_Response):
    """Says the response is simulated; what the simulator understood (never whether it is right)."""

    simulated: Literal[True] = True
    task: str | None
    matched_rows: int
    cost_usd: float


class ChatCompletionResponse(_Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str = SYSTEM_FINGERPRINT
    simulator: SimulationNote


class CompletionLogprobs(_Response):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(_Response):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class CompletionResponse(_Response):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    system_fingerprint: str = SYSTEM_FINGERPRINT
    simulator: list[SimulationNote]


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = SYSTEM_FINGERPRINT
    simulated: Literal[True] = True
    context_length: int
    max_model_len: int
    description: str = ""


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]
