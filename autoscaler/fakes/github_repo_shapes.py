"""The fake GitHub's JSON shapes of repositories and of the accounts that own them.

GitHub embeds an account ("simple user") and a repository in most of its answers (a run,
a webhook delivery, an issue) with dozens of URL templates each; kept apart from the
run, job and runner shapes so those read as what the autoscaler depends on. Each shape
is its operation's response schema in GitHub's OpenAPI description (``tests/conformance``
validates it); what the fake cannot know is what GitHub shows for a new, empty repository.
"""

from __future__ import annotations

from typing import Any

from autoscaler.fakes.github_records import FakeRepo

#: A repository's API URL templates (RFC 6570, as GitHub spells them), after its API URL.
_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}",
    "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors",
    "deployments_url": "/deployments",
    "downloads_url": "/downloads",
    "events_url": "/events",
    "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}",
    "labels_url": "/labels{/name}",
    "languages_url": "/languages",
    "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers",
    "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "tags_url": "/tags",
    "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}
#: A user's (or organization's) API URL templates, after its API URL.
_USER_URLS = {
    "followers_url": "/followers",
    "following_url": "/following{/other_user}",
    "gists_url": "/gists{/gist_id}",
    "starred_url": "/starred{/owner}{/repo}",
    "subscriptions_url": "/subscriptions",
    "organizations_url": "/orgs",
    "repos_url": "/repos",
    "events_url": "/events{/privacy}",
    "received_events_url": "/received_events",
}
#: The fake owner's account id (an organization or a user).
_OWNER_ID = 1


def user_json(base: str, login: str, user_id: int, kind: str = "User") -> dict[str, Any]:
    """A "simple user": an account as GitHub embeds it (``kind`` User or Organization)."""
    api = f"{base}/users/{login}"
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{user_id}" if kind == "User" else f"O_{user_id}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        **{key: api + suffix for key, suffix in _USER_URLS.items()},
        "type": kind,
        "user_view_type": "public",
        "site_admin": False,
    }


def repo_json(
    base: str, owner: str, repo: FakeRepo, owner_kind: str = "org", *, embedded: bool = False
) -> dict[str, Any]:
    """A repository as "List organization repositories" shows it (a minimal repository);
    ``embedded``: as a workflow run embeds it, the required properties only.

    The fake knows no description, topics, sizes or counts: those are GitHub's defaults for
    a new empty repository. Its times are fixed (the fake has no repository history).
    """
    full = f"{owner}/{repo.name}"
    api = f"{base}/repos/{full}"
    kind = "User" if owner_kind == "user" else "Organization"
    created = "2024-01-01T00:00:00Z"
    required = {
        "id": repo.id,
        "node_id": f"R_{repo.id}",
        "name": repo.name,
        "full_name": full,
        "private": repo.private,
        "owner": user_json(base, owner, _OWNER_ID, kind),
        "html_url": f"https://github.com/{full}",
        "description": None,
        "fork": False,
        "url": api,
        **{key: api + suffix for key, suffix in _REPO_URLS.items()},
    }
    if embedded:
        return required
    return {
        **required,
        "git_url": f"git://github.com/{full}.git",
        "ssh_url": f"git@github.com:{full}.git",
        "clone_url": f"https://github.com/{full}.git",
        "svn_url": f"https://github.com/{full}",
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "size": 0,
        "default_branch": "main",
        "open_issues_count": 0,
        "is_template": False,
        "topics": [],
        "has_issues": True,
        "has_projects": True,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": True,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "private" if repo.private else "public",
        "pushed_at": created,
        "created_at": created,
        "updated_at": created,
        "permissions": {
            "admin": True,
            "maintain": True,
            "push": True,
            "triage": True,
            "pull": True,
        },
        "allow_forking": False,
        "web_commit_signoff_required": False,
        "forks": 0,
        "open_issues": 0,
        "watchers": 0,
    }
