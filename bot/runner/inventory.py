"""The host inventory: which names exist, how to reach them, and what each host is expected to run.

Two YAML formats, detected by the top-level key:

Own format (`hosts:` at the top)::

    defaults: {user: ubuntu, python: /opt/vllm/bin/python}   # applied to every host
    hosts:
      gpu01: {address: 10.0.0.11, expected_gpus: 8, endpoint: "http://127.0.0.1:8000"}
      gpu02: {address: 10.0.0.12, proxy_jump: bastion}
    groups:
      a100: [gpu01, gpu02]
      fleet: [a100, gpu03]            # groups may contain groups

Ansible YAML inventory (`all:` at the top): groups with `hosts`, `vars`, `children`; host names may use
ranges (`gpu[01:08]`). Mapped variables: ansible_host, ansible_port, ansible_user,
ansible_ssh_private_key_file, ansible_python_interpreter, ansible_ssh_common_args (`-J x` or
`-o ProxyJump=x`), plus `vllm_doctor_<field>` for the fields below (endpoint, serve_port, expected_gpus,
model_dir, served_model, python, proxy_jump). Other variables are ignored.

Anything not given here is left to ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump), which
asyncssh reads for the host's address (or its name when no address is set).
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import ConfigError, UnknownHost

# Host and group names: the only thing a chat user may type as a target. No shell metacharacters.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ADDRESS_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]+\]?)$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_JUMP_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?"
                      r"(?:,(?:[A-Za-z_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?)*$")
_PYTHON_RE = re.compile(r"^(?:/[A-Za-z0-9._+/-]+|[A-Za-z0-9][A-Za-z0-9._+-]*)$")
_PATH_RE = re.compile(r"^/[^\x00-\x1f]*$")
_RANGE_RE = re.compile(r"\[(?P<start>[0-9]+|[a-z]):(?P<end>[0-9]+|[a-z])\]")
DEFAULT_SERVE_PORT = 8000
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default


class HostSpec(BaseModel):
    """Per-host fields of the own format (also the `defaults:` block). All optional."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    address: str | None = Field(None, description="Host name or IP to connect to; default: the inventory name")
    port: int | None = Field(None, ge=1, le=65535, description="SSH port")
    user: str | None = None
    key: str | None = Field(None, description="Private key file")
    proxy_jump: str | None = Field(None, description="[user@]host[:port] or an ssh_config alias")
    python: str | None = Field(None, description="Python that runs vLLM on the host (absolute path or name)")
    endpoint: str | None = Field(None, description="Base URL of the vLLM server, probed from the host")
    serve_port: int | None = Field(None, ge=1, le=65535, description="Port vLLM should serve on (default 8000)")
    expected_gpus: int | None = Field(None, ge=0, le=256, description="GPUs the host should have; 0 = CPU-only")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Share of each GPU's memory vLLM will take (vLLM's default 0.9)"
    )
    model_dir: str | None = Field(None, description="Model directory to check on the host")
    served_model: str | None = Field(None, description="Model name /v1/models should list")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not _ADDRESS_RE.match(v):
            raise ValueError(f"not a host name or IP address: {v!r}")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not _USER_RE.match(v):
            raise ValueError(f"not a user name: {v!r}")
        return v

    @field_validator("proxy_jump")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        if v is not None and not _JUMP_RE.match(v):
            raise ValueError(f"not [user@]host[:port][,…]: {v!r}")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        if v is not None and not _PYTHON_RE.match(v):
            raise ValueError(f"not an absolute path or program name: {v!r}")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"[\s'\"`$;|&<>\\]", v):
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v.rstrip("/")

    @field_validator("model_dir")
    @classmethod
    def _model_dir(cls, v: str | None) -> str | None:
        if v is not None and not _PATH_RE.match(v):
            raise ValueError(f"not an absolute path: {v!r}")
        return v

    @field_validator("served_model")
    @classmethod
    def _served_model(cls, v: str | None) -> str | None:
        if v is not None and re.search(r"[\x00-\x1f]", v):
            raise ValueError("control characters in the model name")
        return v


