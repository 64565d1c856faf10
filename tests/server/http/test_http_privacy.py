"""The HTTP API's time budget and excluded files, against a real uvicorn server: a request
ends by its budget however slow the engine, the files a repository-level prompt carries
feed drafts except the excluded ones, and an excluded file gets no completion and no edit."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from http_helpers import CONFIG, Running, calls_until_free
from redraft.server.http.app import build_app

SECRET = "sk-live-9f8e7d6c5b4a"


def repo_prompt(current: str, line: str) -> str:
    """Qwen2.5-Coder's repository-level FIM prompt: an `.env` and a module ahead of the file."""
    return (f'<|repo_name|>shop\n<|file_sep|>.env\nAPI_TOKEN="{SECRET}"\n'
            f'<|file_sep|>shop/names.py\nSHOP_NAME = "corner-store-4242"\n'
            f"<|file_sep|>{current}\n<|fim_prefix|>import os\n\n{line}<|fim_suffix|>\n<|fim_middle|>")


@pytest.fixture(scope="module")
def urls(inference):
    drafts = replace(CONFIG, drafts="only", line_tokens=16)
    servers = [Running(build_app(inference, drafts)),
               Running(build_app(inference, replace(drafts, exclude_secrets=False)))]
    yield [s.url for s in servers]
    for s in servers:
        s.stop()


def complete(url: str, prompt: str) -> str:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 16}, timeout=60)
    assert r.status_code == 200
    return r.json()["choices"][0]["text"]


def test_an_excluded_file_in_the_prompt_is_never_read(urls):
    guarded, open_ = urls
    # the header's files feed drafts
    assert "corner-store-4242" in complete(guarded, repo_prompt("shop/main.py", 'NAME = "'))
    assert SECRET not in complete(guarded, repo_prompt("shop/main.py", 'API_TOKEN="'))
    assert SECRET in complete(open_, repo_prompt("shop/main.py", 'API_TOKEN="'))  # with the secret defaults off


def test_an_excluded_file_gets_no_completion_and_no_edit(urls):
    guarded, open_ = urls
    assert complete(guarded, repo_prompt(".env", 'SHOP_NAME = "')) == ""
    assert "corner-store-4242" in complete(open_, repo_prompt(".env", 'SHOP_NAME = "'))
    edit = ("<|current_file_content|>\ncurrent_file_path: deploy/.env.production\n<|code_to_edit|>\n"
            'API_TOKEN="<|cursor|>"\n<|/code_to_edit|>\n<|/current_file_content|>\n')
    r = httpx.post(f"{guarded}/v1/edit/completions", json={"messages": [{"role": "user", "content": edit}]},
                   timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is None


def test_a_request_ends_by_its_budget_however_slow_the_engine(inference, slow_engine):
    # Every model call takes 0.4 s: unbudgeted, 8 span tokens take ~10 calls (~4 s). With a
    # 300 ms budget the engine stops at the first step boundary past it.
    slow_engine["delay"] = 0.4
    server = Running(build_app(inference, replace(CONFIG, drafts="off", line_tokens=8, max_time=300)))
    try:
        start = slow_engine["calls"]
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x = ", "temperature": 0}, timeout=30)
        assert r.status_code == 200
        assert slow_engine["calls"] - start + calls_until_free(inference, slow_engine) <= 2  # encode, one step
        assert slow_engine["flags"][-1].deadline is not None and slow_engine["flags"][-1].expired()
        assert httpx.get(f"{server.url}/v1/redraft/stats").json()["budget_expired"] == 1
    finally:
        slow_engine["delay"] = 0.0
        server.stop()


TOOL_SECRETS = [".streamlit/secrets.toml", "infra/prod.tfstate", "terraform.tfstate.backup", ".docker/config.json",
                ".kube/config", "keys/deploy.ppk", ".vault-token", ".aws/credentials", ".ssh/config",
                "AuthKey_AB12.p8", "office.ovpn", ".git/config", "kubeconfig", ".pgpass", "wp-config.php",
                ".config/gcloud/application_default_credentials.json", ".env.production.local"]


def tool_prompt(secret_file: str, current: str, line: str) -> str:
    """A repository-level prompt whose header carries a secret file of a common tool."""
    return (f'<|repo_name|>shop\n<|file_sep|>{secret_file}\nTOOL_TOKEN = "tool-secret-3141-x9"\n'
            f"<|file_sep|>{current}\n<|fim_prefix|>import os\n\n{line}<|fim_suffix|>\n<|fim_middle|>")


@pytest.mark.parametrize("secret_file", TOOL_SECRETS)
def test_the_secret_files_of_common_tools_are_never_read(urls, secret_file):
    guarded, open_ = urls
    assert "tool-secret-3141" not in complete(guarded, tool_prompt(secret_file, "shop/main.py", 'TOOL_TOKEN = "'))
    assert "tool-secret-3141" in complete(open_, tool_prompt(secret_file, "shop/main.py", 'TOOL_TOKEN = "'))
    # completing inside such a file: nothing, though the header's other text would answer
    assert complete(guarded, tool_prompt("shop/names.py", secret_file, 'TOOL_TOKEN = "')) == ""
    assert "tool-secret-3141" in complete(open_, tool_prompt("shop/names.py", secret_file, 'TOOL_TOKEN = "'))
