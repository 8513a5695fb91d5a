"""``semray ask`` journals its units: a stopped ask names how to resume it, ``--resume ID`` goes on with it,
``semray runs show ID`` renders its trace; failed attempts stay out of later prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import QUESTION, accepts, choose, gold_document, outline, plan, recorded, write_data

from semray.asking import ask, loop_config
from semray.cli import main
from semray.operators import plan_from_json
from semray.planner.agents import ListMemory, SourceCatalog
from semray.planner.agents.ask_journal import AskTraceError, ask_folder, ask_status, open_ask_trace, read_ask_trace
from semray.settings import Settings

OPS = ("scan", "join", "aggregate")


def _recording(path: Path, answers: dict[str, list[Any]]) -> Path:
    path.write_text(json.dumps({"version": 1, "model": "qwen-recorded", "answers": answers}), encoding="utf-8")
    return path


def _table_args(tables: dict[str, Path]) -> list[str]:
    return [arg for name, path in tables.items() for arg in ("-t", f"{name}={path}")]


def test_a_stopped_ask_says_how_to_resume_and_resume_by_id_pays_only_what_was_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = write_data(tmp_path)
    gold = gold_document(SourceCatalog.from_paths(tables))
    head = {
        "profiling/choose": [{"json": {"datasets": ["reviews", "products"], "reason": "ratings"}}],
        "planning/outline": [{"json": {"steps": [{"operator": op, "purpose": op} for op in OPS]}}],
    }
    judged = [{"json": {"verdict": "accept", "mismatch": "", "correction": ""}}] * 3
    short = _recording(tmp_path / "short.json", head)  # no draft: the ask stops in its plan unit
    rest = _recording(tmp_path / "rest.json", {"manipulation/fill": [{"json": gold}], "semantic/judge": judged})
    state = ["--state-dir", str(tmp_path / "state")]

    assert main([*state, "ask", QUESTION, "--dry-run", "--replay", str(short), *_table_args(tables)]) == 2
    err = capsys.readouterr().err
    found = re.search(r"go on with `semray ask --resume (\S+)`", err)
    assert found is not None and "stopped before it finished" in err and "record the session again" in err
    ask_id = found.group(1)
    assert f"ask {ask_id}: journaled; if interrupted, go on with: semray ask --resume {ask_id}" in err

    assert main([*state, "runs", "show", ask_id]) == 0
    shown = capsys.readouterr().out
    assert f"status interrupted (go on with: semray ask --resume {ask_id})" in shown
    assert "u2 outline committed after 1 attempt(s)" in shown and "u3 plan" not in shown
    assert main([*state, "runs", "ls"]) == 0
    listed = capsys.readouterr().out
    assert "asks (`semray runs show ID` for the trace):" in listed
    assert f"{ask_id}  interrupted" in listed and f"(go on with: semray ask --resume {ask_id})" in listed
    assert main([*state, "runs", "resume", ask_id]) == 2
    assert f"is an ask, not a run: go on with it with `semray ask --resume {ask_id}`" in capsys.readouterr().err

    # The question, datasets and --dry-run come from the journal; the rest of the answers from --replay.
    assert main([*state, "ask", "--resume", ask_id, "--replay", str(rest), "--explain"]) == 0
    captured = capsys.readouterr()
    assert plan_from_json(captured.out) == plan_from_json(json.dumps(gold))
    assert f"ask {ask_id}: resumed from its journal" in captured.err
    assert "(2 replayed from the journal, not paid again)" in captured.err
    assert "profiling/choose  400 in" not in captured.err and "(replayed)" in captured.err

    assert main([*state, "runs", "show", ask_id]) == 0
    shown = capsys.readouterr().out
    assert "status succeeded" in shown and "over 2 process(es)" in shown and "2 replayed from the journal" in shown
    assert "resumed by pid" in shown and "u3 plan committed after 1 attempt(s)" in shown
    assert "u1 profile replayed from the journal of process 1: nothing paid again" in shown
    assert "resumed by pid" in shown and shown.rstrip().endswith("finished: succeeded")

    assert main([*state, "runs", "ls"]) == 0
    assert f"{ask_id}  succeeded" in capsys.readouterr().out
    assert main([*state, "runs", "show", ask_id, "--format", "json"]) == 0
    kinds = [json.loads(line)["kind"] for line in capsys.readouterr().out.splitlines()]
    assert kinds[0] == "ask_started" and "ask_resumed" in kinds and kinds[-1] == "ask_finished"

    assert main([*state, "ask", "--resume", ask_id]) == 2
    assert "already succeeded" in capsys.readouterr().err
    assert main([*state, "ask", "--resume", "20990101-000000-abcdef"]) == 2
    assert "no ask '20990101-000000-abcdef'" in capsys.readouterr().err
    assert main([*state, "ask"]) == 2
    assert "needs a question, or --resume ID" in capsys.readouterr().err


def test_resume_by_id_refuses_another_ask_and_a_finished_ask_starts_afresh(tmp_path: Path) -> None:
    tables = write_data(tmp_path)
    gold = gold_document(SourceCatalog.from_paths(tables))
    settings = Settings(state_dir=tmp_path / "state")

    def model() -> Any:
        return recorded(
            profiling_choose=[choose("reviews", "products")],
            planning_outline=[outline(*OPS)],
            manipulation_fill=[plan(gold)],
            semantic_judge=accepts(),
        )

    first = ask(QUESTION, tables=tables, model=model(), memory=ListMemory(), settings=settings, dry_run=True)
    again = ask(QUESTION, tables=tables, model=model(), memory=ListMemory(), settings=settings, dry_run=True)
    assert again.ask_id != first.ask_id and not any(step.replayed for step in again.steps)
    folder = ask_folder(settings.state_path, first.ask_id)
    assert folder is not None and read_ask_trace(folder)[0].arguments["replay"] is None  # type: ignore[union-attr]
    with pytest.raises(AskTraceError, match="already succeeded"):
        ask(QUESTION, tables=tables, model=model(), memory=ListMemory(), settings=settings, resume=first.ask_id)

    # An interrupted ask over other datasets is not this ask: resuming it by id is refused.
    other = open_ask_trace(settings.state_path, QUESTION, "recorded", "other datasets")
    other.close()
    with pytest.raises(AskTraceError, match="other datasets or settings"):
        ask(QUESTION, tables=tables, model=model(), memory=ListMemory(), settings=settings, resume=other.ask_id)


def test_the_same_ask_live_in_another_process_is_not_resumed_under_it(tmp_path: Path) -> None:
    live = open_ask_trace(tmp_path, "q", "m")
    second = open_ask_trace(tmp_path, "q", "m")  # the first still holds its lock: a new trace, no wait
    assert second.folder != live.folder and not second.resumed
    second.close()
    assert ask_status(live.folder) == "running" and ask_status(second.folder) == "interrupted"
    live.close()
    third = open_ask_trace(tmp_path, "q", "m")
    assert third.resumed and third.folder in (live.folder, second.folder)
    third.close()


def test_a_failed_attempt_reaches_later_prompts_only_as_its_verdict(tmp_path: Path) -> None:
    """The profile unit's first attempt picks the wrong dataset, with its reason and its description.

    The decision signal sends it back; the retry sees the verdict (the scores), and no later prompt
    sees that attempt's reason or the description of the dataset it explored.
    """
    tables = write_data(tmp_path)
    gold = gold_document(SourceCatalog.from_paths(tables))
    wrong = choose("weather")
    wrong = type(wrong)(wrong.text.replace("ratings are in reviews", "SECRET-REASON-OF-ATTEMPT-1"), 400, 30)
    model = recorded(
        profiling_choose=[wrong, choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold)],
        semantic_judge=accepts(),
    )
    scorer = FixedScorer({"weather": -1.0, "reviews": -0.01, "products": -1.0})
    memory = ListMemory()
    # Only the decision signal: the span and early-stopping signals have tests of their own.
    settings = Settings(state_dir=tmp_path / "state", agent_span_divergence=None, agent_stop_divergence=None)
    result = ask(QUESTION, tables=tables, model=model, memory=memory, settings=settings, dry_run=True, scorer=scorer)
    assert result.datasets == ("reviews", "products")
    prompts = [(step.agent, step.kind, dict(step.inputs)["prompt"]) for step in result.steps if step.model]
    assert [f"{agent}/{kind}" for agent, kind, _ in prompts][:3] == [
        "profiling/choose",
        "profiling/choose",
        "planning/outline",
    ]
    retry = prompts[1][2]
    assert "weakly supported" in retry and "the choice ' weather' scored" in retry  # the verdict, as feedback
    assert "weakly supported" not in prompts[0][2]
    later = [text for _, _, text in prompts[1:]]
    assert not any("SECRET-REASON-OF-ATTEMPT-1" in text for text in later)
    after_profile = [text for agent, _, text in prompts[2:] if agent != "profiling"]
    assert after_profile and not any("temperature" in text or "weather.csv" in text for text in after_profile)
    assert all(count == 0 for count in model.remaining().values())
    # Nothing of the attempt reached long-term memory either: the ask had no failed draft to learn from.
    assert memory.records == ()


class FixedScorer:
    """Each continuation's tokens get the logprob of its first dataset name."""

    def __init__(self, logprobs: dict[str, float]) -> None:
        self.logprobs = logprobs

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        word = continuation.strip().split(",")[0]
        return (self.logprobs[word],) * len(continuation.split())


