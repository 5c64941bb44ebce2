"""The redaction of what `sparkwatch run` publishes of a command line: real-looking benchmark commands in,
the argv and run name that reach the coordinator out."""

from __future__ import annotations

import json
import shlex
import time

import pytest

from sparkwatch.cli_parser import make_parser
from sparkwatch.commands.redaction import command_record, default_name, redact_argv, redact_text, secret_name
from sparkwatch.coordinator.api.models import RunEnd

KEY = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv"  # an OpenAI-shaped key
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"

# (command line as a user types it, the argv published, the default run name)
CASES = [
    (
        f"curl -sS -H 'Authorization: Bearer {KEY}' -H 'Content-Type: application/json'"
        ' http://127.0.0.1:8000/v1/chat/completions -d \'{"model": "m", "max_tokens": 8}\'',
        "curl -sS -H 'Authorization: Bearer ***' -H 'Content-Type: application/json'"
        ' http://127.0.0.1:8000/v1/chat/completions -d \'{"model": "m", "max_tokens": 8}\'',
        "curl",
    ),
    (
        "curl --header 'X-Api-Key: abc123' --header=X-Api-Key:abc123 -HAuthorization:'Bearer abc123'"
        " -H x-goog-api-key:abc123 --proxy-header 'Proxy-Authorization: Basic YWxhZGRpbjpvcGVu' url",
        "curl --header 'X-Api-Key: ***' --header=X-Api-Key:*** -H'Authorization:Bearer ***'"
        " -H x-goog-api-key:*** --proxy-header 'Proxy-Authorization: Basic ***' url",
        "curl",
    ),
    (
        "curl -H 'X-Tenant: abc123' -H 'Cookie: session=abc123' -H 'User-Agent: bench/1' url",
        "curl -H 'X-Tenant: ***' -H 'Cookie: ***' -H 'User-Agent: bench/1' url",  # any name may carry a key
        "curl",
    ),
    (
        f"env OPENAI_API_KEY={KEY} HF_TOKEN=abc123 CUDA_VISIBLE_DEVICES=0,1 TOKENIZERS_PARALLELISM=false"
        " vllm bench serve --backend openai-chat --model Qwen/Qwen3-8B --max-tokens 256 --num-prompts 10",
        "env OPENAI_API_KEY=*** HF_TOKEN=*** CUDA_VISIBLE_DEVICES=0,1 TOKENIZERS_PARALLELISM=false"
        " vllm bench serve --backend openai-chat --model Qwen/Qwen3-8B --max-tokens 256 --num-prompts 10",
        "vllm bench serve",
    ),
    (
        "vllm bench serve --header x-api-key=abc123 --header X-Tenant=abc123 --header User-Agent=bench/1",
        "vllm bench serve --header x-api-key=*** --header X-Tenant=*** --header User-Agent=bench/1",
        "vllm bench serve",
    ),
    (
        "env -i PGPASSWORD=abc123 aws_secret_access_key=abc123"
        " DATABASE_URL=postgres://bench:abc123@db/x psql",
        "env -i PGPASSWORD=*** aws_secret_access_key=*** DATABASE_URL=postgres://bench:***@db/x psql",
        "psql",
    ),
    (
        "guidellm benchmark --target http://user:abc123@spark-1:8000 --rate-type sweep --max-seconds 30",
        "guidellm benchmark --target http://user:***@spark-1:8000 --rate-type sweep --max-seconds 30",
        "guidellm benchmark",
    ),
    (
        "python bench.py https://abc123@models.example/v1?api_key=abc123&model=m&token=abc123&key=abc123"
        " 'https://h/x?X-Amz-Signature=abc123&X-Amz-Credential=abc123&sig=abc123&page=2'",
        "python bench.py https://***@models.example/v1?api_key=***&model=m&token=***&key=***"
        " 'https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&sig=***&page=2'",
        "python bench.py https://***@models.example/v1?api_key=***&model=m&token=***&key=***"
        " https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&sig=***&page=2",
    ),
    (
        'curl -d \'{"model": "m", "api_key": "abc123", "apiKey": "abc123",'
        ' "headers": {"Authorization": "Bearer abc123"}, "messages": []}\' url',
        'curl -d \'{"model": "m", "api_key": "***", "apiKey": "***",'
        ' "headers": {"Authorization": "Bearer ***"}, "messages": []}\' url',
        "curl",
    ),
    (
        'guidellm benchmark --backend-args \'{"api_key": "abc123", "timeout": 60}\' --data prompt_tokens=256',
        'guidellm benchmark --backend-args \'{"api_key": "***", "timeout": 60}\' --data prompt_tokens=256',
        "guidellm benchmark",
    ),
    (
        f"vllm bench serve --api-key abc123 --hf-token={HF} -token abc123 --password abc123 --tokenizer t"
        " --max-tokens 64 --max-num-batched-tokens 8192 --api_key=abc123 --ssl-keyfile /k.pem",
        "vllm bench serve --api-key *** --hf-token=*** -token *** --password *** --tokenizer t"
        " --max-tokens 64 --max-num-batched-tokens 8192 --api_key=*** --ssl-keyfile /k.pem",
        "vllm bench serve",
    ),
    (
        "curl -u alice:abc123 --user=bob:abc123 -ucarol:abc123 --proxy-user dave:abc123 url",
        "curl -u alice:*** --user=bob:*** -ucarol:*** --proxy-user dave:*** url",
        "curl",
    ),
    (
        "http POST spark-1:8000/v1/completions X-API-Key:abc123 api_key==abc123 'Authorization:Bearer abc123'"
        " model=m",
        "http POST spark-1:8000/v1/completions X-API-Key:*** api_key==*** 'Authorization:Bearer ***' model=m",
        "http POST spark-1:8000/v1/completions X-API-Key:*** api_key==***",
    ),
    (
        'sh -c \'OPENAI_API_KEY=abc123 curl -H "Authorization: Bearer abc123" --api-key abc123'
        ' http://u:abc123@h/v1?token=abc123 -d "{\\"api_key\\": 1}" && echo done\'',
        'sh -c \'OPENAI_API_KEY=*** curl -H "Authorization: Bearer ***" --api-key ***'
        ' http://u:***@h/v1?token=*** -d "{\\"api_key\\": 1}" && echo done\'',
        "sh",
    ),
    (
        f"lmx speed-test run sglang {KEY} {HF} ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 AKIAIOSFODNN7EXAMPLE",
        "lmx speed-test run sglang *** *** *** ***",
        "lmx speed-test run sglang ***",
    ),
    (
        "lmx speed-test run sglang --mode remote --base-url http://127.0.0.1:8899/v1 --json-status",
        "lmx speed-test run sglang --mode remote --base-url http://127.0.0.1:8899/v1 --json-status",
        "lmx speed-test run sglang",
    ),
]


