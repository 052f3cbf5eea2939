"""Inventory files: the own format and the Ansible YAML inventory subset."""

from __future__ import annotations

import textwrap

import pytest

from bot.errors import ConfigError, UnknownHost
from bot.runner.inventory import expand_host_pattern, load_inventory


def write(tmp_path, text: str):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_own_format_defaults_groups_and_extras(tmp_path):
    inv = load_inventory(write(tmp_path, """\
        defaults: {user: ubuntu, python: /opt/vllm/bin/python, expected_gpus: 8}
        hosts:
          gpu01: {address: 10.0.0.11, endpoint: "http://127.0.0.1:8001/", served_model: llama}
          gpu02: {address: 10.0.0.12, proxy_jump: bastion, expected_gpus: 4, key: ~/.ssh/fleet}
          gpu03:
        groups:
          a100: [gpu01, gpu02]
          fleet: [a100, gpu03, gpu01]
        """))
    gpu01, gpu02, gpu03 = (inv.hosts[n] for n in ("gpu01", "gpu02", "gpu03"))
    assert (gpu01.address, gpu01.user, gpu01.python, gpu01.expected_gpus) == ("10.0.0.11", "ubuntu", "/opt/vllm/bin/python", 8)
    assert gpu01.endpoint == "http://127.0.0.1:8001" and gpu01.serve_port == 8001  # port taken from the endpoint
    assert gpu02.expected_gpus == 4 and gpu02.proxy_jump == "bastion" and gpu02.key.endswith("/.ssh/fleet")
    assert gpu03.connect_to == "gpu03" and gpu03.serve_port == 8000
    assert [h.name for h in inv.resolve("fleet")] == ["gpu01", "gpu02", "gpu03"]
    assert [h.name for h in inv.resolve("gpu02")] == ["gpu02"]
    with pytest.raises(UnknownHost, match="'gpu99' is not a host or group"):
        inv.resolve("gpu99")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts: {gpu01: {adress: x}}", "field 'hosts.gpu01.adress': unknown field"),
        ("hosts: {gpu01: {python: 'python; rm -rf /'}}", "field 'hosts.gpu01.python'"),
        ("hosts: {gpu01: {endpoint: 'http://h:8000/$(id)'}}", "not an http(s) URL"),
        ("hosts: {'gpu 01': {}}", "host name 'gpu 01' must be letters"),
        ("hosts: {gpu01: {}}\ngroups: {g: [gpu01, nope]}", "'nope' is neither a host nor a group"),
        ("hosts: {gpu01: {}}\ngroups: {a: [b], b: [a]}", "groups contain each other"),
        ("hosts: {gpu01: {port: 70000}}", "field 'hosts.gpu01.port'"),
        ("nodes: {}", "expected `hosts:`"),
        ("hosts: [", "invalid YAML"),
    ],
)
def test_own_format_errors_name_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_ansible_yaml_inventory(tmp_path):
    inv = load_inventory(write(tmp_path, """\
        all:
          vars:
            ansible_user: ops
            ansible_python_interpreter: /usr/bin/python3
          hosts:
            bastion: {ansible_host: 203.0.113.5}
          children:
            gpu:
              vars:
                ansible_ssh_common_args: "-o ProxyJump=ops@bastion:2222 -o StrictHostKeyChecking=yes"
                vllm_doctor_python: /opt/vllm/bin/python
                vllm_doctor_expected_gpus: 8
              children:
                h100:
                  hosts:
                    gpu[01:03]:
                      ansible_port: 2200
                  vars:
                    vllm_doctor_endpoint: "http://127.0.0.1:8000"
                a10:
                  hosts:
                    gpu04:
                      ansible_host: 10.1.0.4
                      ansible_ssh_private_key_file: /keys/a10
                      vllm_doctor_expected_gpus: 1
                      ansible_ssh_common_args: "-J jump2"
        """))
    assert sorted(inv.hosts) == ["bastion", "gpu01", "gpu02", "gpu03", "gpu04"]
    gpu02 = inv.hosts["gpu02"]
    assert (gpu02.user, gpu02.port, gpu02.python, gpu02.expected_gpus) == ("ops", 2200, "/opt/vllm/bin/python", 8)
    assert gpu02.proxy_jump == "ops@bastion:2222" and gpu02.endpoint == "http://127.0.0.1:8000"
    gpu04 = inv.hosts["gpu04"]
    assert (gpu04.address, gpu04.key, gpu04.expected_gpus, gpu04.proxy_jump) == ("10.1.0.4", "/keys/a10", 1, "jump2")
    assert inv.hosts["bastion"].python == "/usr/bin/python3" and inv.hosts["bastion"].proxy_jump is None
    assert [h.name for h in inv.resolve("gpu")] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert [h.name for h in inv.resolve("h100")] == ["gpu01", "gpu02", "gpu03"]
    assert [h.name for h in inv.resolve("ungrouped")] == ["bastion"]
    assert len(inv.resolve("all")) == 5


def test_ansible_errors(tmp_path):
    with pytest.raises(ConfigError, match="must sit under `all`"):
        load_inventory(write(tmp_path, "all: {}\ngpu: {hosts: {a: {}}}\n"))
    with pytest.raises(ConfigError, match=r"field 'all.children.gpu.hostz': unknown field"):
        load_inventory(write(tmp_path, "all: {children: {gpu: {hostz: {a: {}}}}}\n"))
    with pytest.raises(ConfigError, match=r"host gpu01: field 'port'"):
        load_inventory(write(tmp_path, "all: {hosts: {gpu01: {ansible_port: notaport}}}\n"))


def test_host_ranges():
    assert expand_host_pattern("gpu[01:03].dc1") == ["gpu01.dc1", "gpu02.dc1", "gpu03.dc1"]
    assert expand_host_pattern("node-[a:c]") == ["node-a", "node-b", "node-c"]
    assert expand_host_pattern("r[1:2]n[8:9]") == ["r1n8", "r1n9", "r2n8", "r2n9"]
