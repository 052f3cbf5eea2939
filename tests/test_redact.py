"""The shared redaction: every secret shape disappears, the words around it stay, ordinary log lines
pass through unchanged, and large or hostile input stays linear-time.

Secret-looking values are assembled at run time from a seeded generator, so this file holds no string a
secret scanner would flag and the corpus is the same on every run.
"""

from __future__ import annotations

import random
import string

import pytest

from bot.diagnosis.redact import redact, redact_with_count

_rng = random.Random(20261129)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "_-"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def jwt() -> str:
    return "eyJ" + rand(30, URLSAFE) + ".eyJ" + rand(60, URLSAFE) + "." + rand(43, URLSAFE)


PEM = (
    "-----BEGIN "
    + "RSA PRIVATE KEY-----\n"
    + "\n".join(rand(64, B64) for _ in range(5))
    + "\n-----END RSA "
    + "PRIVATE KEY-----"
)
OPENSSH = (
    "-----BEGIN OPENSSH "
    + "PRIVATE KEY-----\n"
    + "\n".join(rand(70, B64) for _ in range(4))
    + "\n-----END OPENSSH "
    + "PRIVATE KEY-----"
)

# (name, template with {s} where the secret goes, secret). The template is the surrounding text that
# must survive; the secret must be gone.
CORPUS: list[tuple[str, str, str]] = [
    ("hf token in env", "export HF_TOKEN={s} && vllm serve meta-llama/Llama-3-8B", "hf_" + rand(34)),
    ("hf token in traceback", "401 Client Error for url with token {s} (Unauthorized)", "hf_" + rand(37)),
    ("hf org token", "using {s} for the org mirror", "api_org_" + rand(34)),
    ("openai legacy key", "client = OpenAI(base_url=url) # key {s}", "sk-" + rand(48)),
    ("openai project key", "OPENAI_API_KEY={s}", "sk-proj-" + rand(120, URLSAFE)),
    ("openai service account", "using key {s} for batch jobs", "sk-svcacct-" + rand(60, URLSAFE)),
    ("anthropic key", "ANTHROPIC_API_KEY is {s} now", "sk-ant-api03-" + rand(93, URLSAFE) + "AA"),
    (
        "slack bot token",
        "slack token: {s} (bot)",
        "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24),
    ),
    (
        "slack user token",
        "posting as {s} failed",
        "xoxp-"
        + rand(12, string.digits)
        + "-"
        + rand(12, string.digits)
        + "-"
        + rand(13, string.digits)
        + "-"
        + rand(32, HEX),
    ),
    (
        "slack app token",
        "SocketMode with {s} connected",
        "xapp-1-A" + rand(10, UPPER_DIGITS) + "-" + rand(13, string.digits) + "-" + rand(64, HEX),
    ),
    ("slack refresh token", "rotating {s} tonight", "xoxe.xoxp-1-" + rand(150, ALNUM)),
    (
        "slack webhook",
        "alert sent to {s} ok",
        "https://hooks.slack.com/services/T" + rand(8, UPPER_DIGITS) + "/B" + rand(10, UPPER_DIGITS) + "/" + rand(24),
    ),
    ("aws access key id", "aws_access_key_id = {s}", "AKIA" + rand(16, UPPER_DIGITS)),
    ("aws session key id", "credentials {s} expired", "ASIA" + rand(16, UPPER_DIGITS)),
    ("aws secret key", "aws_secret_access_key = {s}", rand(40, B64)),
    ("aws secret key json", '{"SecretAccessKey": "{s}", "Region": "us-east-1"}', rand(40, B64)),
    ("github classic token", "git clone with {s} failed", "ghp_" + rand(36)),
    ("github oauth token", "token {s} revoked", "gho_" + rand(36)),
    ("github fine-grained", "GITHUB_TOKEN {s} in CI", "github_pat_" + rand(22) + "_" + rand(59)),
    ("gitlab token", "pulling weights with {s} from gitlab", "glpat-" + rand(20, URLSAFE)),
    ("gcp api key", "maps key {s} in config", "AIza" + rand(35, URLSAFE)),
    ("gcp oauth token", "gcloud printed {s} to stderr", "ya29." + rand(120, URLSAFE)),
    (
        "bearer header",
        "curl -H 'Authorization: Bearer {s}' http://10.0.0.5:8000/v1/models",
        rand(40, URLSAFE),
    ),
    ("bearer in text", "request with bearer {s} was rejected", rand(32, URLSAFE)),
    ("basic auth header", "Authorization: Basic {s}", rand(28, B64) + "=="),
    ("x-api-key header", "x-api-key: {s}", rand(40)),
    ("cookie header", "Cookie: {s}", "session=" + rand(40) + "; csrftoken=" + rand(32)),
    ("jwt bare", "token payload {s} end", jwt()),
    (
        "password in https url",
        "pip install --index-url https://deploy:{s}@pypi.internal.example/simple vllm",
        rand(16),
    ),
    ("password in redis url", "REDIS_URL=redis://:{s}@10.1.2.3:6379/0", rand(20)),
    ("password in postgres url", "postgresql://vllm:{s}@db.internal:5432/metrics", "p" + rand(12) + "!x"),
    ("password assignment", "password={s} user=admin", rand(14)),
    ("db password yaml", "  db_password: {s}\n  db_user: vllm", rand(18)),
    ("token assignment", "token={s}", rand(30, HEX)),
    ("api key assignment", "api_key: '{s}'", rand(32)),
    ("wandb key env", "WANDB_API_KEY={s} python train.py", rand(40, HEX)),
    ("python dict secret", "{'model': 'x', 'client_secret': '{s}'}", rand(24)),
    ("vllm --api-key flag", "vllm serve Qwen/Qwen2.5-7B --api-key {s} --port 8000", rand(24)),
    ("hf-token flag", "huggingface-cli download --token {s} org/model", "tok" + rand(20)),
    (
        "presigned s3 url",
        "GET https://bucket.s3.amazonaws.com/w.bin?X-Amz-Date=20261129T000000Z&X-Amz-Signature={s} 403",
        rand(64, HEX),
    ),
    (
        "azure sas url",
        "https://acct.blob.core.windows.net/c/w.bin?sv=2022-11-02&sig={s} timed out",
        rand(43, B64) + "%3D",
    ),
    (
        "azure account key",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net",
        rand(86, B64) + "==",
    ),
    ("stripe live key", "billing uses {s}", "sk_live_" + rand(24)),
    ("npm token", "//registry.npmjs.org/:_authToken={s}", "npm_" + rand(36)),
    ("pypi token", "TWINE_PASSWORD={s}", "pypi-AgEIcHlwaS5vcmc" + rand(60, URLSAFE)),
    ("docker hub pat", "docker login -p {s}", "dckr_pat_" + rand(27, URLSAFE)),
    ("databricks token", "DATABRICKS_HOST=x {s}", "dapi" + rand(32, HEX)),
    ("replicate token", "REPLICATE {s}", "r8_" + rand(37)),
    ("groq key", "GROQ {s}", "gsk_" + rand(52)),
    ("sendgrid key", "mail via {s}", "SG." + rand(22, URLSAFE) + "." + rand(43, URLSAFE)),
    ("telegram bot token", "bot {s} started", rand(10, string.digits) + ":AA" + rand(33, URLSAFE)),
    ("rsa private key", "key file:\n{s}\nend of file", PEM),
    ("openssh private key", "id_ed25519 contents:\n{s}\n", OPENSSH),
    (
        "truncated private key",
        "pasted:\n{s}",
        "-----BEGIN " + "PRIVATE KEY-----\n" + rand(64, B64) + "\n" + rand(40, B64),
    ),
    ("sentry dsn", "export SENTRY_DSN=https://{s}@o1.ingest.sentry.io/2", rand(32, HEX)),
    ("wandb login", "$ wandb login --relogin {s}", rand(40, HEX)),
    ("docker config auth", '{"auths": {"nvcr.io": {"auth": "{s}"}}}', rand(48, B64)),
    ("nvidia api key", "NGC key is {s} (keep it safe)", "nvapi-" + rand(64, URLSAFE)),
    # issue 28
    ("echo | docker login --password-stdin", "echo {s} | docker login nvcr.io -u x --password-stdin", rand(24)),
    ("sshpass", "sshpass -p {s} ssh gpu01", rand(16)),
    ("netrc", "machine huggingface.co login hf password {s}", rand(24)),
    ("curl -u", "curl -u admin:{s} http://10.0.0.5:8000/v1/models", rand(18)),
    ("legacy ngc apikey", "invalid apikey {s}", rand(84, B64)),
    ("redis-cli -a", "redis-cli -h 10.1.2.3 -a {s} ping", rand(20)),
]


