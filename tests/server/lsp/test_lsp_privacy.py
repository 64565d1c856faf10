"""Files redraft never reads, against the real server: an open `.env`, secret files in the
workspace that are never opened, and a folder the user excludes. Their text never shows up
in a completion typed toward it from another file; with the secret defaults switched off the
same completion does show it (the path the exclusion closes is a live one)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_helpers import CAPABILITIES, SERVER, complete, document, open_doc, stats

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "sk-live-9f8e7d6c5b4a"
DOTENV = f'API_TOKEN="{SECRET}"\nDB_PASSWORD="hunter2-9q8w7e"\n'
WORKSPACE_SECRET = "sk-aws-77aa88bb99cc"
PRIVATE = "sk-priv-1a2b3c4d5e"
PUBLIC = "visible-4242-name"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / ".env").write_text(DOTENV)
    for folder in ("pkg", "config", "private"):
        (root / folder).mkdir()
    (root / "config" / "credentials.py").write_text(f'AWS_SECRET = "{WORKSPACE_SECRET}"\n')  # a default secret
    (root / "private" / "keys.py").write_text(f'SERVICE_KEY = "{PRIVATE}"\n')  # the user's glob
    (root / "pkg" / "helpers.py").write_text(f'PUBLIC_NAME = "{PUBLIC}"\n')
    return root


# Only the command line turns the secret defaults off; the client turns them on, then back off.
@pytest_lsp.fixture(config=ClientServerConfig([*SERVER.server_command, "--exclude-secrets", "off"],
                                              server_env=SERVER.server_env),
                    scope="module")
async def client(lsp_client: LanguageClient, root: Path):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, root_uri=root.as_uri(),
        initialization_options={"drafts": "only", "exclude": ["private/"], "excludeSecrets": True}))
    yield
    await lsp_client.shutdown_session()


async def texts(client: LanguageClient, uri: str, line: str) -> list[str]:
    """The completions offered at the end of `line`, typed into `uri` (a fresh version)."""
    client.versions = getattr(client, "versions", 0) + 1
    open_doc(client, uri, f"import os\n\n{line}", version=client.versions)
    return [i.insert_text for i in await complete(client, uri, 2, len(line))]


def configure(client: LanguageClient, **options) -> None:
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(options))


async def test_an_open_env_file_is_never_read(client: LanguageClient, root: Path):
    env = (root / ".env").as_uri()
    open_doc(client, env, DOTENV, language="dotenv")
    main = (root / "pkg" / "main.py").as_uri()
    for line in ('API_TOKEN="', 'token = "sk-', 'DB_PASSWORD="'):
        got = await texts(client, main, line)
        assert not any(SECRET in t or "hunter2" in t for t in got), (line, got)
    s = await stats(client)
    assert s["excluded"] == 1 and s["documents"] == 1  # main.py only
    assert await document(client, env) == {}  # the server holds none of its text
    assert await complete(client, env, 0, len("API_TOKEN=")) == []  # nothing completed inside it


async def test_with_the_secret_defaults_off_the_same_completion_shows_it(client: LanguageClient, root: Path):
    env, main = (root / ".env").as_uri(), (root / "pkg" / "main.py").as_uri()
    configure(client, excludeSecrets=False)
    open_doc(client, env, DOTENV, language="dotenv", version=2)
    assert any(SECRET in t for t in await texts(client, main, 'API_TOKEN="'))
    configure(client, excludeSecrets=True)  # excluded again: the open document is dropped at once
    assert not any(SECRET in t for t in await texts(client, main, 'API_TOKEN="'))
    assert (await stats(client))["excluded"] == 1


async def test_workspace_secrets_and_excluded_folders_are_never_read(client: LanguageClient, root: Path):
    main = (root / "pkg" / "main.py").as_uri()
    ws = {}
    for _ in range(200):  # listing and indexing run in the background
        await texts(client, main, 'PUBLIC_NAME = "')
        ws = (await stats(client))["workspace"]
        if ws and ws["ready"] and ws["indexed"]:
            break
        await asyncio.sleep(0.05)
    assert ws["files"] == 1  # helpers.py; credentials.py (a secret), private/ (the user's) and .env never listed
    assert any(PUBLIC in t for t in await texts(client, main, 'PUBLIC_NAME = "'))  # workspace drafts work
    for line in ('AWS_SECRET = "', 'SERVICE_KEY = "', 'API_TOKEN="'):
        got = await texts(client, main, line)
        assert not any(s in t for t in got for s in (WORKSPACE_SECRET, PRIVATE, SECRET)), (line, got)


async def test_a_user_glob_keeps_a_custom_file_out(client: LanguageClient, root: Path):
    configure(client, exclude=["*.local.py"])
    other = (root / "pkg" / "tokens.local.py").as_uri()
    open_doc(client, other, 'LOCAL_TOKEN = "tok-local-5566"\n')
    assert not any("5566" in t for t in await texts(client, (root / "pkg" / "main.py").as_uri(), 'LOCAL_TOKEN = "'))
    assert await document(client, other) == {}
    assert await complete(client, (root / ".env").as_uri(), 0, 3) == []  # the secret defaults still hold


# Secret files of common tools, each with a line a completion elsewhere could copy.
TOOL_SECRETS = [".streamlit/secrets.toml", "infra/prod.tfstate", "infra/terraform.tfstate.backup",
                "home/.docker/config.json", "home/.kube/config", "keys/deploy.ppk", "home/.vault-token",
                "home/.aws/credentials", "home/.aws/config", "home/.ssh/config", "keys/AuthKey_AB12.p8",
                "vpn/office.ovpn", ".git/config", "kubeconfig", "home/.pgpass", "home/.my.cnf",
                "site/wp-config.php", "home/.config/gcloud/application_default_credentials.json",
                "home/.azure/accessTokens.json", "home/.dockercfg", ".secrets", ".env.production.local"]


def tool_line(i: int) -> tuple[str, str]:
    return f'TOOL_SECRET_{i} = "', f"tool-secret-{i:02d}-x9"


async def test_the_secret_files_of_common_tools_are_never_read(client: LanguageClient, root: Path):
    main = (root / "pkg" / "main.py").as_uri()
    uris = [(root / rel).as_uri() for rel in TOOL_SECRETS]
    before = (await stats(client))["excluded"]
    for i, uri in enumerate(uris):
        line, marker = tool_line(i)
        open_doc(client, uri, f'{line}{marker}"\n', language="plaintext")
    assert (await stats(client))["excluded"] == before + len(uris)
    for i, uri in enumerate(uris):
        line, marker = tool_line(i)
        assert await document(client, uri) == {}, TOOL_SECRETS[i]  # the server holds none of its text
        assert await complete(client, uri, 0, len(line)) == [], TOOL_SECRETS[i]  # nothing completed inside it
        got = await texts(client, main, line)
        assert not any(marker in t for t in got), (TOOL_SECRETS[i], got)
    # with the secret defaults off the same completions show each file's text: the path is a live one
    configure(client, excludeSecrets=False)
    for i, uri in enumerate(uris):
        line, marker = tool_line(i)
        open_doc(client, uri, f'{line}{marker}"\n', language="plaintext", version=2)
        assert any(marker in t for t in await texts(client, main, line)), TOOL_SECRETS[i]
    configure(client, excludeSecrets=True)
    line, marker = tool_line(0)
    assert not any(marker in t for t in await texts(client, main, line))
