#!/usr/bin/env bash
# Fetch GitHub's published references (tests/conformance/references.txt) with `npm pack`
# into .cache/octokit/<package>-<version>/, once: later runs find them there and work
# offline. Without npm or the registry, a developer's run warns and the conformance tests
# skip; in CI (CI=true) it fails, since the tests would then prove nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
pins=tests/conformance/references.txt
cache=.cache/octokit

fail() {
  echo "fetch_references: $*" >&2
  case "${CI:-}" in
    1 | true | TRUE | True | yes) exit 1 ;;
  esac
  echo "fetch_references: the conformance tests will skip (CI=true fails instead)" >&2
  exit 0
}

grep -Ev '^[[:space:]]*(#|$)' "$pins" | while read -r name version file; do
  dir="$cache/${name#@octokit/}-$version"
  target="$dir/$(basename "$file")"
  [ -s "$target" ] && continue
  command -v npm >/dev/null 2>&1 || fail "npm is not installed (.ci/run installs it)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch_references: npm pack $name@$version" >&2
  npm pack --silent --ignore-scripts --pack-destination "$tmp" "$name@$version" >/dev/null \
    || fail "npm pack $name@$version failed (no registry?)"
  tar -xzf "$tmp"/*.tgz -C "$tmp" "package/$file" || fail "$name@$version has no $file"
  mkdir -p "$dir"
  mv "$tmp/package/$file" "$target.part" && mv "$target.part" "$target"
  rm -rf "$tmp"
  trap - EXIT
done
