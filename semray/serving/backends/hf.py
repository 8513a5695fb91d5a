"""A local transformers causal LM by path (CPU or GPU): batched greedy or sampled generation
with per-token logprobs.

No native structured output: the tier adds the format instruction to the prompt and parses
strictly. GPU-seconds are the wall time of each forward batch times the GPUs the tier holds,
shared evenly among the batch's calls.

>>> HFBackend(TierConfig(backend="hf", model="tiny", model_path=Path("/models/tiny")))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from semray.log import get_logger
from semray.serving.backends.base import Call, RawCompletion
from semray.serving.config import Prices, TierConfig
from semray.serving.errors import ServingConfigError
from semray.serving.identity import path_fingerprint

log = get_logger(__name__)


class HFBackend:
    """Generation with ``transformers`` on a local model folder."""

    native_json = False

    def __init__(self, tier: TierConfig) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(tier.model_path or tier.model).expanduser()
        if not path.exists():
            raise ServingConfigError(f"hf model folder {path} does not exist; set model_path to a local model folder")
        try:
            self._tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
            model: Any = AutoModelForCausalLM.from_pretrained(str(path))
            self._model: Any = model.to(tier.device).eval()
        except (OSError, ValueError) as error:
            raise ServingConfigError(f"cannot load the hf model at {path}: {error}") from error
        self._tokenizer.padding_side = "left"  # decoder-only batches pad on the left
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        self._torch = torch
        self._device = tier.device
        self._batch_size = tier.batch_size
        self._gpus = tier.num_gpus if tier.device.startswith("cuda") else 0.0
        self._lock = threading.Lock()  # one forward pass at a time per replica
        self.model = tier.model
        config = self._model.config
        self.context_length = (
            tier.context_length
            or getattr(config, "max_position_embeddings", None)
            or getattr(config, "n_positions", None)
        )
        self.default_prices = Prices()
        self.identity = f"hf:{path.resolve()}:{path_fingerprint(path)}"
        log.info("hf_model_loaded", model=tier.model, path=str(path), device=tier.device)

    async def complete(self, calls: Sequence[Call]) -> list[RawCompletion]:
        results: list[RawCompletion] = []
        for start in range(0, len(calls), self._batch_size):
            chunk = list(calls[start : start + self._batch_size])
            results.extend(await asyncio.to_thread(self._generate_locked, chunk))
        return results

    def _generate_locked(self, calls: list[Call]) -> list[RawCompletion]:
        with self._lock:
            by_sampling: dict[float, list[int]] = {}
            for index, call in enumerate(calls):
                by_sampling.setdefault(call.temperature, []).append(index)
            results: list[RawCompletion | None] = [None] * len(calls)
            for temperature, indices in by_sampling.items():
                for index, result in zip(indices, self.generate([calls[i] for i in indices], temperature), strict=True):
                    results[index] = result
            return [result for result in results if result is not None]

    def render(self, call: Call) -> str:
        """The prompt text: the tokenizer's chat template when it has one, else messages joined."""
        if getattr(self._tokenizer, "chat_template", None):
            messages = [{"role": role, "content": text} for role, text in call.messages]
            rendered: str = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return rendered
        return "\n\n".join(text for _, text in call.messages)

    def generate(self, calls: list[Call], temperature: float) -> list[RawCompletion]:
        """One batched ``generate`` for calls sharing a temperature."""
        torch = self._torch
        encoded = self._tokenizer(
            [self.render(call) for call in calls], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(self._device)
        max_new = max(call.max_tokens for call in calls)
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature}
        started = time.perf_counter()
        with torch.inference_mode():
            output = self._model.generate(
                **encoded,
                max_new_tokens=max_new,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self._tokenizer.pad_token_id,
                eos_token_id=self._tokenizer.eos_token_id,
                **sampling,
            )
            scores = self._model.compute_transition_scores(output.sequences, output.scores, normalize_logits=True)
        elapsed = time.perf_counter() - started
        prompt_width = encoded["input_ids"].shape[1]
        input_lengths = encoded["attention_mask"].sum(dim=1).tolist()
        results = []
        for row, call in enumerate(calls):
            generated = output.sequences[row, prompt_width:].tolist()[: call.max_tokens]
            cut = _until_eos(generated, self._tokenizer.eos_token_id)
            logprobs = tuple(float(x) for x in scores[row, : len(cut)].tolist()) if call.logprobs else ()
            results.append(
                RawCompletion(
                    text=self._tokenizer.decode(cut, skip_special_tokens=True),
                    token_logprobs=logprobs,
                    input_tokens=int(input_lengths[row]),
                    output_tokens=len(cut),
                    gpu_seconds=elapsed * self._gpus / len(calls),
                    finish_reason="stop" if len(cut) < len(generated) or len(cut) < call.max_tokens else "length",
                )
            )
        return results

    async def aclose(self) -> None:
        return None


def _until_eos(tokens: list[int], eos: int | None) -> list[int]:
    if eos is None or eos not in tokens:
        return tokens
    return tokens[: tokens.index(eos)]
