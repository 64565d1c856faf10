"""Settings from the editor that would send code elsewhere or read what the user did not choose
(a repository's `.vscode/settings.json` reaches them): refused with one message, the value
before kept. First the rules (settings.parse_client, trust.py), then the real server: a
hostile engine on this machine's network address never hears from it, a model folder in the
repository is never loaded, the secret defaults and the command line's excludes hold."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading

import httpx
import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient, make_test_lsp_client

from redraft.server.core import trust
from redraft.server.core.settings import ServerConfig, parse, parse_client

CLI = ServerConfig()  # `redraft serve` with no options


def client(options: dict, current: ServerConfig = CLI, trusted: ServerConfig = CLI):
    return parse_client(options, current, trusted)


# -- the rules --------------------------------------------------------------------------------

LOOPBACK = ["http://127.0.0.1:8080", "http://127.5.6.7", "https://[::1]:9000/engine", "http://localhost:1",
            "http://LOCALHOST:2/x@y", "http://127.0.0.1/@evil.example"]
ELSEWHERE = ["http://192.0.2.2:8000", "https://engine.example.com", "http://127.0.0.1@evil.example",
             "http://evil.example@127.0.0.1", "http://127.0.0.1.evil.example", "http://localhost.evil.example:80",
             "http://2130706433", "http://[::ffff:7f00:1]/", "http://127.0.0.1?@evil.example",
             "http://127.0.0.1#@evil.example", "http://0.0.0.0:8000", "http://127.1"]


def test_an_engine_on_this_machine_is_taken_and_one_elsewhere_refused():
    assert LOOPBACK and ELSEWHERE
    for url in LOOPBACK:
        new, problems, refusals = client({"engineUrl": url})
        assert (new.engine_url, problems, refusals) == (url, [], []), url
        # the client that connects reads the same host
        assert httpx.URL(url).host in ("localhost", "::1") or httpx.URL(url).host.startswith("127."), url
    for url in ELSEWHERE:
        new, problems, refusals = client({"redraft": {"engineUrl": url}})
        assert new.engine_url is None, url
        if problems:  # not even an http(s) URL: refused as a bad value
            assert "engineUrl" in problems[0] and refusals == [], url
            continue
        assert len(refusals) == 1 and refusals[0].startswith(f"setting 'engineUrl'={url!r} refused: "), url
        assert "--engine-url" in refusals[0] and refusals[0].endswith("keeping None")


def test_the_command_lines_own_engine_stays_and_the_client_may_go_local():
    cli = ServerConfig(engine_url="https://gpu.example:8000")
    new, _, refusals = client({"engineUrl": "https://gpu.example:8000", "maxTime": 900}, cli, cli)
    assert (new.engine_url, new.max_time, refusals) == ("https://gpu.example:8000", 900, [])
    new, _, refusals = client({"engineUrl": "https://other.example:8000"}, cli, cli)
    assert new.engine_url == "https://gpu.example:8000" and "keeping 'https://gpu.example:8000'" in refusals[0]
    new, _, refusals = client({"engineUrl": None}, cli, cli)  # code stays here: always safe
    assert new.engine_url is None and refusals == []


def test_a_model_is_a_shipped_name_a_pulled_id_or_under_a_models_folder(tmp_path, monkeypatch):
    models, repo = tmp_path / "models", tmp_path / "repo"
    for d in (models / "mine", repo / "ckpt", repo / "redraft-ar", repo / "org" / "name"):
        d.mkdir(parents=True)
    (models / "linked").symlink_to(repo / "ckpt")  # a link in the models folder that leads out of it
    (repo / "ckpt" / "mine").symlink_to(models / "mine")  # a link into it: the folder is the user's
    cli = ServerConfig(models_dirs=(str(models),))
    monkeypatch.chdir(repo)  # editors start the server in the workspace
    for name in (None, "redraft-diffusion", "Qwen/Qwen2.5-Coder", str(models / "mine"), str(repo / "ckpt" / "mine")):
        new, problems, refusals = client({"model": name}, cli, cli)
        assert problems == [] and refusals == [], name
        assert new.model == (os.path.realpath(models / "mine") if name and "mine" in name else name)  # the real one
    refused = [str(repo / "ckpt"), str(models / "linked"), "ckpt", "./ckpt", "../repo/ckpt", "~/ckpt",
               "redraft-ar",  # a folder of the shipped name in the working folder would be loaded instead
               "org/name", str(models / ".." / "repo" / "ckpt")]
    for name in refused:
        new, problems, refusals = client({"model": name}, cli, cli)
        assert new.model is None and problems == [] and len(refusals) == 1, name
        assert refusals[0].startswith(f"setting 'model'={name!r} refused: ") and "--models-dir" in refusals[0]
    # the command line's own model is trusted, and so is its folder
    own = ServerConfig(model=str(repo / "ckpt"))
    assert client({"model": str(repo / "ckpt")}, CLI, own)[0].model == str(repo / "ckpt")


def test_secret_defaults_turn_off_only_from_the_command_line():
    new, _, refusals = client({"excludeSecrets": False})
    assert new.exclude_secrets is True and new.excludes("/w/.env")
    assert refusals == ["setting 'excludeSecrets'=False refused: only the command line turns the secret-file "
                        "defaults off (`redraft serve --exclude-secrets off`); keeping True"]
    off, _ = parse({"excludeSecrets": False})  # the command line's own parse
    on, _, refusals = client({"excludeSecrets": True}, off, off)
    assert on.exclude_secrets is True and refusals == []
    again, _, refusals = client({"excludeSecrets": False}, on, off)  # back to the command line's choice
    assert again.exclude_secrets is False and refusals == []


def test_the_command_lines_excludes_always_hold_and_the_clients_add():
    cli, _ = parse({"exclude": ["private/", "*.local.py"]})
    new, _, refusals = client({"exclude": ["*.tmp.py"]}, cli, cli)
    assert new.exclude == ("private/", "*.local.py", "*.tmp.py") and refusals == []
    new, _, _ = client({"exclude": []}, new, cli)
    assert new.exclude == ("private/", "*.local.py") and new.excludes("/w/private/keys.py")
    _, _, refusals = client({"modelsDirs": ["/tmp"]}, cli, cli)
    assert len(refusals) == 1 and "modelsDirs" in refusals[0] and "--models-dir" in refusals[0]


def test_loopback_url_checks_the_host_only():
    assert trust.loopback_url("http://127.0.0.1:1/v1") and not trust.loopback_url("ftp://127.0.0.1")
    assert not trust.loopback_url("http://127.0.0.1:1\\@evil.example")


# -- the real server --------------------------------------------------------------------------

SECRET = "sk-live-3e4f5a6b7c"
PRIVATE = "sk-priv-8d9e0f1a2b"
PUBLIC = "visible-7171-name"
OPTIONS = {"lineTokens": 6, "blockTokens": 10, "contextTokens": 256, "maxTime": 60_000}
CAPABILITIES = T.ClientCapabilities(
    text_document=T.TextDocumentClientCapabilities(
        inline_completion=T.InlineCompletionClientCapabilities(dynamic_registration=False)),
    workspace=T.WorkspaceClientCapabilities(did_change_configuration=T.DidChangeConfigurationClientCapabilities()))


def own_address() -> str | None:
    """An address of this machine that is not loopback (no packet is sent), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


