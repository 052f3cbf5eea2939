"""Secret shapes embedded in real vLLM log lines, and ordinary vLLM content that must survive redaction.

Shared by the entry tests (tests/test_paste.py) and the exit tests (tests/test_secret_exits.py). Secret
values are built at import time from a seeded generator, so this file holds nothing a secret scanner
would flag and the corpus is the same on every run. Each line carries a unique request id
(`chatcmpl-<n>…`): ordinary content that must reach the exit, which proves the line itself got there.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

_rng = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "_-"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Shape:
    name: str
    line: str  # a full log line (or lines) holding the secret
    secret: str
    marker: str  # ordinary text on the same line that must survive


def _jwt() -> str:
    return "eyJ" + rand(30, URLSAFE) + ".eyJ" + rand(60, URLSAFE) + "." + rand(43, URLSAFE)


# (name, template, secret); {s} is the secret, {m} the line's request id
_TEMPLATES: list[tuple[str, str, str]] = [
    # --- the examples of issue 12 ----------------------------------------------------------------
    ("issue: --api-key in the CUDA ordinal line",
     "RuntimeError: CUDA error: invalid device ordinal (cmd: vllm serve Qwen/Qwen2.5-7B-Instruct --api-key {s}) {m}",
     "token-" + rand(18, ALNUM.lower())),
    ("issue: HF_TOKEN inside a JSON log line",
     '{{"level": "error", "msg": "401 Client Error: Unauthorized", "request": "{m}", "env": {{"HF_TOKEN": "{s}"}}}}',
     rand(24)),
    ("issue: HF_TOKEN hf_ shape in JSON",
     '{{"level": "error", "msg": "gated repo", "request": "{m}", "HF_TOKEN": "{s}"}}', "hf_" + rand(34)),
    ("issue: proxy URL password",
     "ERROR 12-01 10:00:01 [download.py:88] ProxyError via https_proxy=http://svc-vllm:{s}@proxy.corp:3128 {m}",
     rand(14)),
    ("issue: Authorization Bearer",
     "ERROR 12-01 10:00:02 [serving_chat.py:12] 401 for request {m} with header Authorization: Bearer {s}",
     rand(40, URLSAFE)),
    ("issue: vLLM non-default args api_key list",
     "INFO 12-01 10:00:03 [utils.py:326] non-default args: {{'model': 'Qwen/Qwen2.5-7B-Instruct', "
     "'api_key': ['{s}'], 'max_model_len': 8192}} ERROR {m}",
     "token-" + rand(20)),
    ("issue: docker login nvcr.io -p nvapi-",
     "ERROR: failed to pull nvcr.io/nvidia/vllm after: docker login nvcr.io -u '$oauthtoken' -p {s} {m}",
     "nvapi-" + rand(64, URLSAFE)),
    ("issue: wandb login 40 hex",
     "ERROR wandb: Network error after `wandb login {s}`, retrying {m}", rand(40, HEX)),
    ("issue: Sentry DSN",
     "ERROR 12-01 10:00:04 [sentry.py:9] failed to send event to https://{s}@o450123.ingest.sentry.io/5501234 {m}",
     rand(32, HEX)),
    # --- vLLM / Hugging Face / model hubs ---------------------------------------------------------
    ("hf token env export", "ERROR: export HF_TOKEN={s} did not help, 401 {m}", "hf_" + rand(37)),
    ("hf token hub env", "ERROR HUGGING_FACE_HUB_TOKEN={s} rejected for meta-llama/Llama-3.1-8B {m}", "hf_" + rand(34)),
    ("hf org token", "OSError: cannot access gated repo with {s} {m}", "api_org_" + rand(34)),
    ("--hf-token flag", "ERROR vllm serve meta-llama/Llama-3.1-8B --hf-token {s} failed {m}", rand(30)),
    ("--api-key= flag", "ValueError: bad value in vllm serve --api-key={s} --port 8000 {m}", rand(26)),
    ("VLLM_API_KEY env", "ERROR 12-01 10:00:05 [launcher.py:1] VLLM_API_KEY={s} set twice {m}", rand(32)),
    ("openai legacy key", "openai.AuthenticationError: Incorrect API key provided: {s} {m}", "sk-" + rand(48)),
    ("openai project key", "ERROR OPENAI_API_KEY={s} invalid {m}", "sk-proj-" + rand(100, URLSAFE)),
    ("anthropic key", "ERROR ANTHROPIC_API_KEY is {s} {m}", "sk-ant-api03-" + rand(90, URLSAFE) + "AA"),
    ("huggingface-cli --token", "ERROR huggingface-cli download --token {s} Qwen/Qwen2-7B failed {m}", "hf_" + rand(36)),
    ("ngc api key env", "ERROR NGC_API_KEY={s} rejected by nvcr.io {m}", "nvapi-" + rand(64, URLSAFE)),
    ("nvapi bare", "ERROR 401 from integrate.api.nvidia.com using {s} {m}", "nvapi-" + rand(64, URLSAFE)),
    ("wandb key env", "ERROR WANDB_API_KEY={s} python -m vllm.entrypoints.openai.api_server {m}", rand(40, HEX)),
    ("wandb login --relogin", "ERROR wandb login --relogin {s} failed {m}", rand(40, HEX)),
    ("replicate token", "ERROR REPLICATE_API_TOKEN {s} {m}", "r8_" + rand(37)),
    ("groq key", "ERROR fallback to groq with {s} failed {m}", "gsk_" + rand(52)),
    # --- clouds and registries -------------------------------------------------------------------
    ("aws access key id", "botocore.exceptions.ClientError: key {s} denied {m}", "AKIA" + rand(16, UPPER_DIGITS)),
    ("aws secret key", "ERROR aws_secret_access_key = {s} for s3://models {m}", rand(40, B64)),
    ("aws secret key json", 'ERROR {{"SecretAccessKey": "{s}", "Region": "us-east-1"}} {m}', rand(40, B64)),
    ("aws session token", "ERROR AWS_SESSION_TOKEN={s} expired {m}", rand(120, B64)),
    ("presigned s3 url", "ERROR GET https://models.s3.amazonaws.com/w.safetensors?X-Amz-Date=20261201T000000Z"
     "&X-Amz-Signature={s} 403 {m}", rand(64, HEX)),
    ("azure sas url", "ERROR https://acct.blob.core.windows.net/w/model.bin?sv=2022-11-02&sig={s} timed out {m}",
     rand(43, B64) + "%3D"),
    ("azure account key", "ERROR DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=x {m}",
     rand(86, B64) + "=="),
    ("azure openai api-key header", "ERROR 401 for {m} with api-key: {s}", rand(32, HEX)),
    ("gcp api key", "ERROR google api key {s} {m}", "AIza" + rand(35, URLSAFE)),
    ("gcp oauth token", "ERROR gcloud token {s} {m}", "ya29." + rand(120, URLSAFE)),
    ("gcp service account private_key_id", 'ERROR {{"private_key": "{s}"}} {m}', rand(40, B64)),
    ("docker hub pat", "ERROR docker login -u ci -p {s} {m}", "dckr_pat_" + rand(27, URLSAFE)),
    ("docker login --password", "ERROR podman login quay.io --password {s} {m}", rand(20)),
    ("docker config auth", 'ERROR {{"auths": {{"nvcr.io": {{"auth": "{s}"}}}}}} {m}', rand(60, B64) + "=="),
    ("github classic token", "ERROR git clone with {s} failed {m}", "ghp_" + rand(36)),
    ("github fine-grained", "ERROR GITHUB_TOKEN {s} in CI {m}", "github_pat_" + rand(22) + "_" + rand(59)),
    ("git https token userinfo", "ERROR git clone https://{s}@github.com/org/model.git failed {m}", rand(40)),
    ("gitlab token", "ERROR pulling weights with {s} {m}", "glpat-" + rand(20, URLSAFE)),
    ("pypi token", "ERROR TWINE_PASSWORD={s} {m}", "pypi-AgEIcHlwaS5vcmc" + rand(60, URLSAFE)),
    ("pip index url password", "ERROR pip install --index-url https://deploy:{s}@pypi.internal/simple vllm {m}", rand(16)),
    ("npm token", "ERROR //registry.npmjs.org/:_authToken={s} {m}", "npm_" + rand(36)),
    ("databricks token", "ERROR DATABRICKS_TOKEN {s} {m}", "dapi" + rand(32, HEX)),
    # --- chat ops and services -------------------------------------------------------------------
    ("slack bot token", "ERROR slack_sdk: invalid_auth for {s} {m}",
     "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24)),
    ("slack app token", "ERROR SocketMode {s} {m}",
     "xapp-1-A" + rand(10, UPPER_DIGITS) + "-" + rand(13, string.digits) + "-" + rand(64, HEX)),
    ("slack webhook", "ERROR alert to https://hooks.slack.com/services/{s} failed {m}",
     "T" + rand(8, UPPER_DIGITS) + "/B" + rand(10, UPPER_DIGITS) + "/" + rand(24)),
    ("slack signing secret", "ERROR SLACK_SIGNING_SECRET={s} {m}", rand(32, HEX)),
    ("stripe live key", "ERROR billing with {s} {m}", "sk_live_" + rand(24)),
    ("sendgrid key", "ERROR mail via {s} {m}", "SG." + rand(22, URLSAFE) + "." + rand(43, URLSAFE)),
    ("telegram bot token", "ERROR bot {s} stopped {m}", rand(10, string.digits) + ":AA" + rand(33, URLSAFE)),
    ("jwt", "ERROR token payload {s} rejected {m}", _jwt()),
    ("basic auth header", "ERROR Authorization: Basic {s} {m}", rand(28, B64) + "=="),
    ("json authorization header", 'ERROR {{"headers": {{"Authorization": "Bearer {s}"}}}} {m}', rand(48, URLSAFE)),
    ("x-api-key header", "ERROR curl -H 'X-API-Key: {s}' http://10.0.0.5:8000/v1/models {m}", rand(40)),
    ("cookie header", "ERROR request {m} sent Cookie: session={s}", rand(40)),
    ("escaped json api_key", 'ERROR {{\\"api_key\\": \\"{s}\\"}} {m}', rand(30)),
    # --- databases, brokers, generic --------------------------------------------------------------
    ("postgres url password", "ERROR psycopg: postgresql://vllm:{s}@db.internal:5432/metrics {m}", "p" + rand(12) + "x"),
    ("redis url password", "ERROR REDIS_URL=redis://:{s}@10.1.2.3:6379/0 {m}", rand(20)),
    ("mongodb srv password", "ERROR mongodb+srv://app:{s}@cluster0.mongodb.net/db {m}", rand(18)),
    ("password assignment", "ERROR password={s} user=admin {m}", rand(14)),
    ("db password yaml", "ERROR   db_password: {s} {m}", rand(18)),
    ("client secret dict", "ERROR {{'model': 'x', 'client_secret': '{s}'}} {m}", rand(24)),
    ("ray dashboard token", "ERROR RAY_AUTH_TOKEN={s} {m}", rand(36)),
    # --- issue 28: shapes that leaked ({a}/{b}: the secret's two halves, split by what is between) ----
    ("issue28: container args list --api-key",
     'ERROR pod vllm-0 CrashLoopBackOff, args: ["--model", "Qwen/Qwen2.5-7B-Instruct", "--api-key", "{s}"] {m}',
     rand(32)),
    ("issue28: container args list --hf-token",
     "ERROR container command: ['vllm', 'serve', 'meta-llama/Llama-3.1-8B', '--hf-token', '{s}'] {m}", rand(30)),
    ("issue28: YAML args --api-key", "ERROR invalid container args {m}:\n  - --api-key\n  - {s}\n  - --port=8000",
     rand(28)),
    ("issue28: GCP private_key_id",
     'ERROR {{"type": "service_account", "private_key_id": "{s}", "client_email": "svc@p.iam.gserviceaccount.com"}}'
     " {m}", rand(40, HEX)),
    ("issue28: curl -u user:pass", "ERROR curl -u admin:{s} http://10.0.0.5:8000/v1/models returned 401 {m}",
     rand(18)),
    ("issue28: curl --user quoted", 'ERROR curl -sS --user "deploy:{s}" https://registry.internal/v2/ {m}', rand(22)),
    ("issue28: echo | docker login --password-stdin",
     "ERROR echo {s} | docker login nvcr.io -u '$oauthtoken' --password-stdin failed {m}", rand(24)),
    ("issue28: echo quoted | podman login --password-stdin",
     'ERROR echo "{s}" | podman login quay.io -u bot --password-stdin {m}', rand(26)),
    ("issue28: echo -n | nerdctl login --password-stdin",
     "ERROR echo -n {s} | sudo nerdctl login harbor.corp --username ci --password-stdin {m}", rand(20)),
    ("issue28: legacy NGC invalid apikey", "Error response from daemon: invalid apikey {s} {m}", rand(84, B64)),
    ("issue28: sshpass -p", "ERROR sshpass -p {s} ssh gpu01 nvidia-smi: Permission denied {m}", rand(16)),
    ("issue28: sshpass -p quoted", "ERROR sshpass -p '{s}' scp model.tar gpu02:/data {m}", rand(16)),
    ("redis-cli -a", "ERROR redis-cli -h 10.1.2.3 -a {s} ping: NOAUTH {m}", rand(20)),
    ("mysql -p", "ERROR mysql -u vllm -p{s} -h db.internal metrics: access denied {m}", rand(16)),
    ("issue28: 密码 ascii colon", "错误：数据库连接失败，密码: {s} {m}", rand(14)),
    ("issue28: 密码 full-width colon", "错误：登录失败 密码：{s} {m}", rand(14)),
    ("issue28: API密钥 full-width colon", "错误：API密钥：{s} 无效 {m}", rand(32)),
    ("口令 assignment", "错误：口令={s} 已过期 {m}", rand(12)),
    ("issue28: API_KEY tab quoted", 'ERROR env dump: API_KEY\t"{s}" {m}', rand(32)),
    ("OPENAI_API_KEY tabs quoted", "ERROR OPENAI_API_KEY\t\t'{s}' {m}", "sk-" + rand(40)),
    ("issue28: wss auth query", "ERROR websocket wss://rt.internal:8443/v1/stream?auth={s}&model=qwen closed {m}",
     rand(40, URLSAFE)),
    ("ws access_key query", "ERROR ws://10.0.0.9:9000/feed?lang=en&access_key={s} refused {m}", rand(32)),
    ("issue28: kubeconfig client-key-data", "ERROR kubeconfig users[0].user: client-key-data: {s} {m}",
     rand(120, B64) + "="),
    ("kubeconfig token", "ERROR kubeconfig users[0].user {m}:\n    token: {s}\n", rand(48, URLSAFE)),
    ("issue28: hf token split by ANSI colour", "ERROR \x1b[31mHF_TOKEN={a}\x1b[0m\x1b[31m{b}\x1b[0m rejected {m}",
     "hf_" + rand(34)),
    ("issue28: password split by ANSI bold", "ERROR password=\x1b[1m{a}\x1b[22m{b} {m}", rand(20)),
    ("token split by C1 CSI", "ERROR VLLM_API_KEY={a}\x9b0m{b} {m}", rand(30)),
    ("issue28: bearer wrapped onto the next line", "ERROR 401 for {m} Authorization: Bearer {a}\n{b} rejected",
     rand(60) + "7"),
    ("issue28: api key wrapped onto the next line", "ERROR {m} VLLM_API_KEY={a}\n{b}", rand(48) + "3"),
    ("netrc password", "ERROR ~/.netrc: machine huggingface.co login hf password {s} {m}", rand(24)),
    ("json camelCase apiKey", 'ERROR {{"apiKey": "{s}", "baseURL": "http://10.0.0.5:8000/v1"}} {m}', rand(32)),
    ("PGPASSWORD env", "ERROR PGPASSWORD={s} psql -h db.internal {m}", rand(18)),
    ("proxy authorization basic", "ERROR Proxy-Authorization: Basic {s} {m}", rand(24, B64) + "=="),
    ("yaml hf_token", "ERROR values.yaml {m}:\n  hf_token: {s}\n", rand(30)),
    ("--client-secret flag", "ERROR oauth2-proxy --client-secret {s} --provider oidc {m}", rand(32)),
    ("minio secret_key", "ERROR minio client secret_key={s} for bucket models {m}", rand(40)),
    ("docker run -e HF_TOKEN", "ERROR docker run -e HF_TOKEN={s} vllm/vllm-openai:latest {m}", rand(30)),
    ("python dict authorization", "ERROR headers={{'authorization': 'Bearer {s}'}} {m}", rand(40)),
    ("key and value coloured apart", "ERROR \x1b[33mAPI_KEY\x1b[0m=\x1b[32m{s}\x1b[0m {m}", rand(32)),
    ("key coloured with C1 CSI", "ERROR \x9b1mpassword\x9b0m: {s} {m}", rand(18)),
    ("echo | helm registry login --password-stdin",
     "ERROR echo '{s}' | helm registry login registry.corp -u ci --password-stdin {m}", rand(22)),
]


def _build() -> list[Shape]:
    shapes = []
    for n, (name, template, secret) in enumerate(_TEMPLATES):
        marker = f"chatcmpl-{n:03d}{rand(13, HEX)}"
        half = len(secret) // 2
        line = template.format(s=secret, m=marker, a=secret[:half], b=secret[half:])
        shapes.append(Shape(name, line, secret, marker))
    return shapes


SHAPES: list[Shape] = _build()

PEM_SECRET_LINES = [rand(64, B64) for _ in range(5)] + [rand(20, B64) + "=="]
PEM_BLOCK = "\n".join([
    "(APIServer pid=1) ERROR 12-01 10:00:09 [ssl.py:7] cannot load key file, its content follows:",
    "(APIServer pid=1) -----BEGIN " + "PRIVATE KEY-----",
    *(f"(APIServer pid=1) {line}" for line in PEM_SECRET_LINES),
    "(APIServer pid=1) -----END " + "PRIVATE KEY-----",
])
PEM_CUT = "\n".join([
    "ERROR 12-01 10:00:10 [ssl.py:9] ssl.SSLError: [SSL] PEM lib, key was:",
    "-----BEGIN RSA " + "PRIVATE KEY-----",
    *PEM_SECRET_LINES[:3],
])

# A real failure at the end, so the engine has a confident match and the LLM step runs.
KV_CACHE_TAIL = (
    "ERROR 12-01 10:00:11 [core.py:708] ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)


def all_secrets() -> list[str]:
    return [s.secret for s in SHAPES] + PEM_SECRET_LINES


def corpus_paste(shapes: list[Shape] | None = None, pad: int = 0) -> str:
    """Every shape (or `shapes`), the PEM blocks, and a known failure at the end: one paste. `pad` adds
    that many characters of ordinary words to each line (a long answer gets cut: the file exit)."""
    filler = (" (while loading shards of the model on rank 0 after profiling)" * (pad // 60 + 1))[:pad]
    lines = [s.line + filler for s in (SHAPES if shapes is None else shapes)]
    return "\n".join([*lines, PEM_BLOCK, PEM_CUT, KV_CACHE_TAIL]) + "\n"


def chunks(size: int = 10) -> list[list[Shape]]:
    """Groups small enough that every line of a group is kept as evidence (distill keeps ≤ 12 roots)."""
    return [SHAPES[i:i + size] for i in range(0, len(SHAPES), size)]


def leaks(text: str) -> list[str]:
    """Secrets (or 12-character pieces of one) found in `text`."""
    found = []
    for secret in all_secrets():
        body = secret.split("-", 1)[1] if secret.startswith(("token-", "nvapi-")) else secret
        pieces = {body[i:i + 12] for i in range(0, max(1, len(body) - 11), 4)} if len(body) >= 12 else {body}
        if any(p in text for p in pieces):
            found.append(secret)
    return found


# Ordinary vLLM content: not credentials, carries diagnostic value, must come through unchanged.
ORDINARY = [
    "Segmentation fault at address 0x7f3a2b1c4d5e (pc 0x00005555deadbeef)",
    "Downloaded model.safetensors sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "ERROR 12-01 10:01:00 [gpu_worker.py:1] GPU-5b8c6a7e-21f3-4d7a-9c0e-1a2b3c4d5e6f fell off the bus",
    "ERROR 12-01 10:01:01 [mig.py:4] MIG-GPU-5b8c6a7e-21f3-4d7a-9c0e-1a2b3c4d5e6f/3/0 not visible",
    "ERROR 12-01 10:01:02 [mig.py:5] CUDA_VISIBLE_DEVICES=MIG-9f0e1d2c-3b4a-5968-7788-99aabbccddee invalid",
    "INFO 12-01 10:01:03 [api_server.py:1] model='meta-llama/Llama-3.1-8B-Instruct', "
    "tokenizer='meta-llama/Llama-3.1-8B-Instruct', revision=None, api_key=None",
    "ERROR 12-01 10:01:04 [serving_chat.py:2] Error in request chatcmpl-3f2a9c1e8b7d4e6fa1b2c3d4e5f60718",
    "ERROR request_id=6ba7b810-9dad-11d1-80b4-00c04fd430c8 aborted (cmpl-550e8400e29b41d4a716446655440000-0)",
    'File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1045, in create_engine_config',
    "OSError: /root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/"
    "a09a35458c702b33eeacc393d103063234e8bc28/config.json not found",
    "commit 1f2e3d4c5b6a79881726354453627180a9b8c7d6 wandb: Run data is saved locally in /tmp/wandb",
    "max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=32768, enable_prefix_caching=True",
    "usage: {'prompt_tokens': 17, 'completion_tokens': 64, 'total_tokens': 81}",
    "vllm serve Qwen/Qwen2.5-7B-Instruct --api-key $VLLM_API_KEY --port 8000 --tensor-parallel-size 2",
    "non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', 'api_key': None, 'served_model_name': ['doctor']}",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.10.0.3<0>",
    "NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2",
    "KV cache key prefix hash 0xa1b2c3d4e5f60718 hit rate 0.42",
    'INFO: 10.0.0.7:52144 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 1.02 GiB is free.",
    "ssh://git@github.com/vllm-project/vllm.git@v0.10.1 resolved to 0123456789abcdef0123456789abcdef01234567",
    "Using the secret sauce: FlashAttention backend; pad_token: <|endoftext|>, eos_token_id=2",
    # issue 28: near the new shapes, but not secrets
    "错误：密码错误，请检查配置；最大令牌数：8192",
    "curl -u $HF_USER:$HF_TOKEN https://huggingface.co/api/whoami-v2 returned 401",
    "echo $NGC_API_KEY | docker login nvcr.io -u '$oauthtoken' --password-stdin",
    "Using API key from environment variable VLLM_API_KEY for 8 requests",
    'args: ["--model", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000", "--api-key-file", "/run/secrets/k"]',
    "kubeconfig clusters[0].cluster: certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=",
    "websocket wss://rt.internal:8443/v1/stream?model=qwen&lang=en closed with 1006",
    "sha256 of the shard at line end 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
]
