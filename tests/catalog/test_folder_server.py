"""``FolderServer.profile``: what each file of a folder becomes (a document, a table, skipped with a reason)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from semray.catalog.servers.folder import FolderServer


def test_profile_lists_documents_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    root = tmp_path / "server"
    (root / "notes" / "deep").mkdir(parents=True)
    (root / "notes" / "deep" / "b.md").write_text("# B\n\nbody\n", encoding="utf-8")
    (root / "a.txt").write_text("one line\n", encoding="utf-8")
    (root / ".hidden.md").write_text("hidden\n", encoding="utf-8")
    (root / "image.png").write_bytes(b"\x89PNG")
    os.mkfifo(root / "pipe.txt")
    (root / "link.md").symlink_to(root / "a.txt")
    (root / "dead.md").symlink_to(root / "missing.md")

    profile = FolderServer(str(root)).profile({})

    documents = {document.relative: document for document in profile.documents}
    assert list(documents) == ["a.txt", "notes/deep/b.md"]  # in path order, nested paths relative to the root
    b = documents["notes/deep/b.md"]
    assert b.path == str(root / "notes" / "deep" / "b.md") and b.size == len(b"# B\n\nbody\n")
    assert b.content_hash == hashlib.sha256(b"# B\n\nbody\n").hexdigest()
    states = {state.relative: state for state in profile.files}
    assert states[".hidden.md"].reason == "hidden file (name starts with '.')"
    assert states["pipe.txt"].reason == "not a regular file (a pipe, socket or device)"
    assert states["image.png"].reason == "unsupported file type '.png'" and states["image.png"].size == 4
    for link in ("link.md", "dead.md"):  # never followed, dead or not; the size is the link's own
        assert states[link].reason == "symbolic link: not followed (catalogue its target by its own path)"
        assert states[link].size == os.lstat(root / link).st_size
    assert {state.status for state in profile.files} == {"skipped"}


def test_profile_of_one_file_names_it_relative_to_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "only.md"
    path.write_text("# Only\n", encoding="utf-8")
    profile = FolderServer(str(path)).profile({})
    assert [(document.relative, document.size) for document in profile.documents] == [("only.md", 7)]


def test_unchanged_documents_are_not_read_again(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("same\n", encoding="utf-8")
    digest = hashlib.sha256(b"same\n").hexdigest()
    profile = FolderServer(str(tmp_path)).profile({"a.md": digest})
    assert profile.documents == () and profile.unchanged_documents == ("a.md",)
