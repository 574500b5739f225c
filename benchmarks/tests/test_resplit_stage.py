"""benchmarks/resplit_stage.sh: stage.sh's packs re-cut into smaller parts hold the same bytes, in the order
device-stage.sh concatenates them by, each part in its own .whl/pNN with the script and the new count."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "resplit_stage.sh"

pytestmark = pytest.mark.skipif(not shutil.which("git") or not shutil.which("split"), reason="needs git and split")


def staged_repo(tmp_path: Path, packs: dict[str, list[bytes]]) -> Path:
    """A git repo with .whl/p01 … as stage.sh leaves them: one part a folder, numbered across packs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    parts = [(f"{kind}.part{k:02d}", data) for kind, chunks in packs.items() for k, data in enumerate(chunks)]
    for n, (name, data) in enumerate(parts, start=1):
        folder = repo / ".whl" / f"p{n:02d}"
        folder.mkdir(parents=True)
        (folder / name).write_bytes(data)
        (folder / "device-stage.sh").write_text("#!/usr/bin/env bash\necho stage\n")
        (folder / "PARTS").write_text(f"{len(parts)}\n")
    return repo


def resplit(repo: Path, size: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(size)], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"})  # fmt: skip


def joined(repo: Path, kind: str) -> bytes:
    """What device-stage.sh rebuilds: every part of a pack, concatenated in name order."""
    parts = sorted(repo.glob(f".whl/p*/{kind}.part*"), key=lambda p: p.name)
    return b"".join(p.read_bytes() for p in parts)


def test_parts_are_recut_to_the_size_with_the_same_bytes_in_order(tmp_path):
    site = [bytes([k]) * 46 for k in range(1, 4)] + [b"tail"]  # 142 bytes in four parts
    model = [b"m" * 46, b"n" * 20]
    repo = staged_repo(tmp_path, {"site.tar.xz": site, "model.whl": model})
    done = resplit(repo, 30)
    assert done.returncode == 0, done.stderr
    folders = sorted(p.name for p in (repo / ".whl").iterdir())
    assert folders == [f"p{n:02d}" for n in range(1, 9)]  # ceil(66/30) + ceil(142/30) = 3 + 5
    assert joined(repo, "site.tar.xz") == b"".join(site) and joined(repo, "model.whl") == b"".join(model)
    for folder in (repo / ".whl").iterdir():
        (part,) = [p for p in folder.iterdir() if ".part" in p.name]
        assert part.stat().st_size <= 30
        assert (folder / "PARTS").read_text().strip() == "8"
        assert (folder / "device-stage.sh").read_text() == "#!/usr/bin/env bash\necho stage\n"


def test_without_staged_parts_it_says_so_and_changes_nothing(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    done = resplit(repo, 30)
    assert done.returncode == 2 and "stage.sh first" in done.stderr
    assert not (repo / ".whl").exists()