@pytest.mark.parametrize(("name", "template", "secret"), CORPUS, ids=[c[0] for c in CORPUS])
def test_secret_is_removed_and_context_kept(name, template, secret):
    text = template.replace("{s}", secret)
    out, count = redact_with_count(text)
    assert secret not in out, out
    assert count >= 1
    assert "[REDACTED:" in out
    # every piece of surrounding text survives (the template split at the secret)
    before, after = template.split("{s}")
    for piece in (before, after):
        for word in piece.split():
            # a header value or cookie takes the rest of its line, so only check words outside it
            if name in {"cookie header"}:
                continue
            assert word.strip("'\"{}:,;&") in out or not word.strip("'\"{}:,;&"), (word, out)


def test_corpus_is_large_and_distinct():
    assert len(CORPUS) >= 30
    assert len({c[0] for c in CORPUS}) == len(CORPUS)


def test_no_secret_fragment_survives():
    """No 12-character run of any secret body remains anywhere in the redacted corpus."""
    joined = "\n".join(t.replace("{s}", s) for _, t, s in CORPUS)
    out = redact(joined)
    for _, _, secret in CORPUS:
        body = secret.split("\n")[1] if secret.startswith("-----") else secret
        for i in range(0, max(1, len(body) - 12), 6):
            frag = body[i : i + 12]
            if len(frag) == 12 and not frag.startswith(("https://hooks", "session=", "-----", "pypi-AgEIcHlwa")):
                assert frag not in out, (frag, secret)


