"""The ``github`` and ``webhook`` sections: how the controller reaches GitHub, and how GitHub
reaches it.

``github`` names the API, the owner and repositories, and one credential (a token or a
GitHub App, whose private key file is read here, relative to the config file); ``webhook``
is optional (absent: polling alone) and, when set, needs the secret GitHub signs every
delivery with and a listen address apart from ``/metrics``. Read into
:class:`~autoscaler.config.schema.GitHubConfig` and
:class:`~autoscaler.config.schema.WebhookConfig` by :mod:`autoscaler.config.load`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoscaler.config.reader import Reader
from autoscaler.config.schema import (
    DEFAULT_HOSTED_LABELS,
    GitHubAppConfig,
    GitHubConfig,
    WebhookConfig,
)
from autoscaler.secrets import Secret, shown


def read_github(r: Reader, value: Any, base: Path) -> GitHubConfig:
    path = "github"
    if value is None:
        r.problem(path, "is required")
        return GitHubConfig(owner="")
    m = r.mapping(
        value,
        path,
        (
            "api_url",
            "owner",
            "repos",
            "token",
            "app",
            "timeout",
            "max_concurrency",
            "hosted_labels",
            "rate_limit_share",
            "proxy",
        ),
    )
    app = None
    if m.get("app") is not None:
        a = r.mapping(m["app"], "github.app", ("app_id", "installation_id", "private_key_file"))
        key_path = r.string(a.get("private_key_file"), "github.app.private_key_file")
        key = ""
        if key_path:
            try:
                key = (base / key_path).read_text(encoding="utf-8")
            except OSError as exc:
                r.problem("github.app.private_key_file", f"cannot read: {exc.strerror}")
            except UnicodeDecodeError:
                r.problem("github.app.private_key_file", "is not UTF-8 text (a PEM key is ASCII)")
        app = GitHubAppConfig(
            app_id=r.integer(a.get("app_id"), "github.app.app_id", minimum=1),
            installation_id=r.integer(
                a.get("installation_id"), "github.app.installation_id", minimum=1
            ),
            private_key=Secret(key),
        )
    token = r.secret(m.get("token"), "github.token")
    if m.get("token") is None and app is None:
        r.problem(path, "needs either token or app")
    if token is not None and app is not None:
        r.problem(path, "set token or app, not both")
    api_url = r.string(m.get("api_url"), "github.api_url", "https://api.github.com")
    if r.ok("github.api_url") and not api_url.startswith(("http://", "https://")):
        r.problem("github.api_url", f"must be an http(s) URL, got {shown(api_url)}")
    share = r.number(m.get("rate_limit_share"), "github.rate_limit_share", 0.8)
    if not 0 < share <= 1:  # a NaN fails this too
        r.problem("github.rate_limit_share", f"must be above 0 and at most 1, got {share}")
    return GitHubConfig(
        owner=r.string(m.get("owner"), "github.owner"),
        api_url=api_url.rstrip("/"),
        repos=None if m.get("repos") is None else r.string_list(m["repos"], "github.repos"),
        token=token,
        app=app,
        timeout=r.duration(m.get("timeout"), "github.timeout", 10.0, positive=True),
        max_concurrency=r.integer(
            m.get("max_concurrency"), "github.max_concurrency", 16, minimum=1
        ),
        hosted_labels=tuple(
            label.lower()
            for label in r.string_list(
                m.get("hosted_labels"), "github.hosted_labels", default=DEFAULT_HOSTED_LABELS
            )
        ),
        rate_limit_share=share,
        proxy=r.url(m.get("proxy"), "github.proxy"),
    )


def read_webhook(r: Reader, value: Any) -> WebhookConfig | None:
    """The optional ``webhook`` section: absent (or null), polling alone as before."""
    p = "webhook"
    if value is None:
        return None
    m = r.mapping(
        value,
        p,
        (
            "listen",
            "secret",
            "reconcile_interval",
            "max_body_bytes",
            "queue_size",
            "debounce",
            "hook_id",
        ),
    )
    if not isinstance(value, dict):
        return None
    secret = r.secret(m.get("secret"), f"{p}.secret")
    if m.get("secret") is None:
        r.problem(f"{p}.secret", "is required (GitHub signs every delivery with it)")
    host, port = r.listen(m.get("listen"), f"{p}.listen", ("0.0.0.0", 9465))
    return WebhookConfig(
        secret=secret if secret is not None else Secret(""),
        listen_host=host,
        listen_port=port,
        reconcile_interval=r.duration(
            m.get("reconcile_interval"), f"{p}.reconcile_interval", 300.0, positive=True
        ),
        max_body_bytes=r.integer(
            m.get("max_body_bytes"), f"{p}.max_body_bytes", 1_048_576, minimum=1024
        ),
        queue_size=r.integer(m.get("queue_size"), f"{p}.queue_size", 1000, minimum=1),
        debounce=r.duration(m.get("debounce"), f"{p}.debounce", 0.2, maximum=10.0),
        hook_id=(
            None
            if m.get("hook_id") is None
            else r.integer(m.get("hook_id"), f"{p}.hook_id", minimum=1)
        ),
    )
