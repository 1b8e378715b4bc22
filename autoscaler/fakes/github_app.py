"""The fake GitHub's credentials: the static token, and GitHub App installation tokens
issued for a JWT (RS256) signed by the app's key."""

from __future__ import annotations

import secrets
from datetime import timedelta

import jwt

from autoscaler.fakes.github_shapes import Reply, error_reply, iso
from autoscaler.fakes.github_state import GitHubState


def authorized(fake: GitHubState, auth: str) -> bool:
    scheme, _, token = auth.partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token:
        return False
    if secrets.compare_digest(token, fake.token):
        return True
    with fake.lock:
        expiry = fake.installation_tokens.get(token)
    return expiry is not None and fake.clock() < expiry


def installation_token(fake: GitHubState, auth: str) -> bool:
    """The Authorization header carries a live installation token (a GitHub App's)."""
    scheme, _, token = auth.partition(" ")
    with fake.lock:
        expiry = fake.installation_tokens.get(token)
    return scheme.lower() in ("bearer", "token") and expiry is not None and fake.clock() < expiry


def app_token(fake: GitHubState, auth: str) -> Reply:
    scheme, _, token = auth.partition(" ")
    bad = error_reply(401, "A JSON web token could not be decoded")
    if fake.app_public_key_pem is None or scheme.lower() != "bearer" or not token:
        return bad
    try:
        claims = jwt.decode(
            token,
            fake.app_public_key_pem,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "require": ["iat", "exp", "iss"]},
        )
    except jwt.PyJWTError:
        return bad
    now = fake.clock().timestamp()
    iat, exp = float(claims["iat"]), float(claims["exp"])
    if str(claims["iss"]) != str(fake.app_id):
        return error_reply(401, "'Issuer' claim ('iss') must be an Integer")
    if exp <= now or exp - now > 600 or iat > now + 60:
        return error_reply(
            401,
            "'Expiration time' claim ('exp') is too far in the future or has passed",
        )
    issued = "ghs_" + secrets.token_hex(18)
    expires = fake.clock() + timedelta(hours=1)
    with fake.lock:
        fake.installation_tokens[issued] = expires
    body = {
        "token": issued,
        "expires_at": iso(expires),
        "permissions": {"actions": "read", "organization_self_hosted_runners": "write"},
        "repository_selection": "all",
    }
    return Reply(201, body)