@pytest.mark.parametrize(
    ("typed", "published", "name"), CASES, ids=[c[2] + f"-{i}" for i, c in enumerate(CASES)]
)
def test_redacted_command_lines(typed: str, published: str, name: str) -> None:
    argv = shlex.split(typed)
    redacted = redact_argv(argv)
    assert redacted == shlex.split(published)
    assert default_name(redacted) == name
    for secret in ("abc123", KEY, HF, "YWxhZGRpbjpvcGVu", "ghp_", "AKIA"):
        assert not any(secret in item for item in redacted), (secret, redacted)
    assert redact_argv(redacted) == redacted  # redacting twice changes nothing


@pytest.mark.parametrize(
    ("argv", "published"),
    [
        (
            ["curl", "-H", "Authorization: Bearer abc123", "url"],
            ["curl", "-H", "Authorization: Bearer ***", "url"],
        ),
        (["curl", "--header", "X-Api-Key: abc123"], ["curl", "--header", "X-Api-Key: ***"]),
        (["curl", "-H", "@headers.txt"], ["curl", "-H", "@headers.txt"]),  # a file reference, not a value
        (["tool", "--api-key"], ["tool", "--api-key"]),  # no value follows
        (["tool", "--no-auth", "model"], ["tool", "--no-auth", "***"]),  # a switch: the safe mistake
        (["python", "-u", "bench.py"], ["python", "-u", "bench.py"]),  # -u without user:password
    ],
)
def test_a_flag_and_its_value_as_separate_items(argv: list[str], published: list[str]) -> None:
    assert redact_argv(argv) == published


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("api-key", True),
        ("apiKey", True),
        ("XApiKey", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("PGPASSWORD", True),
        ("MYSQL_PWD", True),
        ("aws_secret_access_key", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("use-auth-token", True),
        ("Authorization", True),
        ("X-Amz-Security-Token", True),
        ("sig", True),
        ("pass", True),
        ("max_tokens", False),
        ("max-num-batched-tokens", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("tokenizer", False),
        ("author", False),
        ("keyword", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("model", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_default_name_never_shows_an_unredacted_word() -> None:
    argv = ["curl", "http://bench:abc123@h:8000/v1/models"]
    assert default_name(redact_argv(argv)) == "curl http://bench:***@h:8000/v1/models"
    assert default_name(redact_argv(["env", "HF_TOKEN=abc123"])) == "env HF_TOKEN=***"  # env alone
    assert default_name(["env", "-u", "HOME", "-C", "/tmp", "-i", "A=1", "vllm", "bench"]) == "vllm bench"
    assert len(default_name(["x" * 500])) == 200
    # a name is one line (the API refuses control characters): an argument's newline or tab is a space
    assert default_name(["python", "bench.py", "a\nb\tc\x1b"]) == "python bench.py a b c "


def test_a_name_flag_with_a_control_character_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        make_parser().parse_args(["runs", "open", "--name", "a\nb"])
    assert exited.value.code == 2
    assert "argument --name: must not hold control characters" in capsys.readouterr().err
    # bytes that are not UTF-8, as Python hands a command line's over: JSON cannot carry them
    with pytest.raises(SystemExit) as exited:
        make_parser().parse_args(["runs", "open", "--name", "a\udcff\udcfe"])
    assert exited.value.code == 2
    assert "argument --name: must be UTF-8 text, got a\\xff\\xfe (" in capsys.readouterr().err


def test_a_commands_bytes_that_are_not_utf8_are_published_as_escapes_the_api_takes() -> None:
    """`run -- sh -c … $'\\xff'`: the run opened, the command ran, and its end was refused (the API's
    JSON cannot hold a lone surrogate), so the export was lost."""
    argv = ["\udcffbench", "--file", "r\udce9sultat.json", "--api-key", "k\udcff"]
    record = command_record(argv, 0)
    assert record == {
        "argv": ["\\xffbench", "--file", "r\\xe9sultat.json", "--api-key", "***"],
        "exit_code": 0,
    }
    assert RunEnd.model_validate_json(json.dumps({"command": record})).command is not None
    assert default_name(redact_argv(argv)) == "\\xffbench"


BODY = '{"messages": [' + ", ".join(['{"role": "user", "content": "' + "a'b\" " * 20 + '"}'] * 5000) + "]}"


@pytest.mark.parametrize(
    "text",
    [BODY, "?" * 100_000, "a-" * 50_000, ";a" * 50_000, "sk-" * 30_000, "eyJ-" * 25_000, "eyJ." * 25_000],
    ids=["body", "questions", "dashes", "semicolons", "sk", "jwt-dashes", "jwt-dots"],
)
def test_long_text_is_redacted_in_linear_time(text: str) -> None:
    """A harness may put a whole request body on the command line: no rule may backtrack over it (each of
    these took seconds to minutes before the names were bounded)."""
    t0 = time.perf_counter()
    assert redact_text(text + ' "api_key": "abc123"').endswith('"api_key": "***"')
    assert time.perf_counter() - t0 < 1.0