@pytest.fixture(scope="module")
def tiny_scorer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random GPT-2 with a word-level vocabulary, saved as a transformers model folder."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("scorer")
    words = ["[PAD]", "[UNK]", "[EOS]", "Question:", "datasets:", "reviews,", "reviews", "products", "weather"]
    vocab = {token: i for i, token in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(vocab), n_positions=256, n_embd=16, n_layer=1, n_head=2, eos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def _profile_unit(tmp_path: Path, scorer: Path, threshold: float) -> tuple[int, float, bool]:
    """Ask with the scorer tier from settings: (profile attempts, measured margin, forced commit)."""
    from semray.planner.agents.ask_journal import UnitCommitted, UnitVerdictJournaled

    tables = write_data(tmp_path)
    gold = gold_document(SourceCatalog.from_paths(tables))
    settings = Settings(
        state_dir=tmp_path / f"state-{threshold}",
        agent_scorer_model=scorer,
        agent_decision_margin=threshold,
        agent_max_retries=1,
        agent_span_divergence=None,
        agent_stop_divergence=None,
    )
    model = recorded(
        profiling_choose=[choose("reviews", "products"), choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold)],
    )
    config = loop_config(settings, semantic=False)
    result = ask(
        QUESTION, tables=tables, model=model, memory=ListMemory(), settings=settings, config=config, dry_run=True
    )
    folder = ask_folder(settings.state_path, result.ask_id)
    assert folder is not None
    records = read_ask_trace(folder)
    verdicts = [r for r in records if isinstance(r, UnitVerdictJournaled) and r.unit_name == "profile"]
    committed = next(r for r in records if isinstance(r, UnitCommitted) and r.unit_name == "profile")
    margins = {verdict.signals["decision_margin"] for verdict in verdicts}
    assert len(margins) == 1  # the same choice scores the same: the scorer is deterministic
    return committed.attempts, margins.pop(), committed.forced


def test_the_decision_margin_threshold_in_settings_decides_the_retry_on_a_tiny_scorer_model(
    tmp_path: Path, tiny_scorer: Path
) -> None:
    attempts, margin, forced = _profile_unit(tmp_path, tiny_scorer, 1.0)
    assert -1.0 <= margin < 1.0
    assert (attempts, forced) == (2, True)  # below the threshold: retried, then committed as forced (soft)
    below = max(0.0, margin - 0.01)
    attempts, _, forced = _profile_unit(tmp_path, tiny_scorer, below)
    assert (attempts, forced) == ((1, False) if margin >= below else (2, True))
    assert Settings().agent_decision_margin == 0.25 and loop_config(Settings()).units.decision_margin == 0.25
