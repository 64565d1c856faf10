"""The secret files redraft never reads by default, and the credential shapes found inside
ordinary files: each listed kind matches, ordinary source files and ordinary code do not."""

import pytest

from redraft.server.core import secret_shapes
from redraft.server.core.exclude import matcher

SECRET_FILES = [
    "/w/.streamlit/secrets.toml", "/w/infra/prod.tfstate", "/w/terraform.tfstate.backup",
    "/w/terraform.tfstate.d/dev/terraform.tfstate", "/home/u/.docker/config.json", "file:///home/u/.kube/config",
    "C:\\Users\\u\\.kube\\config", "/w/putty.ppk", "/w/.vault-token", "/home/u/.aws/credentials",
    "/home/u/.aws/config", "/home/u/.azure/accessTokens.json", "/home/u/.config/gcloud/credentials.db",
    "/home/u/.config/gcloud/application_default_credentials.json", "/home/u/.ssh/config", "/home/u/.ssh/known_hosts",
    "/w/AuthKey_AB12CD34.p8", "/w/office.ovpn", "/w/.git/config", "/w/kubeconfig", "/w/prod.kubeconfig",
    "/w/.htpasswd", "/home/u/.dockercfg", "/home/u/.pgpass", "/home/u/.my.cnf", "/w/release.jks",
    "/w/wp-config.php", "/w/.env", "/w/.env.local", "/w/.envrc", "/w/.env_prod", "/w/.secrets", "/w/.secrets/db.py",
    "/w/deploy_rsa", "/home/u/.bash_history", "/w/main.tfvars.json",
    "/w/client_secret_1.apps.googleusercontent.com.json",
    "/home/u/.config/gh/hosts.yml", "/home/u/.m2/settings.xml", "/home/u/.gnupg/pubring.kbx", "/w/.npmrc",
    "/w/config/credentials.py", "/w/tls/server.key", "/w/id_ed25519", "/w/service-account-prod.json",
]
ORDINARY_FILES = [
    "/w/kubeconfig.go", "/w/pkg/secrets_manager.py", "/w/config.py", "/w/src/settings.py", "/w/app/config/database.yml",
    "/w/docs/ssh.md", "/w/environment.py", "/w/env.py", "/w/src/credentials_helper.go", "/w/.gitignore",
    "/w/terraform/main.tf", "/w/state.tf", "/w/secret.ts", "/w/README.md", "/w/pkg/config",
    "/w/.github/workflows/ci.yml",
    "/w/keys.py", "/w/token.py", "/w/auth/jwt.rs", "/w/src/ssh/client.go", "/w/aws/s3.py",
]


@pytest.mark.parametrize("path", SECRET_FILES)
def test_a_secret_file_is_excluded_by_default(path):
    assert matcher(()).matches(path)
    assert not matcher((), secrets=False).matches(path)  # the user's choice to switch the defaults off


def test_ordinary_source_files_are_not():
    m = matcher(())
    assert [p for p in ORDINARY_FILES if m.matches(p)] == []


TOKENS = [
    "AKIA" + "Z7Q4XW2M9KDP3LRT", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "glpat-" + "x" * 20,
    "xoxb-" + "1234567890-abcdefghij", "sk_live_" + "a1" * 12, "AIza" + "B" * 35, "npm_" + "c" * 36,
    "hf_" + "dE" * 17, "sk-proj-" + "a" * 20 + "T3BlbkFJ" + "b" * 20, "-----BEGIN OPENSSH PRIVATE KEY-----",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "DefaultEndpointsProtocol=https;AccountKey=" + "Q" * 86 + "==",
]
ORDINARY_CODE = [
    'digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"',
    'request_id = "123e4567-e89b-12d3-a456-426614174000"', "AKIA = 'prefix'", "def get_ghp_token(): pass",
    "key = os.environ['AWS_SECRET_ACCESS_KEY']", "BEGIN_PRIVATE_KEY = '-----BEGIN PRIVATE KEY'",
    "hf_model_name_for_the_tokenizer_config = 1", "sk-learn", 'url = "https://hooks.example.com/services"',
]


@pytest.mark.parametrize("token", TOKENS)
def test_a_credential_shape_is_found_in_ordinary_text(token):
    assert secret_shapes.contains(f'CONFIG = {{"value": "{token}"}}\n')
    if not token.startswith("-----BEGIN"):  # a key's lines run to its END line (below)
        assert secret_shapes.redact(f"a = 1\nvalue = '{token}'\nb = 2") == "a = 1\n\nb = 2"


def test_ordinary_code_is_not_a_credential():
    assert [c for c in ORDINARY_CODE if secret_shapes.contains(c)] == []
    text = "\n".join(ORDINARY_CODE)
    assert secret_shapes.redact(text) is text


def test_a_private_key_is_blanked_through_its_end_line():
    text = "a = 1\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI\nAoGCCqGSM49\n-----END EC PRIVATE KEY-----\nb = 2"
    assert secret_shapes.redact(text) == "a = 1\n\n\n\n\nb = 2"
    assert secret_shapes.redact("x\n-----BEGIN PRIVATE KEY-----\nMIIE\nrest") == "x\n\n\n"  # no END: to the end


def test_the_readme_lists_every_default_secret_glob():
    from pathlib import Path

    from redraft.server.core.exclude import SECRETS
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme[readme.index("**Files never read.**"):readme.index("## Install")]
    assert [g for g in SECRETS if f"`{g}`" not in section] == []