def test_key_names_hosts_and_users_are_kept():
    out = redact("postgresql://vllm:hunter2hunter2@db.internal:5432/metrics HF_TOKEN=hf_" + rand(34))
    assert out.startswith("postgresql://vllm:[REDACTED:url-password]@db.internal:5432/metrics ")
    assert "HF_TOKEN=[REDACTED:" in out


NEGATIVES = [
    "INFO 11-29 10:11:03 [gpu_model_runner.py:1234] Model loading took 14.99 GiB and 12.3 seconds",
    "ERROR 11-29 10:11:03 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free.",
    "Segmentation fault at address 0x7f3a2b1c4d5e (pc 0x00005555deadbeef)",
    "Downloaded model.safetensors sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "blob sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 verified",
    "Received request chatcmpl-3f2a9c1e8b7d4e6fa1b2c3d4e5f60718: prompt: 'hi'",
    "request_id=6ba7b810-9dad-11d1-80b4-00c04fd430c8 finished in 1.2 s",
    "Trace 550e8400-e29b-41d4-a716-446655440000 in cmpl-550e8400e29b41d4a716446655440000-0",
    "CUDA Version: 12.4  Driver Version: 550.54.15  torch 2.5.1+cu124 vllm 0.6.4.post1",
    "NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2",
    "max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=32768, enable_prefix_caching=True",
    "usage: {prompt_tokens: 17, completion_tokens: 64, total_tokens: 81}",
    "tokenizer='/models/Qwen2.5-7B', tokenizer_mode=auto, skip_tokenizer_init=False",
    'INFO: 10.0.0.7:52144 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 88.1 tokens/s, GPU KV cache usage: 3.2%",
    "commit 1f2e3d4c5b6a79881726354453627180a9b8c7d6 (HEAD -> main)",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.10.0.3<0>",
    "pad_token: <|endoftext|>, eos_token_id=2, api_key=None, token=None",
    'File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1045, in create_engine_config',
    "The disk-usage task-1234 ask-me risk-free desk-top: all fine",
    "http://127.0.0.1:8000/v1/models returned 200; see https://docs.vllm.ai/en/latest/serving/env_vars.html",
    "KV cache key prefix hash 0xa1b2c3d4e5f60718 hit rate 0.42",
    'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.024',
    "--tokenizer-mode auto --max-model-len 4096 --gpu-memory-utilization 0.95",
    "2024-04-27 10:13:05 | ERROR | stderr | Traceback (most recent call last):",
    "日志中出现 CUDA out of memory，请降低 --gpu-memory-utilization",
    "Using the secret sauce: FlashAttention backend",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
]


