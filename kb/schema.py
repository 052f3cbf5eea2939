"""Strict schema of a KB failure case (one YAML file per case).

Every model forbids unknown keys, so a misspelt field is an error naming the field, not a silent no-op.
The authoring guide with an annotated example is docs/kb-authoring.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from kb.rules import Node, RuleError, parse_rule

AREAS = ("memory", "cuda", "install", "model", "distributed", "hardware", "serving", "performance")
Area = Literal["memory", "cuda", "install", "model", "distributed", "hardware", "serving", "performance"]
Severity = Literal["critical", "high", "medium", "low"]
# cause: a root error that explains a failure. symptom: a consequence that points at an earlier root error
# (engine dead, worker died). advisory: a hint or warning (performance, deprecations) that never explains a
# crash on its own. Matching uses the role to keep symptoms and advisories below causes with evidence.
Role = Literal["cause", "symptom", "advisory"]

# Packages a case's `affects` / `fixed_in` may name. vllm, torch, cuda (torch's CUDA build), driver and python
# are read from logs (bot/diagnosis/facts.py) and host checks (bot/diagnosis/versions.py); the others are
# documentation only.
VERSIONED_PACKAGES = (
    "vllm", "torch", "cuda", "driver", "python", "transformers", "triton", "flashinfer", "xformers", "nccl",
)

CASE_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
URL_RE = re.compile(r"^https?://\S+$")
# a function name or a dotted module/attribute name: _verify_quantization, vllm._C, AutoTokenizer.from_pretrained
FRAME_NAME_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def _package(name: str) -> str:
    if name not in VERSIONED_PACKAGES:
        raise ValueError(f"unknown package {name!r}; one of: {', '.join(VERSIONED_PACKAGES)}")
    return name


def _specifier(spec: str) -> str:
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(f"bad version specifier {spec!r} (PEP 440, e.g. '>=0.5.1,<0.6')") from exc
    if not spec.strip():
        raise ValueError("empty version specifier")
    return spec


def _version(text: str) -> str:
    try:
        Version(text)
    except InvalidVersion as exc:
        raise ValueError(f"bad version {text!r} (PEP 440, e.g. '0.6.4'; a range belongs in affects)") from exc
    return text


# Annotated so a bad entry is reported at its own path, e.g. field 'fixed_in.vllm': bad version '0.6.x'.
Package = Annotated[str, AfterValidator(_package)]
VersionSpec = Annotated[str, AfterValidator(_specifier)]
VersionText = Annotated[str, AfterValidator(_version)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


# Named placeholders a fix command may hold, filled from the log's facts by bot/diagnosis/fix_values.py (a value the
# log does not give shows as `<name>`). The `_fit` ones are computed, with the arithmetic shown.
PLACEHOLDERS: dict[str, str] = {
    "model": "the model id or path the log serves",
    "model_dir": "the model's local directory (when the log serves a path)",
    "tp": "the tensor-parallel size the log states",
    "tp_fit": "a tensor-parallel size that divides the attention heads and fits the GPUs",
    "pp": "the pipeline-parallel size the log states",
    "max_model_len": "the max_model_len the log states",
    "max_model_len_fit": "the largest max-model-len the KV cache the log reports holds",
    "gpu_memory_utilization": "the gpu_memory_utilization the log states",
    "gpu_memory_utilization_fit": "the share that fits the weights, activation peak and the KV cache needed",
    "port": "the port the server listens on",
    "dtype": "the dtype the log states",
    "quantization": "the quantization method the log states",
    "kv_cache_dtype": "the KV cache dtype the log states",
    "vllm_version": "the vLLM version the log states",
}
PLACEHOLDER_RE = re.compile(r"\{([a-z][a-z0-9_]*)\}")
# the old spelling of a placeholder: `vllm serve MODEL`, `MODEL_DIR/config.json`
_BARE_PLACEHOLDER = re.compile(r"\b(MODEL|MODEL_DIR)\b")


class FixStep(_Strict):
    text: str = Field(min_length=3)
    # Chinese text of the step (commands stay as they are). Required for bundled cases by `kb lint`;
    # cases added from Slack or the CLI may leave it empty, and the English text is shown instead.
    text_zh: str = ""
    # may hold {placeholders} (PLACEHOLDERS), filled from the log by bot/diagnosis/fix_values.py
    command: str | None = None

    @field_validator("command")
    @classmethod
    def _placeholders_known(cls, v: str | None) -> str | None:
        if v is None:
            return v
        unknown = sorted({name for name in PLACEHOLDER_RE.findall(v) if name not in PLACEHOLDERS})
        if unknown:
            raise ValueError(f"unknown placeholder {', '.join('{' + n + '}' for n in unknown)}; "
                             f"one of: {', '.join('{' + n + '}' for n in PLACEHOLDERS)}")
        bare = _BARE_PLACEHOLDER.search(v)
        if bare:
            raise ValueError(f"write {{{bare.group(1).lower()}}} instead of {bare.group(1)} (filled from the log)")
        return v

    def placeholders(self) -> list[str]:
        """The placeholder names in the command, in order, once each."""
        return list(dict.fromkeys(PLACEHOLDER_RE.findall(self.command or "")))


class FactRule(_Strict):
    """A rule over facts read from the log (kb/rules.py): when it holds, the log proves this case."""

    when: str = Field(min_length=3, description="e.g. gpu_blocks * block_size < max_model_len")
    says: str = Field(min_length=5, description="one line for the evidence, e.g. the KV cache is too small")
    says_zh: str = Field(default="", description="the same line in Chinese (shown to a Chinese asker)")

    @field_validator("when")
    @classmethod
    def _parses(cls, v: str) -> str:
        try:
            parse_rule(v)
        except RuleError as exc:
            raise ValueError(f"bad rule {v!r}: {exc}") from exc
        return v

    def ast(self) -> Node:
        return parse_rule(self.when)


class Example(_Strict):
    source: str = Field(description="URL of the public issue the log was pasted in")
    log: str = Field(min_length=10)

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not URL_RE.match(v):
            raise ValueError(f"not a URL: {v!r}")
        return v


class Case(_Strict):
    id: str
    title: str = Field(min_length=5, max_length=140)
    title_zh: str = Field(min_length=2, max_length=80)
    area: Area
    severity: Severity
    role: Role = "cause"
    signatures: list[str] = Field(min_length=1)
    rules: list[FactRule] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    # Traceback fingerprints: the functions (or dotted module names, e.g. vllm._C) in whose frames this failure
    # is raised, found in the vLLM / torch / transformers source. A paste cut before its exception line still
    # shows them (bot/diagnosis/match.py, docs/kb-authoring.md "Frames").
    frames: list[str] = Field(default_factory=list, max_length=8)
    cause: str = Field(min_length=20)
    # Chinese text (issue: Chinese-speaking teams). Optional in the schema so a new case can be filed from
    # Slack in English; `kb lint` requires them for bundled cases.
    summary_zh: str = ""
    cause_zh: str = ""
    keywords_zh: list[str] = Field(default_factory=list)
    fix: list[FixStep] = Field(min_length=1)
    examples: list[Example] = Field(min_length=2)
    checks: list[str] = Field(default_factory=list)
    # Only with a release note, PR or maintainer's word that says so, cited in references (docs/kb-authoring.md).
    affects: dict[Package, VersionSpec] = Field(default_factory=dict)  # package -> PEP 440 specifier
    fixed_in: dict[Package, VersionText] = Field(default_factory=dict)  # package -> first fixed release
    references: list[str] = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not CASE_ID_RE.match(v):
            raise ValueError("must be lowercase words joined by dashes, e.g. kv-cache-no-memory")
        return v

    @field_validator("signatures")
    @classmethod
    def _regexes_compile(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regex {pattern!r}: {exc}") from exc
            if compiled.search(""):
                raise ValueError(f"regex {pattern!r} matches the empty string")
        return v

    @field_validator("frames")
    @classmethod
    def _frame_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not FRAME_NAME_RE.match(name):
                raise ValueError(f"not a function or dotted module name: {name!r}")
        return v

    @field_validator("references")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if not URL_RE.match(url):
                raise ValueError(f"not a URL: {url!r}")
        return v

    @model_validator(mode="after")
    def _fixed_outside_affected(self) -> Case:
        for package, fixed in self.fixed_in.items():
            spec = self.affects.get(package)
            if spec and SpecifierSet(spec).contains(Version(fixed), prereleases=True):
                raise ValueError(f"fixed_in.{package} {fixed} lies inside affects.{package} {spec!r}")
        return self

    @model_validator(mode="after")
    def _examples_are_referenced(self) -> Case:
        missing = [ex.source for ex in self.examples if ex.source not in self.references]
        if missing:
            raise ValueError(f"example sources missing from references: {missing}")
        return self

    def compiled_signatures(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.signatures]

    def search_text(self) -> str:
        """The text that represents this case for lexical and dense retrieval."""
        parts = [self.title, self.cause, " ".join(self.keywords)]
        parts += [s.text for s in self.fix]
        parts += [_signature_words(p) for p in self.signatures]
        return "\n".join(p for p in parts if p)

    def search_text_zh(self) -> str:
        """The Chinese text of this case (empty parts skipped), for the lexical channel."""
        parts = [self.title_zh, self.summary_zh, self.cause_zh, " ".join(self.keywords_zh)]
        parts += [s.text_zh for s in self.fix]
        return "\n".join(p for p in parts if p)

    def missing_chinese(self) -> list[str]:
        """Chinese fields a bundled case must fill (`kb lint`), by field path."""
        missing = [name for name in ("summary_zh", "cause_zh") if not getattr(self, name)]
        if not self.keywords_zh:
            missing.append("keywords_zh")
        missing += [f"fix.{i}.text_zh" for i, step in enumerate(self.fix) if not step.text_zh]
        return missing


def _signature_words(pattern: str) -> str:
    """Regex → the literal words in it, so signatures also feed BM25 and the embedding."""
    text = re.sub(r"\\[dDsSwWbB]|\(\?[a-zA-Z]+\)|[\\^$.*+?()\[\]{}|]", " ", pattern)
    return re.sub(r"\s+", " ", text).strip()
