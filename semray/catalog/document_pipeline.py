"""Read, segment and embed documents: two batch functions, run on Ray Data actor pools or in process.

``DocumentReader`` turns a batch of files (path, relative path, hash, size) into one row per
document: its status (``read`` or ``skipped`` with the reason: unreadable, undecodable, corrupt,
an HTML or PDF file too large to render whole), encoding, format, text, its segments
(``segment_document``, as a nested list with stable ids and parent ids) and its tabular snippets
(``find_snippets``, each linked to the innermost segment holding its span); a text or Markdown
file over the stream threshold gives one row per part of its text instead
(``streamed_documents.py``). ``SegmentEmbedder`` adds a unit vector to every segment with the
embedding tier (``SentenceEmbedder``). ``run_documents`` streams batches through both: on Ray
Data (``map_batches`` over ``ActorPoolStrategy`` pools, the default) or, for tiny corpora and
tests, the same two callables in this process.

This module, with ``pipeline/ray/materialize.py``, builds ray.data pipelines: an ingest is not a
query plan (no operators, no journaled run), so it does not go through plan lowering.

>>> segment_id("enron", "a.txt", (("document", 0),))
'a6d2f68530797b9729a3c8c894bfcc39'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.catalog.servers.base import DocumentFile
from semray.catalog.streamed_documents import PART_CHARS, STREAMED_SUFFIXES, check_streamed, text_parts
from semray.errors import SemrayError
from semray.log import get_logger
from semray.serving.config import TierConfig

if TYPE_CHECKING:
    from semray.catalog.section_writer import SectionWriter

log = get_logger(__name__)

Engine = Literal["ray", "local"]
READ_BATCH_DOCUMENTS = 16
EMBED_BATCH_DOCUMENTS = 256
"""Documents per embedding call on Ray Data (its batches count rows, here documents)."""
EMBED_BATCH_TEXTS = 1024
"""Segments gathered for one embedding call in process. The model pads a batch to its longest text
and sentence-transformers sorts a call's texts by length first, so a call of many texts pads little:
short notes (a heading, a paragraph, the whole note) embed 2.2x faster in calls of 1,024 than of 48
(364 vs 164 texts/s, 2 cores, measured)."""
EMBED_CHARS = 2000
"""Characters of a segment the embedder sees: the model reads about 256 word pieces anyway, and a
document's or section's whole text would cost tokenizing for nothing."""
MAX_CHUNK_CHARS = 1000
STREAM_BYTES = 64 << 20
"""Documents over this many bytes are read in parts (``Settings.catalog_stream_bytes``'s default)."""

SEGMENT_TYPE = pa.struct(
    [
        pa.field("segment_id", pa.string(), nullable=False),
        pa.field("parent_id", pa.string()),
        pa.field("level", pa.string(), nullable=False),
        pa.field("path", pa.list_(pa.string()), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("start", pa.int64(), nullable=False),
        pa.field("end", pa.int64(), nullable=False),
    ]
)
SNIPPET_TYPE = pa.struct(
    [
        pa.field("snippet_id", pa.string(), nullable=False),
        pa.field("segment_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("columns_json", pa.string(), nullable=False),
        pa.field("rows_json", pa.string(), nullable=False),
    ]
)
INPUT_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("relative", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("size", pa.int64()),
    ]
)
DOCUMENT_SCHEMA = pa.schema(
    [
        pa.field("document_id", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("encoding", pa.string()),
        pa.field("format", pa.string()),
        pa.field("title", pa.string()),
        pa.field("text", pa.string()),
        pa.field("chars", pa.int64()),
        pa.field("part", pa.int32()),
        pa.field("segments", pa.list_(SEGMENT_TYPE)),
        pa.field("snippets", pa.list_(SNIPPET_TYPE)),
    ]
)


def segment_id(dataset: str, document_id: str, chain: Sequence[tuple[str, int]]) -> str:
    """A stable id: the hash of the dataset, the document and the (level, ordinal) chain from the root.

    The hashed key is ``json.dumps([dataset, document_id, [[level, ordinal], ...]])``, spelled here
    with json's own string escaping instead of a ``json.dumps`` call per segment (about 10% of the
    reader's time on one-line documents); ``tests/catalog/test_segment_ids.py`` holds them equal.
    """
    steps = ", ".join(f"[{_json_string(level)}, {int(ordinal)!r}]" for level, ordinal in chain)
    key = f"[{_json_string(dataset)}, {_json_string(document_id)}, [{steps}]]"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def input_table(documents: Sequence[DocumentFile]) -> pa.Table:
    return pa.table(
        {
            "path": [document.path for document in documents],
            "relative": [document.relative for document in documents],
            "content_hash": [document.content_hash for document in documents],
            "size": [document.size for document in documents],
        },
        schema=INPUT_SCHEMA,
    )


class DocumentReader:
    """Batch function: files -> tables of one row per document with its segments and snippets
    (``DOCUMENT_SCHEMA``, ``part`` 0), yielded as they are read.

    A text or Markdown file over ``stream_bytes`` is read in parts (``streamed_documents.py``): one
    row per part, each with that part's segments and snippets; the first (``part`` 0) also holds
    the document's root segment and its ``chars``, and no part holds the whole ``text`` (null).
    Another document over ``stream_bytes`` is skipped with its size.
    """

    def __init__(
        self,
        dataset: str,
        max_chunk_chars: int = MAX_CHUNK_CHARS,
        sections: SectionWriter | None = None,
        stream_bytes: int = STREAM_BYTES,
        part_chars: int = PART_CHARS,
    ) -> None:
        self.dataset = dataset
        self.max_chunk_chars = max_chunk_chars
        self.sections = sections
        """The model pass for documents without headings (``section_writer.py``); None: structure only.
        A streamed document gets its structure only."""
        self.stream_bytes = stream_bytes
        self.part_chars = part_chars

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        rows: list[dict[str, Any]] = []
        for row in batch.to_pylist():
            if row["size"] > self.stream_bytes and Path(row["path"]).suffix.lower() in STREAMED_SUFFIXES:
                if rows:
                    yield pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)
                    rows = []
                yield from self._read_streamed(row)
            else:
                rows.append(self._read(row))
        if rows:
            yield pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)

    def _read(self, row: dict[str, Any]) -> dict[str, Any]:
        from semray.catalog.segments import segment_document
        from semray.catalog.snippets import find_snippets
        from semray.sources.documents import read_document

        base = {"document_id": row["relative"], "content_hash": row["content_hash"], "size": row["size"], "part": 0}
        try:
            if row["size"] > self.stream_bytes:
                raise SemrayError(
                    f"{row['size'] / (1 << 20):.1f} MiB, over the {self.stream_bytes / (1 << 20):.1f} MiB above which "
                    "documents are read in parts (Settings.catalog_stream_bytes, SEMRAY_CATALOG_STREAM_BYTES); only "
                    "text and Markdown documents are read in parts, an HTML or PDF document is rendered whole"
                )
            document = read_document(Path(row["path"]), max_bytes=max(self.stream_bytes, row["size"]))
            segment = segment_document if self.sections is None else self.sections.segment
            root = segment(document, title=row["relative"], max_chunk_chars=self.max_chunk_chars)
            snippets = find_snippets(document)
        except (SemrayError, OSError) as error:
            # One bad file is reported and skipped, never the end of the ingest.
            reason = str(error) if isinstance(error, SemrayError) else f"unreadable: {error}"
            log.warning("catalog_document_skipped", path=row["path"], reason=reason)
            return {**base, "status": "skipped", "reason": reason, "segments": [], "snippets": []}
        segments: list[dict[str, Any]] = []
        spans: list[tuple[int, int, str, int]] = []  # start, end, id, depth: to link snippets
        self._flatten(root, None, (), row["relative"], segments, spans, 0)
        return {
            **base,
            "status": "read",
            "reason": None,
            "encoding": document.encoding,
            "format": document.format,
            "title": document.title,
            "text": document.text,
            "chars": len(document.text),
            "segments": segments,
            "snippets": [self._snippet(row["relative"], snippet, spans) for snippet in snippets],
        }

    def _read_streamed(self, row: dict[str, Any]) -> Iterator[pa.Table]:
        """Tables of the parts of one document read in parts (class doc), ``READ_BATCH_DOCUMENTS`` parts each."""
        from semray.catalog.segments import segment_document
        from semray.catalog.snippets import find_snippets
        from semray.sources.documents import DocumentText, document_format

        path, document_id = Path(row["path"]), row["relative"]
        base = {"document_id": document_id, "content_hash": row["content_hash"], "size": row["size"]}
        try:
            streamed = check_streamed(path)
        except (SemrayError, OSError) as error:
            reason = str(error) if isinstance(error, SemrayError) else f"unreadable: {error}"
            log.warning("catalog_document_skipped", path=row["path"], reason=reason)
            yield pa.Table.from_pylist(
                [{**base, "status": "skipped", "reason": reason, "part": 0, "segments": [], "snippets": []}],
                schema=DOCUMENT_SCHEMA,
            )
            return
        log.info("catalog_document_streamed", path=row["path"], bytes=row["size"], chars=streamed.chars)
        form = document_format(path)
        root_chain = (("document", 0),)
        root_id = segment_id(self.dataset, document_id, root_chain)
        ordinal, rows = 0, []
        for number, (offset, text) in enumerate(text_parts(path, streamed, part_chars=self.part_chars)):
            part = DocumentText(text, form, streamed.codec)
            part_root = segment_document(part, title=document_id, max_chunk_chars=self.max_chunk_chars)
            segments: list[dict[str, Any]] = []
            spans: list[tuple[int, int, str, int]] = [(0, streamed.chars, root_id, 0)]
            if number == 0:
                # The root's span is the whole document; its text is the first part's (no part holds the whole).
                start = len(text) - len(text.lstrip())
                segments.append(
                    {
                        "segment_id": root_id,
                        "parent_id": None,
                        "level": "document",
                        "path": [document_id],
                        "ordinal": 0,
                        "text": text[start:].rstrip(),
                        "start": start,
                        "end": streamed.chars,
                    }
                )
            for child in part_root.children:
                self._flatten(child, root_id, root_chain, document_id, segments, spans, 1, offset, ordinal)
                ordinal += 1
            snippets = [
                self._snippet(
                    document_id, replace(snippet, start=snippet.start + offset, end=snippet.end + offset), spans
                )
                for snippet in find_snippets(part)
            ]
            first = {"encoding": streamed.codec, "format": form, "chars": streamed.chars} if number == 0 else {}
            rows.append(
                {
                    **base,
                    **first,
                    "status": "read",
                    "reason": None,
                    "part": number,
                    "segments": segments,
                    "snippets": snippets,
                }
            )
            if len(rows) >= READ_BATCH_DOCUMENTS:
                yield pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)
                rows = []
        if rows:
            yield pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)

    def _flatten(
        self,
        segment: Any,
        parent: str | None,
        chain: tuple[tuple[str, int], ...],
        document_id: str,
        out: list[dict[str, Any]],
        spans: list[tuple[int, int, str, int]],
        depth: int,
        shift: int = 0,
        ordinal: int | None = None,
    ) -> None:
        """Append ``segment`` and its descendants to ``out``; a part's (``_read_streamed``) with its spans moved
        ``shift`` characters on and the ``ordinal`` it has among the whole document's children."""
        number = segment.ordinal if ordinal is None else ordinal
        chain = (*chain, (segment.level, number))
        identifier = segment_id(self.dataset, document_id, chain)
        start, end = segment.start + shift, segment.end + shift
        out.append(
            {
                "segment_id": identifier,
                "parent_id": parent,
                "level": segment.level,
                "path": list(segment.path),
                "ordinal": number,
                "text": segment.text,
                "start": start,
                "end": end,
            }
        )
        spans.append((start, end, identifier, depth))
        for child in segment.children:
            self._flatten(child, identifier, chain, document_id, out, spans, depth + 1, shift)

    def _snippet(self, document_id: str, snippet: Any, spans: list[tuple[int, int, str, int]]) -> dict[str, Any]:
        holding = [span for span in spans if span[0] <= snippet.start and snippet.end <= span[1]]
        # the innermost: deepest, then shortest (the root holds every span, so there is one)
        innermost = max(holding, key=lambda span: (span[3], span[0] - span[1]))[2] if holding else spans[0][2]
        key = json.dumps([self.dataset, document_id, snippet.kind, snippet.start, snippet.end])
        return {
            "snippet_id": hashlib.blake2b(key.encode(), digest_size=16).hexdigest(),
            "segment_id": innermost,
            "kind": snippet.kind,
            "columns_json": json.dumps(list(snippet.columns), ensure_ascii=False),
            "rows_json": json.dumps([list(cells) for cells in snippet.rows], ensure_ascii=False),
        }


