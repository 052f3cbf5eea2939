"""Fetch a log that was shared as a file or snippet, with the bot token, within a size limit.

The token is only ever sent to Slack's own file hosts (or the configured API host, for a local emulator):
a file object is data from a payload, and its URL must not be able to walk the token elsewhere.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from bot.diagnosis.paste import decode_by_bom, text_behind_nul_padding
from bot.errors import BinaryInput, InputTooLarge, UserInputError

_SLACK_FILE_HOST_SUFFIXES = (".slack.com", ".slack-edge.com", ".slack-files.com")
_COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"PK\x03\x04": "zip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"(\xb5/\xfd": "zstd"}
DOWNLOAD_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SharedFile:
    name: str
    text: str


def human_size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.0f} kB"
    return f"{n} bytes"


def too_large_message(what: str, size: int, limit: int) -> str:
    return (
        f"{what} is {human_size(size)}; I read up to {human_size(limit)}. The error is usually near the end: "
        "paste the last few hundred lines (from the first `Traceback` or `ERROR`) and I will take a look."
    )


def check_text_size(text: str, limit: int, what: str = "That paste") -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InputTooLarge(too_large_message(what, size, limit))


def allowed_download(url: str, api_url: str) -> bool:
    parsed = urlparse(url)
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        return False
    api_host = urlparse(api_url).hostname
    if api_host and parsed.hostname == api_host and parsed.port == urlparse(api_url).port:
        return True  # a local emulator serves files from the API host
    host = parsed.hostname.lower()
    return parsed.scheme == "https" and (host == "slack.com" or host.endswith(_SLACK_FILE_HOST_SUFFIXES))


def fetch_file_text(client: Any, file: Mapping[str, Any], *, token: str, api_url: str, limit: int) -> SharedFile:
    """Download one shared file as text; raises UserInputError subclasses with messages for the user."""
    info: Mapping[str, Any] = file
    if file.get("file_access") == "check_file_info" or not (file.get("url_private_download") or file.get("url_private")):
        info = client.files_info(file=file["id"])["file"]
    name = str(info.get("name") or info.get("title") or "the file")
    size = int(info.get("size") or 0)
    if size > limit:
        raise InputTooLarge(too_large_message(f"`{name}`", size, limit))
    url = info.get("url_private_download") or info.get("url_private")
    if not url or not allowed_download(str(url), api_url):
        raise UserInputError(f"I could not download `{name}` from Slack. Paste the log as text instead.")
    request = urllib.request.Request(str(url), headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 (host checked)
            data = response.read(limit + 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # it holds the response and its socket; chained below, it would keep them open until GC
        raise UserInputError(f"I could not download `{name}` from Slack ({exc}). Paste the log as text instead.") from exc
    if len(data) > limit:
        raise InputTooLarge(too_large_message(f"`{name}`", max(size, len(data)), limit))
    return SharedFile(name=name, text=decode_text(data, name))


def decode_text(data: bytes, name: str = "the file") -> str:
    for magic, kind in _COMPRESSED_MAGIC.items():
        if data.startswith(magic):
            raise BinaryInput(f"`{name}` is a {kind} archive. Unpack it and send the log itself as a text file or snippet.")
    by_bom = decode_by_bom(data)  # UTF-16 from PowerShell is text, though half its bytes are NUL
    if by_bom is not None:
        return by_bom[0]
    head = data[:8192]
    if b"\x00" in head:
        padded = text_behind_nul_padding(data)  # a log rotated with copytruncate starts with NULs
        if padded is not None:
            return padded
        raise BinaryInput(
            f"`{name}` looks like a binary file, not a text log. Send the log as text (a .log or .txt file, or a snippet)."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        if text.count("\ufffd") > max(16, len(text) // 20):
            raise BinaryInput(
                f"`{name}` is not UTF-8 text. Send the log as text (a .log or .txt file, or a snippet)."
            ) from None
        return text
