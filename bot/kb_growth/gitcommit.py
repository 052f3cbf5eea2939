"""Optional: commit a new or changed case file to the git checkout it lives in (settings.kb_git_commit).

argv lists only (never a shell string): the author's name comes from chat and must stay data. Only the one
file is committed (`git commit -- <path>`), so whatever else is staged in the checkout is left alone. A
failure is reported, never raised: the case is already live; the commit is bookkeeping.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 30
_UNSAFE_NAME = re.compile(r"[<>\n\r\x00]")


@dataclass(frozen=True)
class CommitResult:
    ok: bool
    detail: str  # commit sha, or why there is none


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def author_string(name: str, user_id: str) -> str:
    """`Name <id@slack.invalid>`: git needs an email-shaped part; .invalid never resolves (RFC 2606)."""
    clean_name = _UNSAFE_NAME.sub("", name).strip() or user_id
    clean_id = re.sub(r"[^A-Za-z0-9_.-]", "", user_id) or "unknown"
    return f"{clean_name} <{clean_id}@slack.invalid>"


def commit_file(path: Path, message: str, author: str | None = None) -> CommitResult:
    path = Path(path).resolve()
    try:
        top = _git(path.parent, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            return CommitResult(False, f"{path.parent} is not in a git checkout")
        repo = Path(top.stdout.strip())
        rel = str(path.relative_to(repo))
        identity: list[str] = []
        if _git(repo, "config", "user.email").returncode != 0:  # committer identity for a bare service account
            identity = ["-c", "user.name=vllm-doctor", "-c", "user.email=vllm-doctor@localhost.invalid"]
        added = _git(repo, "add", "--", rel)
        if added.returncode != 0:
            return CommitResult(False, f"git add failed: {added.stderr.strip()[:300]}")
        argv = [*identity, "commit", "-m", message]
        if author:
            argv.append(f"--author={author}")
        committed = _git(repo, *argv, "--", rel)
        if committed.returncode != 0:
            return CommitResult(False, f"git commit failed: {(committed.stderr or committed.stdout).strip()[:300]}")
        sha = _git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
        return CommitResult(True, sha)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return CommitResult(False, f"git commit failed: {exc}")