class SegmentEmbedder:
    """Batch function: adds a ``vector`` (unit length, the embedding tier's) to every segment of every document."""

    def __init__(self, config: TierConfig) -> None:
        from semray.serving.backends.embedder import SentenceEmbedder

        self.embedder = SentenceEmbedder(config)

    def __call__(self, batch: pa.Table) -> pa.Table:
        segments = batch.column("segments").combine_chunks()
        flat = pc.list_flatten(segments)
        vectors = self.embed_distinct([text[:EMBED_CHARS] for text in flat.field("text").to_pylist()])
        vector_array = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), vectors.shape[1])
        fields = [flat.field(index) for index in range(flat.type.num_fields)]
        names = [flat.type.field(index).name for index in range(flat.type.num_fields)]
        with_vectors = pa.StructArray.from_arrays([*fields, vector_array], names=[*names, "vector"])
        offsets = pc.subtract(segments.offsets, segments.offsets[0])  # a sliced batch's offsets start past 0
        nested = pa.ListArray.from_arrays(offsets, with_vectors)
        return batch.set_column(batch.schema.get_field_index("segments"), "segments", nested)

    def embed_distinct(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``, each distinct text embedded once.

        A segment often has its parent's very text: a document of one section (the section starts
        at the document's first heading), a section or document of one paragraph. Embedding them
        once saves a quarter to a half of the model's work on short documents.

        >>> class Echo(SegmentEmbedder):
        ...     def __init__(self) -> None:
        ...         self.seen: list[str] = []
        ...     def embed(self, texts):
        ...         self.seen += texts
        ...         return np.array([[len(text)] for text in texts], dtype=np.float32)
        >>> echo = Echo()
        >>> echo.embed_distinct(["# A", "# A", "body"]).ravel().tolist(), echo.seen
        ([3.0, 3.0, 4.0], ['# A', 'body'])
        """
        positions: dict[str, int] = {}
        order = [positions.setdefault(text, len(positions)) for text in texts]
        vectors = self.embed(list(positions))
        return vectors if len(positions) == len(texts) else vectors[np.asarray(order, dtype=np.int64)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embedder.embed(list(texts))
        if vectors.shape[0] == 0:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        return vectors


class TextEmbedder:
    """Batch function: a ``vector`` for the ``text`` column (dataset profiles)."""

    def __init__(self, config: TierConfig) -> None:
        self.embedder = SegmentEmbedder(config)

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.embedder.embed([text or "" for text in batch.column("text").to_pylist()])
        array = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), vectors.shape[1])
        return batch.append_column("vector", array)


_LOCAL_EMBEDDERS: dict[str, SegmentEmbedder] = {}


def local_embedder(config: TierConfig) -> SegmentEmbedder:
    """The in-process embedder of ``config``, loaded once per process (segments and profiles share it)."""
    key = config.model_dump_json()
    if key not in _LOCAL_EMBEDDERS:
        _LOCAL_EMBEDDERS[key] = SegmentEmbedder(config)
    return _LOCAL_EMBEDDERS[key]


def run_documents(
    documents: Sequence[DocumentFile] | pa.Table,
    dataset: str,
    embedding: TierConfig,
    *,
    engine: Engine,
    actors: int = 1,
    sections: SectionWriter | None = None,
    stream_bytes: int = STREAM_BYTES,
) -> Iterator[pa.Table]:
    """Batches of ``DOCUMENT_SCHEMA`` rows whose segments carry vectors, streamed (``sections``, ``stream_bytes``:
    see DocumentReader); ``documents`` as ``DocumentFile``s or their ``input_table``."""
    table = documents if isinstance(documents, pa.Table) else input_table(documents)
    reader_arguments = (dataset, MAX_CHUNK_CHARS, sections, stream_bytes, PART_CHARS)
    if engine == "local":
        reader, embedder = DocumentReader(*reader_arguments), local_embedder(embedding)
        pending: list[pa.Table] = []
        texts = 0
        for start in range(0, table.num_rows, READ_BATCH_DOCUMENTS):
            for read in reader(table.slice(start, READ_BATCH_DOCUMENTS)):
                pending.append(read)
                texts += len(pc.list_flatten(read.column("segments")))
                if texts >= EMBED_BATCH_TEXTS:
                    yield embedder(pa.concat_tables(pending))
                    pending, texts = [], 0
        if pending:
            yield embedder(pa.concat_tables(pending))
        return
    import ray.data as rd

    stream = (
        rd.from_arrow(table)
        .repartition(max(1, -(-table.num_rows // READ_BATCH_DOCUMENTS)))
        .map_batches(
            DocumentReader,
            fn_constructor_args=reader_arguments,
            compute=rd.ActorPoolStrategy(min_size=1, max_size=actors),
            batch_size=READ_BATCH_DOCUMENTS,
            batch_format="pyarrow",
            num_cpus=0.5,
        )
        .map_batches(
            SegmentEmbedder,
            fn_constructor_args=(embedding,),
            compute=rd.ActorPoolStrategy(min_size=1, max_size=actors),
            batch_size=EMBED_BATCH_DOCUMENTS,
            batch_format="pyarrow",
            num_cpus=embedding.num_cpus,
        )
    )
    yield from stream.iter_batches(batch_format="pyarrow", batch_size=None)


def embed_texts(texts: Sequence[str], embedding: TierConfig, *, engine: Engine) -> np.ndarray:
    """Unit vectors of ``texts`` (dataset profiles), with the same embedder as segments."""
    table = pa.table({"text": pa.array(list(texts), pa.string())})
    if engine == "local" or not texts:
        return local_embedder(embedding).embed(list(texts))
    import ray.data as rd

    result = (
        rd.from_arrow(table)
        .map_batches(
            TextEmbedder,
            fn_constructor_args=(embedding,),
            compute=rd.ActorPoolStrategy(size=1),
            batch_size=256,
            batch_format="pyarrow",
            num_cpus=embedding.num_cpus,
        )
        .to_arrow_refs()
    )
    import ray

    tables = ray.get(result)
    column = pa.concat_tables(tables).column("vector").combine_chunks()
    return np.asarray(column.values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(len(texts), -1)
