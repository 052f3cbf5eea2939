"""Remove secrets from text before it reaches the LLM, Slack, the KB or a log file.

One shared function, `redact(text)`, used everywhere. A secret is replaced by `[REDACTED:<kind>]`; the
text around it is kept, and for key/value pairs, headers and URLs the key, header name, user name and host
stay visible, because they help a reader understand the log.

Speed and safety on large pastes (10 MB):
- every rule names literal trigger strings, and runs only if one of them occurs in the lower-cased text;
  one Aho-Corasick pass finds which occur (one pass instead of one scan per rule: 10 MB in ~0.05 s);
- every quantifier is bounded, and where two could trade characters the first is possessive or atomic,
  so no pattern can backtrack catastrophically: the work per start position is bounded and the total is
  linear in the text length (tests/test_redact.py feeds hostile 2 MB inputs).

What is deliberately NOT redacted: hex addresses, sha256 digests, UUIDs, request ids, version strings,
host names and IP addresses. They carry diagnostic value and are not credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from indexer.literals import LiteralSet

MARK = "[REDACTED:{kind}]"


@dataclass(frozen=True)
class _Rule:
    """One secret shape. With `caseless`, the pattern is written in lower case and run over the
    lower-cased text (a short case-sensitive alternation scans ~8x faster than re.IGNORECASE or a list of
    spellings); the spans found there are cut out of the original text."""

    kind: str
    pattern: re.Pattern[str]
    # Lower-case literals, at least one of which every match contains; the rule is skipped when none
    # occurs. All rules' triggers are found in one Aho-Corasick pass (indexer/literals.py).
    triggers: tuple[str, ...]
    keep_head: bool = False  # the named group "head" (key name, header, user) stays in front of the mark
    caseless: bool = False
    fallback: re.Pattern[str] | None = None  # IGNORECASE twin, for text whose lower() changes its length
    # For a caseless pattern that begins with an alternation of words (a regex scan would try it at every
    # position): the lower-case literals every match begins with. The pattern is then tried only where
    # one occurs (found in one Aho-Corasick pass), which gives exactly finditer's matches, 10x faster.
    starts: LiteralSet | None = None

    def _matches(self, source: str, pattern: re.Pattern[str], anchored: bool) -> Iterator[re.Match[str]]:
        if not anchored or self.starts is None:
            yield from pattern.finditer(source)
            return
        end = 0
        for pos in self.starts.positions(source):
            if pos < end:
                continue  # inside the previous match, as finditer would skip it
            m = pattern.match(source, pos)
            if m:
                yield m
                end = max(m.end(), pos + 1)

    def apply(self, text: str, lowered: str) -> tuple[str, int]:
        mark = MARK.format(kind=self.kind)
        source, pattern = (lowered, self.pattern) if self.caseless else (text, self.pattern)
        anchored = True
        if self.caseless and len(lowered) != len(text):  # e.g. "İ".lower() is two characters
            assert self.fallback is not None
            source, pattern, anchored = text, self.fallback, False
        pieces: list[str] = []
        last = 0
        count = 0
        for m in self._matches(source, pattern, anchored):
            cut = m.end("head") if self.keep_head else m.start()
            # a removed span keeps its line breaks, so line numbers still point into the original paste
            pieces += [text[last:cut], mark, _line_breaks(text, cut, m.end())]
            last = m.end()
            count += 1
            wrapped = _WRAPPED.match(text, last) if m.end() - cut >= 16 else None
            if wrapped is not None:  # a long value at the end of a line, hard-wrapped onto the next one
                pieces += [wrapped.group(1), mark]
                last = wrapped.end()
        if not count:
            return text, 0
        pieces.append(text[last:])
        return "".join(pieces), count


# The rest of a token wrapped onto the next line by a terminal or a log viewer: the next line begins with a
# run of token characters holding a letter and a digit, then a space or the line's end (not a log prefix:
# those begin with a level word, a date, a bracket or indentation).
_WRAPPED = re.compile(
    r"(\r\n?|\n)(?!\d{2,4}[-/:.])(?=[A-Za-z0-9+/=_-]{0,256}?\d)(?=[A-Za-z0-9+/=_-]{0,256}?[A-Za-z])"
    r"[A-Za-z0-9+/=_-]{6,256}+(?=\s|$)"
)


def _line_breaks(text: str, start: int, end: int) -> str:
    if "\n" not in text[start:end] and "\r" not in text[start:end]:
        return ""
    return "".join(ch for ch in text[start:end] if ch in "\r\n")


def _rule(
    kind: str,
    pattern: str,
    triggers: tuple[str, ...],
    *,
    keep_head: bool = False,
    caseless: bool = False,
    starts: tuple[str, ...] = (),
) -> _Rule:
    fallback = re.compile(pattern, re.IGNORECASE) if caseless else None
    assert not starts or caseless, "start literals are found in the lower-cased text"
    return _Rule(
        kind,
        re.compile(pattern),
        tuple(t.lower() for t in triggers),
        keep_head,
        caseless,
        fallback,
        LiteralSet(starts) if starts else None,
    )


def _word_start(literal: str) -> str:
    """`literal` at the start of a word. The boundary is checked by a lookbehind AFTER the literal, so the
    pattern still begins with a literal and the engine can jump between occurrences (25x faster than \\b)."""
    return re.escape(literal) + f"(?<![A-Za-z0-9_]{re.escape(literal)})"


# A value that is not a placeholder: not a mark we already wrote, not a template or shell variable,
# not None/null/true/false. Written for the lower-cased text (caseless rules).
_VALUE = (
    r"(?![\[<${(*])(?!(?:none|null|nil|true|false|undefined)\b)"
    r"(?![\w-]{0,12}?(?i:xxx|\.\.\.)(?!\w))"  # a placeholder written in docs and KB fixes: hf_xxx, sk-...
    r"[^\s'\",;&)}\]，；）。]{3,512}"
)
_QUOTE = r"(?:\\?+['\"])?+"  # an optional quote, JSON-escaped or not
# key/value separator with optional quotes; also the full-width colon (密码：…) and a tab before a quoted
# value (a table of variables: API_KEY<TAB>"…")
_SEP = "(?:" + _QUOTE + r"\s{0,8}+(?:=|:(?!//)|：)\s{0,8}+" + _QUOTE + r"|\t{1,8}+['\"])"
_LIST = r"(?:\[\s{0,8}+['\"])?+"  # vLLM prints some secrets as a list: 'api_key': ['token-abc']


def _words(*words: str) -> str:
    return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w))) + ")"


# Words that end a secret-bearing key (compared lower-cased): HF_TOKEN, db_password, AccountKey, ...
_SECRET_WORDS = (
    "password", "passwd", "passphrase", "secret", "token", "credential", "credentials",
    "apikey", "api_key", "api-key", "accesskey", "access_key", "secretkey", "secret_key",
    "privatekey", "private_key", "accountkey", "account_key", "authkey", "auth_key", "sharedkey",
    "subscription-key", "subscription_key", "subscriptionkey",
    "private_key_id", "client-key-data", "client_key_data",  # GCP service account JSON, kubeconfig
    "密码", "密钥", "口令",  # password, secret key, passphrase (API密钥：…, 密码：…)
)  # fmt: skip
_SECRET_KEY_WORDS = _words(*_SECRET_WORDS)
# Signature-bearing query parameters of presigned / SAS URLs
_URL_CREDENTIAL_WORDS = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
    "sig", "signature", "access_token", "id_token", "refresh_token", "token", "api_key", "apikey", "key",
    "password", "client_secret", "auth", "auth_token", "access_key",
)  # fmt: skip

_RULES: tuple[_Rule, ...] = (
    # --- blocks and structured carriers first, so the token rules below see only what remains ----------
    # (PEM private keys are handled line by line before these rules: _redact_pem_blocks)
    # scheme://user:password@host → keep the user name and host, drop the password (not a mark already
    # written by url-userinfo: "://[REDACTED:url-userinfo]@" must stay as it is when redacted twice)
    _rule(
        "url-password",
        r"(?P<head>://(?!\[REDACTED:)[^\s:/@'\"<>]{0,256}+:)(?P<pw>[^\s/@'\"<>]{1,512})(?=@)",
        ("://",),
        keep_head=True,
    ),
    # a token as the whole user part, e.g. a Sentry DSN https://<key>@o1.ingest.sentry.io/2
    _rule("url-userinfo", r"(?P<head>://)[A-Za-z0-9_.~%-]{16,256}+(?=@)", ("://",), keep_head=True),
    # registry logins: docker login nvcr.io -u '$oauthtoken' -p nvapi-…
    _rule(
        "registry-password",
        r"(?P<head>(?:docker|podman|nerdctl|buildah|skopeo|helm registry|oras) login\b[^\n]{0,200}?"
        r"\s(?:-p|--password)(?:=|\s{1,8}+)['\"]?+)(?![\[<$])[^\s'\"]{1,512}",
        ("login",),
        keep_head=True,
    ),
    # echo PASS | docker login … --password-stdin: the password is the echoed word
    _rule(
        "registry-password",
        r"(?P<head>(?:echo|printf)(?:\s{1,8}+-[a-z]{1,3}+)?\s{1,8}+['\"]?+)(?![\[<$])[^\s'\"|]{1,512}+"
        r"(?=['\"]?+\s{0,8}+\|[^\n]{0,300}?--password-stdin)",
        ("echo", "printf"),
        keep_head=True,
    ),
    # a password given as a short flag: sshpass -p P, redis-cli -a P, mysql -pP / --password=P
    _rule(
        "cli-password",
        r"(?P<head>(?:sshpass\b[^\n]{0,100}?\s-p|redis-cli\b[^\n]{0,100}?\s-a|"
        r"mysql(?:dump|admin)?\b[^\n]{0,100}?\s-p(?=[^\s-]))\s{0,8}+['\"]?+)(?![\[<$])[^\s'\"]{1,512}",
        ("sshpass", "redis-cli", "mysql"),
        keep_head=True,
    ),
    # ~/.netrc: machine HOST login USER password P
    _rule(
        "netrc-password",
        r"(?P<head>machine\s{1,8}+[^\s]{1,256}+\s{1,8}+login\s{1,8}+[^\s]{1,256}+\s{1,8}+password\s{1,8}+)"
        r"(?![\[<$])[^\s]{1,512}",
        ("machine",),
        keep_head=True,
    ),
    # curl -u user:password / --user user:password: keep the user
    _rule(
        "curl-password",
        r"(?P<head>curl\b[^\n]{0,300}?\s(?:-u|--user)(?:=|\s{0,8}+)['\"]?+(?![\[<$])[^\s:'\"]{0,256}+:)"
        r"(?![\[<$])[^\s'\"]{1,512}",
        ("curl",),
        keep_head=True,
    ),
    # legacy NGC key in an error: "invalid apikey <base64>" (no key=value shape, no vendor prefix)
    _rule(
        "api-key",
        r"(?P<head>api[ _-]?key\s{1,8}+)(?=[a-z0-9+/=_-]{0,512}?\d)[a-z0-9+/=_-]{20,512}(?![a-z0-9+/=_-])",
        ("apikey", "api key", "api_key", "api-key"),
        keep_head=True,
        caseless=True,
    ),
    # wandb login [--relogin] [--host=URL] <40 hex>
    _rule(
        "wandb-key",
        r"(?P<head>wandb login(?:\s{1,8}+--?[a-z-]{1,30}+(?:=[^\s]{1,300}+)?){0,4}\s{1,8}+)"
        r"(?![\[<$-])[^\s'\"]{8,256}",
        ("wandb login",),
        keep_head=True,
    ),
    # docker config.json: {"auths": {"nvcr.io": {"auth": "<base64 user:password>"}}}
    _rule("registry-auth", r'(?P<head>"auth"\s{0,8}+:\s{0,8}+")[A-Za-z0-9+/=]{8,4096}', ('"auth"',), keep_head=True),
    _rule(
        "slack-webhook",
        r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{8,256}",
        ("hooks.slack",),
    ),
    # Authorization/Cookie-style headers: keep the header name (and auth scheme), drop the value
    _rule(
        "auth-header",
        r"(?P<head>authorization" + _QUOTE + r"\s{0,8}+[:=]\s{0,8}+['\"]?+"
        r"(?>(?:(?:bearer|basic|token|digest|apikey|key)\s{1,8}+)?))(?![\[<$])[^\s'\",]{1,2048}",
        ("authorization",),
        keep_head=True,
        caseless=True,
    ),
    _rule(
        "auth-header",
        r"(?P<head>(?:api-key|auth-token|cookie)" + _QUOTE + r"\s{0,8}+:\s{0,8}+['\"]?+)"
        r"(?![\[<$])[^\r\n'\"]{1,2048}",
        ("api-key", "auth-token", "cookie"),
        keep_head=True,
        caseless=True,
    ),
    _rule(
        "bearer-token",
        r"(?P<head>bearer\s{1,8}+)(?![\[<$])[a-z0-9._~+/=-]{8,2048}",
        ("bearer",),
        keep_head=True,
        caseless=True,
    ),
    # --- vendor token shapes (prefix + body) --------------------------------------------------------
    _rule("hf-token", _word_start("hf_") + r"[A-Za-z0-9]{30,64}\b", ("hf_",)),
    _rule("hf-token", _word_start("api_org_") + r"[A-Za-z0-9]{30,64}\b", ("api_org_",)),
    _rule("anthropic-key", _word_start("sk-ant-") + r"(?:api|admin|sid)\d{2}-[A-Za-z0-9_-]{20,256}", ("sk-ant-",)),
    _rule("openai-key", _word_start("sk-") + r"(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,256}", ("sk-",)),
    _rule(
        "stripe-key", r"_(?:live|test)_(?<=\b[spr]k_live_|\b[spr]k_test_)[A-Za-z0-9]{16,128}\b", ("_live_", "_test_")
    ),
    _rule("slack-token", _word_start("xox") + r"(?:[abposr]|e\.xox[bp]|e)-[A-Za-z0-9-]{10,256}", ("xox",)),
    _rule("slack-token", _word_start("xapp-") + r"\d-[A-Za-z0-9-]{10,256}", ("xapp-",)),
    _rule("nvidia-api-key", _word_start("nvapi-") + r"[A-Za-z0-9_-]{20,128}", ("nvapi-",)),
    _rule(
        "github-token", _word_start("gh") + r"[pousr]_[A-Za-z0-9]{36,255}\b", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    ),
    _rule("github-token", _word_start("github_pat_") + r"[A-Za-z0-9_]{22,255}\b", ("github_pat_",)),
    _rule(
        "gitlab-token",
        _word_start("gl") + r"(?:pat|dt|rt|ptt|cbt|soat)-[A-Za-z0-9_-]{20,64}\b",
        ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glsoat-"),
    ),
    _rule(
        "aws-access-key",
        _word_start("A") + r"(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|BIA|CCA)[A-Z0-9]{16}\b",
        ("akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "abia", "acca"),
    ),
    _rule("gcp-api-key", _word_start("AIza") + r"[0-9A-Za-z_-]{35}", ("aiza",)),
    _rule("gcp-oauth-token", _word_start("ya29.") + r"[0-9A-Za-z_-]{20,2048}", ("ya29.",)),
    _rule("npm-token", _word_start("npm_") + r"[A-Za-z0-9]{36}\b", ("npm_",)),
    _rule("pypi-token", _word_start("pypi-AgE") + r"[A-Za-z0-9_-]{50,2048}", ("pypi-age",)),
    _rule("docker-token", _word_start("dckr_pat_") + r"[A-Za-z0-9_-]{20,128}", ("dckr_pat_",)),
    _rule("databricks-token", _word_start("dapi") + r"[0-9a-f]{32}(?:-\d)?\b", ("dapi",)),
    _rule("replicate-token", _word_start("r8_") + r"[A-Za-z0-9]{37}\b", ("r8_",)),
    _rule("groq-key", _word_start("gsk_") + r"[A-Za-z0-9]{40,64}\b", ("gsk_",)),
    _rule("sendgrid-key", _word_start("SG.") + r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b", ("sg.",)),
    # bot id (public) stays, the secret after the colon goes; anchored on the literal ":AA" for speed
    _rule(
        "telegram-bot-token",
        r"(?P<head>:)AA(?<=[0-9]{8}:AA)[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])",
        (":aa",),
        keep_head=True,
    ),
    _rule(
        "jwt",
        _word_start("eyJ") + r"[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{0,4096}",
        ("eyj",),
    ),
    # presigned / SAS URLs: signature-bearing query parameters
    _rule(
        "url-credential",
        r"(?P<head>[?&]" + _words(*_URL_CREDENTIAL_WORDS) + r"=)[^\s&#'\"<>]{4,2048}",
        ("?", "&"),
        keep_head=True,
        caseless=True,
        starts=tuple(sep + word + "=" for sep in "?&" for word in _URL_CREDENTIAL_WORDS),
    ),
    # AWS secret access key: 40 base64 characters, recognised by the key name in front
    _rule(
        "aws-secret-key",
        r"(?P<head>(?:aws_?secret_?(?:access_?)?key|secretaccesskey)" + _SEP + r")[a-z0-9/+=]{40}(?![a-z0-9/+=])",
        ("secret",),
        keep_head=True,
        caseless=True,
    ),
    # --- generic: command-line flags and key=value / key: value assignments ----------------------------
    _rule(
        "cli-secret",
        r"(?P<head>--(?:api-key|hf-token|token|password|passwd|secret|access-token|auth-token|client-secret)"
        # --flag=V, --flag V, a container's args list ["--api-key", "V"], YAML args "- --api-key" / "- V"
        r"(?:=|['\"]?+\s{0,8}+,\s{0,8}+|[ \t]{0,8}+\n\s{0,16}+-\s{1,8}+|\s{1,8}+)['\"]?+)" + _VALUE,
        ("--",),
        keep_head=True,
    ),
    _rule(
        "secret-assignment",
        r"(?P<head>" + _SECRET_KEY_WORDS + _SEP + _LIST + ")" + _VALUE,
        ("pass", "secret", "token", "key", "credential", "密码", "密钥", "口令"),
        keep_head=True,
        caseless=True,
        starts=_SECRET_WORDS,
    ),
)


_TRIGGERS = LiteralSet(tuple(t for rule in _RULES for t in rule.triggers))

_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# the key material at the end of a body line, after any log prefix ("(APIServer pid=1) MIIEv…")
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=]{16,}+\s*+$|^\s*+[A-Za-z0-9+/=]{1,15}+\s*+$")
_PEM_FULL_WIDTH = 60  # body lines are 64 (PEM) or 70 (OpenSSH) wide; a shorter one is the last
_PEM_HEADER = re.compile(r"^[\w-]{1,40}: ")  # "Proc-Type: 4,ENCRYPTED" inside an encrypted key
_PEM_MAX_LINES = 400
_LINE_BREAK = re.compile(r"(\r\n?|\n)")  # what distillation counts as a line break


def _redact_pem_blocks(text: str) -> tuple[str, int]:
    """PEM private keys, line by line, so a block survives log prefixes on every line and a paste cut
    off before the END line: the BEGIN line's rest, every body line's key material and the END marker
    become one mark each; prefixes and line breaks stay. Also covers a block written on one line with
    escaped newlines (a JSON log line). Linear: each line is looked at once."""
    if "PRIVATE KEY" not in text:
        return text, 0
    mark = MARK.format(kind="private-key")
    lines = _LINE_BREAK.split(text)  # lines at even indices, their breaks (kept as they are) at odd ones
    count = 0
    body_left = 0  # > 0 while inside a block: how many more body lines may follow
    for i in range(0, len(lines), 2):
        line = lines[i]
        begin = _PEM_BEGIN.search(line) if "PRIVATE KEY" in line else None
        if begin is not None:
            pieces: list[str] = []
            pos = 0
            body_left = 0
            while begin is not None:  # one line may hold several blocks (escaped newlines in JSON)
                pieces += [line[pos : begin.start()], mark]
                count += 1
                end = _PEM_END.search(line, begin.end())
                if end is None:
                    # the block goes on below only when nothing came after BEGIN; otherwise (a one-line
                    # value cut short) the rest of this line was the key
                    rest = line[begin.end() :]
                    body_left = 0 if rest.strip(" \t\"',") else _PEM_MAX_LINES
                    pos = len(line)
                    break
                pos = end.end()
                begin = _PEM_BEGIN.search(line, pos)
            lines[i] = "".join(pieces) + line[pos:]
            continue
        if not body_left:
            continue
        end = _PEM_END.search(line) if "PRIVATE KEY" in line else None
        if end is not None:
            lines[i] = _PEM_BODY.sub("", line[: end.start()]) + mark + line[end.end() :]
            body_left = 0
            continue
        body = _PEM_BODY.search(line)
        if body is not None:
            lines[i] = line[: body.start()] + mark
            body_left = body_left - 1 if len(body.group().strip()) >= _PEM_FULL_WIDTH else 0
        elif not (_PEM_HEADER.search(line.strip()) or not line.strip()):
            body_left = 0  # an ordinary line: the paste was cut inside the block
    return "".join(lines), count


def redact_with_count(text: str) -> tuple[str, int]:
    """Return (redacted text, number of secrets replaced)."""
    if not text:
        return text, 0
    text, total = _redact_pem_blocks(text)
    lowered = text.lower()
    present = _TRIGGERS.present(lowered)
    for rule in _RULES:
        if not present.intersection(rule.triggers):
            continue
        text, n = rule.apply(text, lowered)
        if n:
            total += n
            lowered = text.lower()
            present = _TRIGGERS.present(lowered)  # a mark may add or remove a later rule's trigger
    return text, total


def redact(text: str) -> str:
    """Replace every recognised secret in `text` by `[REDACTED:<kind>]`; keep everything else."""
    return redact_with_count(text)[0]


def kinds() -> list[str]:
    """The secret kinds this module recognises (for docs and tests)."""
    return sorted({r.kind for r in _RULES})
