"""``benchmarks.ingest``: its generated corpus (the measured run itself is a benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.ingest import generate_documents


def test_generated_documents_are_deterministic_markdown_reused_when_complete(tmp_path: Path) -> None:
    first = generate_documents(tmp_path / "a", 12)
    second = generate_documents(tmp_path / "b", 12)
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert len(files) == 12 and files == sorted(
        path.relative_to(second) for path in second.rglob("*") if path.is_file()
    )
    text = (first / files[0]).read_text()
    assert text.startswith("# Document 0") and text.count("\n## Section") == 3
    assert all((first / name).read_text() == (second / name).read_text() for name in files)
    (first / files[0]).write_text("edited")
    generate_documents(tmp_path / "a", 12)  # complete: kept as is
    assert (first / files[0]).read_text() == "edited"
    generate_documents(tmp_path / "a", 13)  # another size: regenerated
    assert (first / files[0]).read_text() == text and len(list(first.rglob("*.md"))) == 13


def test_generated_notes_are_short_markdown_of_one_section(tmp_path: Path) -> None:
    folder = generate_documents(tmp_path / "notes", 3, shape="notes")
    texts = [path.read_text() for path in sorted(folder.rglob("*.md"))]
    assert len(texts) == 3 and all(text.startswith("# ") and text.count("\n\n") == 1 for text in texts)
    assert all(12 <= len(text.split("\n\n")[1].split()) <= 20 for text in texts)
    assert generate_documents(tmp_path / "notes", 3, shape="sections").joinpath("000", "doc000000.md").is_file()


def test_simulated_embedding_gives_unit_vectors_seeded_by_each_text() -> None:
    import numpy as np

    from benchmarks.ingest import simulated_embed

    embed = simulated_embed(384)
    vectors = embed(["a harbour", "a river", "a harbour"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2]) and not np.allclose(vectors[0], vectors[1])
    assert np.array_equal(embed(["a river"])[0], vectors[1])  # the same text, the same vector in any batch
    assert embed([]).shape == (0, 384)