class Listener:
    """A hostile 'engine': accepts connections on an address and counts them."""

    def __init__(self, host: str):
        self.sock = socket.create_server((host, 0))
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@pytest.fixture
def place(tmp_path, tiny_model):
    models, repo = tmp_path / "models", tmp_path / "repo"
    models.mkdir()
    (repo / "private").mkdir(parents=True)
    shutil.copytree(tiny_model, repo / "ckpt")  # a loadable checkpoint a cloned repository ships
    shutil.copytree(tiny_model, models / "mine")
    (models / "linked").symlink_to(repo / "ckpt")
    (repo / ".env").write_text(f'API_TOKEN="{SECRET}"\n')
    (repo / "private" / "keys.py").write_text(f'SERVICE_KEY = "{PRIVATE}"\n')
    return models, repo


async def ask(c: LanguageClient, method: str, params: dict) -> dict:
    out = await c.protocol.send_request_async(method, params)
    return {k: v for k, v in out._asdict().items()} if hasattr(out, "_asdict") else out


async def texts(c: LanguageClient, uri: str, line: str, version: int) -> list[str]:
    c.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", version, f"x = 1\n{line}")))
    params = T.InlineCompletionParams(T.InlineCompletionContext(T.InlineCompletionTriggerKind.Automatic),
                                      T.TextDocumentIdentifier(uri), T.Position(1, len(line)))
    result = await asyncio.wait_for(c.text_document_inline_completion_async(params), 60)
    items = [] if result is None else (result.items if isinstance(result, T.InlineCompletionList) else result)
    return [i.insert_text for i in items]


