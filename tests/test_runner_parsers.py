"""Output parsers: recorded tool outputs (healthy and broken) in, facts out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.runner.parsers import REGISTRY, Output, ParseError, parse_prometheus
from bot.runner.parsers.python_probes import arch_supported

FIX = Path(__file__).resolve().parent / "runner_fixtures"
HEALTHY = FIX / "profiles" / "healthy"


def parse(name: str, stdout: str, stderr: str = "", rc: int = 0) -> dict:
    return REGISTRY[name](Output(stdout, stderr, rc))


# --- nvidia-smi ---------------------------------------------------------------------------------------
def test_nvidia_smi_header_new_and_old_layouts():
    facts = parse("nvidia_smi_header", (HEALTHY / "nvidia-smi.txt").read_text())
    assert (facts["driver_version"], facts["cuda_version"], facts["cuda_major"], facts["error"]) == ("570.86.15", "12.8", 12, None)
    old = parse("nvidia_smi_header", (FIX / "profiles" / "driver-too-old" / "nvidia-smi.txt").read_text())
    assert (old["driver_version"], old["cuda_version"], old["cuda_major"]) == ("470.256.02", "11.4", 11)


@pytest.mark.parametrize(
    ("stdout", "rc", "error"),
    [
        ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.133\n", 18,
         "Failed to initialize NVML: Driver/library version mismatch"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running.\n", 9,
         "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running."),
        ("No devices were found\n", 6, "No devices were found"),
    ],
)
def test_nvidia_smi_header_failures_become_the_error_fact(stdout, rc, error):
    facts = parse("nvidia_smi_header", stdout, rc=rc)
    assert facts["error"] == error and facts["driver_version"] is None


def test_nvidia_smi_header_rejects_unknown_output():
    with pytest.raises(ParseError, match="no 'Driver Version"):
        parse("nvidia_smi_header", "something else\n")


def test_nvidia_smi_gpus_counts_and_memory():
    facts = parse("nvidia_smi_gpus", "0, NVIDIA A10G, 00000000:00:1E.0, 23028, 20480, 8.6\n"
                                     "1, NVIDIA A10G, 00000000:00:1F.0, 23028, 3, 8.6\n")
    assert facts["gpu_count"] == 2 and facts["names"] == ["NVIDIA A10G"]
    assert facts["memory_used_mib"] == 20480 and facts["busiest_gpu"] == "GPU0: 20480 of 23028 MiB used"
    assert facts["compute_caps"] == ["8.6", "8.6"]
    bad_field = parse("nvidia_smi_gpus", "", 'Field "compute_cap" is not a valid field to query.\n', rc=2)
    assert "not a valid field" in bad_field["error"]


def test_nvidia_smi_modes_and_throttle():
    modes = parse("nvidia_smi_modes", "0, Disabled, Exclusive_Process, [N/A]\n1, Enabled, Default, Enabled\n")
    assert modes == {"persistence_off": ["GPU0"], "exclusive": ["GPU0 (Exclusive_Process)"],
                     "mig_enabled": ["GPU1"], "gpu_count": 2}
    throttle = parse("nvidia_smi_throttle", "0, 0x0000000000000004, 71\n1, 0x0000000000000048, 91\n2, [N/A], 40\n")
    assert throttle == {"throttled": ["GPU1: HW slowdown, HW thermal slowdown"], "max_temp_c": 91}


def test_nvidia_smi_ecc_sums_volatile_uncorrectable_and_finds_remaps():
    healthy = parse("nvidia_smi_ecc", (HEALTHY / "ecc.txt").read_text())
    assert healthy["gpu_count"] == 2 and healthy["uncorrectable_volatile"] == 0 and not healthy["remap_pending"]
    broken = (HEALTHY / "ecc.txt").read_text().replace("DRAM Uncorrectable            : 0", "DRAM Uncorrectable            : 3", 1)
    broken = broken.replace("        Pending                           : No", "        Pending                           : Yes", 1)
    facts = parse("nvidia_smi_ecc", broken)
    assert facts["uncorrectable_volatile"] == 3 and facts["uncorrectable_aggregate"] == 0
    assert facts["remap_pending"] == ["00000000:18:00.0"]
    old_driver = ("GPU 00000000:00:04.0\n    ECC Mode\n        Current : Enabled\n    ECC Errors\n        Volatile\n"
                  "            Single Bit\n                Total : 5\n            Double Bit\n"
                  "                Device Memory : 2\n                Total : 2\n")
    assert parse("nvidia_smi_ecc", old_driver)["uncorrectable_volatile"] == 2


def test_nvidia_smi_topo_counts_pairs_once():
    facts = parse("nvidia_smi_topo", (HEALTHY / "topo.txt").read_text())
    assert facts == {"gpu_count": 2, "nvlink_pairs": 1, "pcie_pairs": 0, "cross_socket_pairs": 0, "links": ["NV18"]}
    four = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tPIX\tSYS\tSYS\t0-15\t0\nGPU1\tPIX\t X \tSYS\tSYS\t0-15\t0\n"
            "GPU2\tSYS\tSYS\t X \tPIX\t16-31\t1\nGPU3\tSYS\tSYS\tPIX\t X \t16-31\t1\n")
    facts = parse("nvidia_smi_topo", four)
    assert (facts["nvlink_pairs"], facts["pcie_pairs"], facts["cross_socket_pairs"]) == (0, 2, 4)


def test_gpu_apps_classifies_leftover_foreign_missing_and_zombie():
    out = "\n".join([
        "app pid=100 used_mib=70000 name=/usr/bin/python3",
        "proc pid=100 state=S ppid=1", "cmdline pid=100 VLLM::Worker_TP0 ", "cmdline pid=1 /sbin/init ",
        "app pid=200 used_mib=500 name=python",
        "proc pid=200 state=S ppid=150", "cmdline pid=200 python train.py --epochs 3 ", "cmdline pid=150 bash ",
        "app pid=300 used_mib=1200 name=[Not Found]",
        "app pid=400 used_mib=64 name=python3",
        "proc pid=400 state=Z ppid=399", "cmdline pid=400  ",
        "app pid=500 used_mib=60000 name=/usr/bin/python3",
        "proc pid=500 state=S ppid=499", "cmdline pid=500 VLLM::EngineCore ",
        "cmdline pid=499 /opt/venv/bin/python3 /opt/venv/bin/vllm serve Qwen/Qwen3-8B --port 8000 ",
    ])
    facts = parse("gpu_apps", out + "\n")
    assert facts["app_count"] == 5 and facts["used_mib_total"] == 70000 + 500 + 1200 + 64 + 60000
    assert len(facts["leftover"]) == 1 and "pid 100 (VLLM::Worker_TP0)" in facts["leftover"][0]
    assert "parent pid 1: /sbin/init" in facts["leftover"][0]
    assert facts["foreign"] == ["pid 200 (python train.py --epochs 3) holds 500 MiB"]
    assert facts["missing"] == ["pid 300 ([Not Found]) holds 1200 MiB"]
    assert len(facts["zombie"]) == 1 and facts["vllm_count"] == 2


# --- libraries, toolkits --------------------------------------------------------------------------------
def test_ldconfig_and_nvcc():
    facts = parse("ldconfig", (HEALTHY / "ldconfig.txt").read_text())
    assert facts["cudnn"] == ["libcudnn.so.9"] and facts["cudnn_majors"] == ["9"] and facts["libcuda"] is True
    assert facts["nccl"] == ["libnccl.so.2"] and facts["cudart"] == ["libcudart.so.12"]
    none = parse("ldconfig", (FIX / "profiles" / "libcudnn-missing" / "ldconfig.txt").read_text())
    assert none["cudnn"] == [] and none["cudnn_major_count"] == 0
    assert parse("nvcc_version", (HEALTHY / "nvcc.txt").read_text()) == {"release": "12.8", "build": "12.8.93"}


# --- python probes --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("capability", "arch_list", "ok"),
    [
        ("9.0", ["sm_80", "sm_90"], True),
        ("8.6", ["sm_80"], True),  # same major, newer minor runs sm_80 cubins
        ("12.0", ["sm_80", "sm_90", "sm_100"], False),  # Blackwell consumer card on an older wheel
        ("12.0", ["sm_90", "compute_90"], True),  # PTX JIT
        ("9.0", ["sm_90a"], True),
        ("10.0", ["sm_90a"], False),  # arch-specific cubins only run on that exact GPU
        ("7.0", ["sm_75", "sm_80"], False),
    ],
)
def test_arch_supported(capability, arch_list, ok):
    assert arch_supported(capability, arch_list) is ok


def test_torch_probe_facts():
    data = {"python": "/usr/bin/python3", "cuda_visible_devices": "0,3", "torch_version": "2.8.0+cu128",
            "torch_cuda": "12.8", "arch_list": ["sm_80", "sm_90"], "cuda_available": True, "device_count": 1,
            "devices": [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": "12.0"}]}
    facts = parse("torch_probe", "some import noise\n" + json.dumps(data) + "\n")
    assert facts["cvd_count"] == 2 and facts["device_count"] == 1 and facts["cuda_major"] == 12
    assert facts["arch_unsupported"] == ["GPU0 NVIDIA GeForce RTX 5090 (sm_120)"] and facts["min_capability"] == 12.0
    missing = parse("torch_probe", json.dumps({"python": "/x/python", "import_error": "ModuleNotFoundError: No module named 'torch'"}))
    assert missing["installed"] is False
    with pytest.raises(ParseError, match="printed no JSON"):
        parse("torch_probe", "", "Segmentation fault (core dumped)\n", rc=139)


def test_vllm_dist_checks_pins_with_the_hosts_markers():
    env = {"python_version": "3.12", "platform_machine": "aarch64", "sys_platform": "linux", "platform_system": "Linux"}
    data = {"installed": True, "version": "0.11.0", "location": "/v/lib", "executable": "/v/bin/python", "env": env,
            "requires": ["torch==2.8.0", "transformers>=4.56.0", 'xformers==0.0.32; platform_machine == "x86_64"',
                         'tensorizer>=2.9; extra == "tensorizer"', "numba==0.61.2"],
            "versions": {"torch": "2.7.1+cu126", "transformers": "4.57.1", "xformers": None, "tensorizer": None,
                         "numba": None}}
    facts = parse("vllm_dist", json.dumps(data))
    assert facts["conflicts"] == ["torch 2.7.1+cu126 installed, vllm needs torch==2.8.0"]
    assert facts["missing"] == ["numba==0.61.2"]  # xformers is x86_64-only, tensorizer an extra
    assert facts["torch_required"] == "==2.8.0" and facts["requires_count"] == 5


# --- system ---------------------------------------------------------------------------------------------
def test_df_meminfo_disk_free_key_value():
    shm = parse("df", (FIX / "profiles" / "shm-64mb" / "shm.df").read_text())
    assert shm["size_bytes"] == 64 * 2**20 and shm["mount"] == "/dev/shm"
    wrapped = parse("df", "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
                          "/dev/mapper/very--long--volume--group-root\n   102400  51200  51200  50% /\n")
    assert wrapped["avail_bytes"] == 51200 * 1024 and wrapped["used_fraction"] == 0.5
    mem = parse("meminfo", "MemTotal:       16384000 kB\nMemFree: 100 kB\nMemAvailable:    2048000 kB\n"
                           "SwapTotal:       1000 kB\nSwapFree:         250 kB\n")
    assert mem["mem_available_bytes"] == 2048000 * 1024 and mem["swap_used_fraction"] == 0.75
    disk = parse("disk_free", "hf_cache\t/data/hf/hub\t512000 2000000000 /data\t12%\n"
                              "tmp\t/tmp\t40000000 80000000 /\t99%\n")
    assert len(disk["very_low"]) == 1 and "hf_cache /data/hf/hub (0.5 GiB free on /data)" == disk["very_low"][0]
    assert disk["inodes_full"] == ["tmp /tmp (99% inodes used)"] and disk["low"] == []
    kv = parse("key_value", "memlock_kb=unlimited\nib_devices=2\nos=Ubuntu 22.04.4 LTS\n")["kv"]
    assert kv == {"memlock_kb": "unlimited", "ib_devices": 2, "os": "Ubuntu 22.04.4 LTS"}


def test_env_masks_secret_named_values_and_finds_leftovers():
    facts = parse("env", "CUDA_VISIBLE_DEVICES=0,3\nCUDA_LAUNCH_BLOCKING=1\nNCCL_DEBUG=INFO\nNCCL_P2P_DISABLE=1\n"
                         "HF_TOKEN=[REDACTED:hf-token]\nMY_SERVICE_PASSWORD=hunter2hunter2\nHF_HUB_OFFLINE=1\n"
                         "LD_LIBRARY_PATH=/usr/local/cuda/lib64\n  continuation of a multi-line value\n")
    assert facts["cvd"] == "0,3" and facts["cvd_count"] == 2 and facts["cvd_max_index"] == 3
    assert facts["debug_set"] == ["CUDA_LAUNCH_BLOCKING=1", "NCCL_DEBUG=INFO"]
    assert facts["nccl_set"] == ["NCCL_P2P_DISABLE=1"] and facts["hf_offline"] is True
    assert facts["hf_token_set"] is True and facts["hf_token_var"] == "HF_TOKEN"
    assert facts["vars"]["MY_SERVICE_PASSWORD"] == "[masked]" and "hunter2" not in json.dumps(facts)


def test_ss_listen_owner():
    out = ('LISTEN 0      5      127.0.0.1:8000      0.0.0.0:*    users:(("python3",pid=4242,fd=3))\n'
           "cmdline 4242 python3 -m http.server 8000 \n")
    facts = parse("ss_listen", out)
    assert facts["listening"] and facts["owner_visible"] and not facts["owner_is_vllm"]
    assert facts["owners"] == ["pid 4242 (python3 -m http.server 8000)"]
    vllm = parse("ss_listen", 'LISTEN 0 2048 0.0.0.0:8000 0.0.0.0:* users:(("vllm",pid=77,fd=20))\n'
                              "cmdline 77 /opt/v/bin/python3 /opt/v/bin/vllm serve m \n")
    assert vllm["owner_is_vllm"]
    hidden = parse("ss_listen", "LISTEN 0 2048 0.0.0.0:8000 0.0.0.0:*\n")
    assert hidden["listening"] and not hidden["owner_visible"]
    assert parse("ss_listen", "")["listening"] is False


def test_vllm_processes_reads_server_arguments():
    out = ("  4100       1   7260 /opt/v/bin/python3 /opt/v/bin/vllm serve meta-llama/Llama-3.1-8B-Instruct "
           "--tensor-parallel-size 2 --gpu-memory-utilization=0.85 --max-model-len 32768 --enforce-eager\n"
           "  4200    4100   7200 VLLM::EngineCore\n")
    facts = parse("vllm_processes", out)
    assert facts["server_count"] == 1 and facts["helper_count"] == 1
    assert (facts["tp"], facts["gpu_memory_utilization"], facts["max_model_len"], facts["enforce_eager"]) == (2, 0.85, "32768", True)
    assert facts["model"] == "meta-llama/Llama-3.1-8B-Instruct" and facts["port"] == 8000
    assert "up 2h1m" in facts["servers"][0]
    assert parse("vllm_processes", "", rc=1)["server_count"] == 0


# --- HTTP and /metrics ----------------------------------------------------------------------------------
def test_prometheus_text_of_a_busy_vllm_server():
    text = (FIX / "metrics" / "vllm-cpu-busy.txt").read_text()
    samples = parse_prometheus(text)
    info = next(s for s in samples if s.name == "vllm:cache_config_info")
    assert info.labels["note"] == 'a "quoted", {braced} value' and info.labels["block_size"] == "128"
    body = json.dumps({"url": "http://127.0.0.1:8011/metrics", "status": 200, "body": text, "elapsed_ms": 3.1})
    facts = parse("prometheus", body)
    assert facts["kv_cache_usage"] == pytest.approx(0.9712)  # a 0-1 fraction, not a percentage
    assert (facts["waiting"], facts["running"], facts["preemptions"]) == (14, 2, 7)
    assert facts["served_models"] == ["tiny"] and facts["engines"] == ["0"]


def test_prometheus_older_metric_names_and_errors():
    old = "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\nvllm:num_preemptions{model_name=\"m\"} 2\n"
    facts = parse("prometheus", json.dumps({"status": 200, "body": old}))
    assert facts["kv_cache_usage"] == 0.5 and facts["preemptions"] == 2 and facts["waiting"] is None
    down = parse("prometheus", json.dumps({"url": "http://h:1/metrics", "error": "URLError: [Errno 111] Connection refused"}))
    assert down["reachable"] is False and down["kv_cache_usage"] is None
    with pytest.raises(ParseError, match="no vllm: metrics"):
        parse("prometheus", json.dumps({"status": 200, "body": "python_info 1\n"}))


def test_openai_models():
    body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 2048}]})
    facts = parse("openai_models", json.dumps({"status": 200, "body": body}))
    assert facts["models"] == ["tiny"] and facts["max_model_len"] == 2048
    with pytest.raises(ParseError, match="OpenAI model list"):
        parse("openai_models", json.dumps({"status": 200, "body": "<html>"}))


def test_xid_and_dcgm():
    dmesg = ("[  512.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
             "[  600.2] NVRM: Xid (PCI:0000:3b:00): 13, pid=99, Graphics SM Warp Exception\n")
    facts = parse("xid", dmesg)
    assert facts["xids"] == [13, 79] and facts["fatal"] == ["Xid 79 on PCI:0000:3b:00: GPU has fallen off the bus"]
    with pytest.raises(ParseError, match="needs root"):
        parse("xid", "", "dmesg: read kernel buffer failed: Operation not permitted\n", rc=2)
    table = ("| Deployment | |\n| Denylist | Pass |\n| Persistence Mode | Fail |\n| Environment Variables | Warn |\n")
    assert parse("dcgm_diag", table) == {"fails": ["Persistence Mode"], "warns": ["Environment Variables"], "passes": 1}


def test_every_parser_declares_what_it_returns():
    # Parser.__call__ fills undeclared facts with None and asserts none are extra: run each on junk.
    for name, p in REGISTRY.items():
        try:
            facts = p(Output("", "", 0))
        except ParseError:
            continue
        assert set(facts) == p.facts, name