class _OwnInventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    defaults: HostSpec = Field(default_factory=HostSpec)
    hosts: dict[str, HostSpec | None]
    groups: dict[str, list[str]] = Field(default_factory=dict)


@dataclass(frozen=True)
class Host:
    name: str
    address: str | None = None
    port: int | None = None
    user: str | None = None
    key: str | None = None
    proxy_jump: str | None = None
    python: str = "python3"
    endpoint: str | None = None
    serve_port: int = DEFAULT_SERVE_PORT
    expected_gpus: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    model_dir: str | None = None
    served_model: str | None = None

    @property
    def connect_to(self) -> str:
        return self.address or self.name

    def facts(self) -> dict[str, Any]:
        """Inventory fields the checks may read as `host:<name>` (and use as command placeholders)."""
        return {"python": self.python, "serve_port": self.serve_port, "endpoint": self.endpoint,
                "model_dir": self.model_dir, "served_model": self.served_model,
                "expected_gpus": self.expected_gpus, "gpu_memory_utilization": self.gpu_memory_utilization}


def host_from_spec(name: str, spec: HostSpec) -> Host:
    serve_port = spec.serve_port
    if serve_port is None and spec.endpoint:
        serve_port = urlsplit(spec.endpoint).port
    return Host(
        name=name, address=spec.address, port=spec.port, user=spec.user,
        key=str(Path(spec.key).expanduser()) if spec.key else None, proxy_jump=spec.proxy_jump,
        python=spec.python or "python3", endpoint=spec.endpoint, serve_port=serve_port or DEFAULT_SERVE_PORT,
        expected_gpus=spec.expected_gpus, model_dir=spec.model_dir, served_model=spec.served_model,
        gpu_memory_utilization=spec.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
    )  # fmt: skip


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group -> host names, expanded
    source: str = ""

    def names(self) -> list[str]:
        return sorted(self.hosts) + sorted(self.groups)

    def resolve(self, name: str) -> list[Host]:
        """A host name or group name -> hosts (inventory order). UnknownHost for anything else."""
        if name in self.hosts:
            return [self.hosts[name]]
        if name in self.groups:
            return [self.hosts[h] for h in self.groups[name]]
        close = difflib.get_close_matches(name, [*self.hosts, *self.groups], n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UnknownHost(f"'{name}' is not a host or group in the inventory{hint}")


def _format(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown field (misspelt?)" if err["type"] == "extra_forbidden" else err["msg"]
        out.append(f"field '{where}': {msg}")
    return out


def _check_name(path: str, kind: str, name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(f"{path}: {kind} name {name!r} must be letters, digits, '.', '_' or '-' "
                          "(starting with a letter or digit)")
    return name


def _load_own(path: str, data: dict[str, Any]) -> Inventory:
    try:
        parsed = _OwnInventory.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: " + "; ".join(_format(exc))) from exc
    hosts: dict[str, Host] = {}
    defaults = parsed.defaults.model_dump(exclude_none=True)
    for name, spec in parsed.hosts.items():
        _check_name(path, "host", name)
        merged = {**defaults, **(spec.model_dump(exclude_none=True) if spec else {})}
        hosts[name] = host_from_spec(name, HostSpec.model_validate(merged))
    raw_groups: dict[str, list[str]] = {}
    for group, members in parsed.groups.items():
        _check_name(path, "group", group)
        if group in hosts:
            raise ConfigError(f"{path}: field 'groups.{group}': a host has the same name")
        raw_groups[group] = members
    return Inventory(hosts, _expand_groups(path, raw_groups, hosts), path)


def _expand_groups(path: str, raw: dict[str, list[str]], hosts: dict[str, Host]) -> dict[str, tuple[str, ...]]:
    expanded: dict[str, tuple[str, ...]] = {}

    def members(group: str, trail: tuple[str, ...]) -> list[str]:
        if group in trail:
            raise ConfigError(f"{path}: field 'groups.{group}': groups contain each other ({' -> '.join(trail + (group,))})")
        out: list[str] = []
        for member in raw[group]:
            if member in hosts:
                names = [member]
            elif member in raw:
                names = members(member, trail + (group,))
            else:
                raise ConfigError(f"{path}: field 'groups.{group}': {member!r} is neither a host nor a group")
            out += [n for n in names if n not in out]
        return out

    for group in raw:
        expanded[group] = tuple(members(group, ()))
    return expanded


# --- Ansible YAML inventory -------------------------------------------------------------------------
_ANSIBLE_VARS = {
    "ansible_host": "address", "ansible_port": "port", "ansible_user": "user",
    "ansible_ssh_private_key_file": "key", "ansible_python_interpreter": "python",
}  # fmt: skip
_EXTRA_PREFIX = "vllm_doctor_"
_EXTRA_FIELDS = ("endpoint", "serve_port", "expected_gpus", "gpu_memory_utilization", "model_dir", "served_model", "python", "proxy_jump",
                 "address", "port", "user", "key")


def expand_host_pattern(pattern: str) -> list[str]:
    """Ansible host ranges: `gpu[01:04]` -> gpu01…gpu04 (zero padding kept), `node-[a:c]` -> a, b, c."""
    m = _RANGE_RE.search(pattern)
    if not m:
        return [pattern]
    start, end = m["start"], m["end"]
    if start.isdigit() and end.isdigit():
        width = len(start) if start.startswith("0") else 0
        items = [str(i).zfill(width) for i in range(int(start), int(end) + 1)]
    elif start.isalpha() and end.isalpha():
        items = [chr(c) for c in range(ord(start), ord(end) + 1)]
    else:
        raise ValueError(f"bad host range in {pattern!r}")
    out = []
    for item in items:
        out += expand_host_pattern(pattern[: m.start()] + item + pattern[m.end() :])
    return out


def _proxy_jump_from_args(args: str) -> str | None:
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "-J" and i + 1 < len(words):
            return words[i + 1]
        if word == "-o" and i + 1 < len(words):
            key, _, value = words[i + 1].replace("=", " ", 1).partition(" ")
            if key.lower() == "proxyjump":
                return value.strip()
        if word.startswith("-oProxyJump="):
            return word.split("=", 1)[1]
    return None


def _ansible_fields(variables: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for var, name in _ANSIBLE_VARS.items():
        if variables.get(var) is not None:
            fields[name] = variables[var]
    if isinstance(variables.get("ansible_ssh_common_args"), str):
        jump = _proxy_jump_from_args(variables["ansible_ssh_common_args"])
        if jump:
            fields["proxy_jump"] = jump
    for name in _EXTRA_FIELDS:
        if variables.get(_EXTRA_PREFIX + name) is not None:
            fields[name] = variables[_EXTRA_PREFIX + name]
    if "python" in fields and "{{" in str(fields["python"]):
        del fields["python"]  # a Jinja expression we cannot evaluate: fall back to the default
    return fields


def _load_ansible(path: str, data: dict[str, Any]) -> Inventory:
    # (depth, group) -> vars; host -> [(depth, group)], host -> own vars
    group_vars: dict[str, tuple[int, dict[str, Any]]] = {}
    host_groups: dict[str, list[str]] = {}
    host_vars: dict[str, dict[str, Any]] = {}
    group_hosts: dict[str, list[str]] = {}
    group_children: dict[str, list[str]] = {}

    def walk(group: str, body: Any, depth: int, where: str) -> None:
        _check_name(path, "group", group)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: field '{where}': a group must be a mapping of hosts/vars/children")
        unknown = set(body) - {"hosts", "vars", "children"}
        if unknown:
            raise ConfigError(f"{path}: field '{where}.{sorted(unknown)[0]}': unknown field (misspelt?)")
        variables = body.get("vars") or {}
        if not isinstance(variables, dict):
            raise ConfigError(f"{path}: field '{where}.vars': must be a mapping")
        previous = group_vars.get(group)
        group_vars[group] = (max(depth, previous[0]) if previous else depth,
                             {**(previous[1] if previous else {}), **variables})
        hosts = body.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise ConfigError(f"{path}: field '{where}.hosts': must be a mapping of host names")
        for pattern, hvars in hosts.items():
            try:
                names = expand_host_pattern(str(pattern))
            except ValueError as exc:
                raise ConfigError(f"{path}: field '{where}.hosts': {exc}") from exc
            for name in names:
                _check_name(path, "host", name)
                if hvars is not None and not isinstance(hvars, dict):
                    raise ConfigError(f"{path}: field '{where}.hosts.{name}': host vars must be a mapping")
                host_vars[name] = {**host_vars.get(name, {}), **(hvars or {})}
                host_groups.setdefault(name, [])
                if group not in host_groups[name]:
                    host_groups[name].append(group)
                group_hosts.setdefault(group, [])
                if name not in group_hosts[group]:
                    group_hosts[group].append(name)
        children = body.get("children") or {}
        if not isinstance(children, dict):
            raise ConfigError(f"{path}: field '{where}.children': must be a mapping of groups")
        for child, child_body in children.items():
            group_children.setdefault(group, [])
            if child not in group_children[group]:
                group_children[group].append(child)
            walk(str(child), child_body, depth + 1, f"{where}.children.{child}")

    extra = set(data) - {"all"}
    if extra:
        raise ConfigError(f"{path}: Ansible inventory: top-level groups must sit under `all` "
                          f"(found {sorted(extra)[0]!r} beside it)")
    walk("all", data["all"], 0, "all")

    def ancestors(group: str) -> list[str]:
        out = []
        for parent, kids in group_children.items():
            if group in kids:
                out += [parent, *ancestors(parent)]
        return out

    hosts: dict[str, Host] = {}
    for name, own_groups in host_groups.items():
        involved = set()
        for g in own_groups:
            involved |= {g, *ancestors(g)}
        involved.add("all")
        ordered = sorted(involved, key=lambda g: (group_vars.get(g, (0, {}))[0], g))
        merged: dict[str, Any] = {}
        for g in ordered:
            merged.update(group_vars.get(g, (0, {}))[1])
        merged.update(host_vars.get(name, {}))
        try:
            spec = HostSpec.model_validate(_ansible_fields(merged))
        except ValidationError as exc:
            raise ConfigError(f"{path}: host {name}: " + "; ".join(_format(exc))) from exc
        hosts[name] = host_from_spec(name, spec)

    groups: dict[str, tuple[str, ...]] = {}

    def members(group: str, trail: tuple[str, ...]) -> list[str]:
        if group in trail:
            raise ConfigError(f"{path}: group {group} contains itself ({' -> '.join(trail + (group,))})")
        out = list(group_hosts.get(group, []))
        for child in group_children.get(group, []):
            out += [h for h in members(child, trail + (group,)) if h not in out]
        return out

    for group in group_vars:
        if group in hosts:
            raise ConfigError(f"{path}: {group!r} is both a group and a host")
        groups[group] = tuple(members(group, ()))
    groups["all"] = tuple(hosts)
    groups["ungrouped"] = tuple(h for h, gs in host_groups.items() if gs == ["all"] or gs == ["ungrouped"])
    return Inventory(hosts, groups, path)


def load_inventory(path: Path | str) -> Inventory:
    """Parse an inventory file (own or Ansible YAML format). ConfigError names the file and field."""
    path = Path(path).expanduser()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"inventory {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"inventory {path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"inventory {path}: top level must be a mapping (`hosts:` or Ansible's `all:`)")
    if "all" in data:
        return _load_ansible(str(path), data)
    if "hosts" in data:
        return _load_own(str(path), data)
    raise ConfigError(f"inventory {path}: expected `hosts:` (own format) or `all:` (Ansible YAML inventory)")