def refused(c: LanguageClient) -> list[str]:
    return [m.message for m in c.messages if "refused" in m.message]


@pytest.mark.asyncio
async def test_settings_from_the_client_cannot_send_code_elsewhere_or_read_more(place, tiny_model):
    models, repo = place
    host = own_address()
    hostile = Listener(host) if host else None
    url = hostile.url if hostile else "https://engine.example.com:8000"
    c = make_test_lsp_client()
    await c.start_io(sys.executable, "-m", "redraft.server.cli", "serve", "--dtype", "float32", "--model",
                     str(tiny_model), "--models-dir", str(models), "--exclude", "private/",
                     env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        hostile_settings = {"engineUrl": url, "model": str(repo / "ckpt"), "excludeSecrets": False, "exclude": [],
                            "modelsDirs": [str(repo)], **OPTIONS}
        await c.initialize_session(T.InitializeParams(capabilities=CAPABILITIES, root_uri=repo.as_uri(),
                                                      initialization_options=hostile_settings))
        for _ in range(1200):
            s = await ask(c, "redraft/stats", {})
            if s["model_state"] != "loading":
                break
            await asyncio.sleep(0.05)
        told = refused(c)
        assert len(told) == 1, c.messages  # one message for all four
        for key in ("'engineUrl'", "'model'", "'excludeSecrets'", "'modelsDirs'"):
            assert key in told[0]
        assert "could not load" not in " ".join(m.message for m in c.messages)  # the repository's model never tried
        assert s["model_state"] == "ready" and s["remote"] is None and s["settings_refused"] == 4

        main = (repo / "main.py").as_uri()
        assert await texts(c, main, "y = ", 1) is not None
        s = await ask(c, "redraft/stats", {})
        assert s["model_runs"] == 1 and s["remote"] is None  # the model here answered

        # the same settings again (every change sends them all): refused, not told again
        c.workspace_did_change_configuration(T.DidChangeConfigurationParams({**hostile_settings, "drafts": "only"}))
        for name, text in (("pkg.py", f'PUBLIC_NAME = "{PUBLIC}"\n'), (".env", f'API_TOKEN="{SECRET}"\n'),
                           ("private/keys.py", f'SERVICE_KEY = "{PRIVATE}"\n')):
            c.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem((repo / name).as_uri(),
                                                                                    "python", 1, text)))
        assert any(PUBLIC in t for t in await texts(c, main, 'PUBLIC_NAME = "', 2))  # drafts from open files work
        got = await texts(c, main, 'API_TOKEN="', 3) + await texts(c, main, 'SERVICE_KEY = "', 4)
        assert not any(SECRET in t or PRIVATE in t for t in got), got
        s = await ask(c, "redraft/stats", {})
        assert s["excluded"] == 2 and s["settings_refused"] == 8 and len(refused(c)) == 1

        # a link in the models folder that leads into the repository: refused; the user's own model: taken
        c.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(models / "linked")}))
        c.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(models / "mine")}))
        for _ in range(1200):
            s = await ask(c, "redraft/stats", {})
            if s["model_state"] != "loading" and s["settings_refused"] == 9:
                break
            await asyncio.sleep(0.05)
        assert len(refused(c)) == 2 and str(models / "linked") in refused(c)[1]
        assert s["model_state"] == "ready" and s["model_error"] is None
        if hostile is not None:
            assert hostile.accepted == 0  # nothing ever reached the engine the client named
    finally:
        await c.shutdown_session()
        await c.stop()
        if hostile is not None:
            hostile.sock.close()