@pytest.mark.parametrize("line", NEGATIVES)
def test_ordinary_log_lines_are_unchanged(line):
    out, count = redact_with_count(line)
    assert out == line
    assert count == 0


def test_empty_and_idempotent():
    assert redact("") == ""
    text = "\n".join(t.replace("{s}", s) for _, t, s in CORPUS)
    once = redact(text)
    assert redact(once) == once


def _big_log(target_bytes: int) -> str:
    lines = NEGATIVES * 4 + [t.replace("{s}", s) for _, t, s in CORPUS[:5]]
    block = "\n".join(lines) + "\n"
    return block * (target_bytes // len(block) + 1)


@pytest.mark.timeout(300)  # catastrophic backtracking would not finish; speed itself is measured in bench/
def test_ten_megabyte_log_is_redacted_whole():
    text = _big_log(10 * 1024 * 1024)
    out, count = redact_with_count(text)
    assert count > 1000
    assert "hf_" + "x" not in out


@pytest.mark.parametrize(
    "hostile",
    [
        "a" * 2_000_000,
        ":" * 2_000_000,
        "://" * 700_000,
        "://a:" + "b" * 2_000_000,
        "token=" * 300_000,
        "eyJ" + "a" * 2_000_000,
        ("-----BEGIN " + "PRIVATE KEY-----") * 50_000,
        "Authorization: " * 100_000,
        "?&" * 1_000_000,
        "hf_" * 600_000,
        "bearer " * 250_000,
    ],
    ids=[
        "letters",
        "colons",
        "schemes",
        "long-password",
        "assignments",
        "jwt-prefix",
        "pem-headers",
        "auth-headers",
        "query",
        "hf-prefix",
        "bearer",
    ],
)
@pytest.mark.timeout(120)  # a pattern that backtracks on these never finishes; no wall-clock assertion
def test_hostile_input_stays_fast(hostile):
    out = redact(hostile)
    assert redact(out) == out  # redacting is idempotent (and a second pass over the output stays linear too)


def test_text_whose_lowercase_changes_length_is_still_redacted():
    # "İ".lower() is two characters, so the fast lower-case spans cannot be used; the fallback must work
    secret = rand(24)
    out = redact(f"İstanbul cluster PASSWORD={secret} Authorization: Bearer {secret}x")
    assert secret not in out
    assert out.startswith("İstanbul cluster PASSWORD=[REDACTED:secret-assignment] Authorization: Bearer [REDACTED:")


def test_mixed_case_keys_and_headers():
    secret = rand(30)
    for text in (
        f"AccountKey={secret}",
        f"apiKey: {secret}",
        f"AUTHORIZATION: token {secret}",
        f"X-Api-Key: {secret}",
    ):
        out = redact(text)
        assert secret not in out, out
        assert out.startswith(text.split(secret)[0])


def test_every_rule_fires_on_the_corpus_and_its_matches_hold_a_trigger():
    """Rules run only when one of their triggers occurs (one Aho-Corasick pass): a trigger list that
    misses a spelling would silently let that secret through, so each match must contain a trigger."""
    from bot.diagnosis.redact import _RULES

    fired = set()
    for _, template, secret in CORPUS:
        text = template.replace("{s}", secret)
        lowered = text.lower()
        for i, rule in enumerate(_RULES):
            source = lowered if rule.caseless else text
            for m in rule.pattern.finditer(source):
                fired.add(i)
                span = lowered[m.start() : m.end()]
                assert any(t in span for t in rule.triggers), (rule.kind, span)
    silent = [rule.kind for i, rule in enumerate(_RULES) if i not in fired]
    assert not silent, f"rules no corpus entry exercises: {silent}"
