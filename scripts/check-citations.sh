#!/usr/bin/env bash
# The code base cites only itself: a comment or a document says what a rule
# is and why, or names a document of this repository (docs/*.md, a README
# section). This check fails on citations of outside documents (the wire
# contract, the design and seed notes under shared/) and of issue numbers,
# in every tracked source and documentation file outside shared/ and
# vendored code. `make lint` runs it.
#
# Persisted strings such as the Temporal change ids (i33-…, i34-…, i35-…)
# and the HTML entity &#10; do not match the pattern. A line that must keep
# a match goes into ALLOW below as an extended regular expression matched
# against "path:line-number:text"; keep that list short and say why.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"

# Written in pieces so that this file does not match itself.
PATTERN='WIRE'' §|WIRE''-CONTRACT|DESIGN'' §|DESIGN\.md|SEED''-SPEC|SEED'' §|shared''/spec|[Ii]ssues? [0-9]+|§[0-9]'

# Lines allowed to match (extended regular expressions over path:line:text).
# None is needed today.
ALLOW=()

files=()
while IFS= read -r -d '' f; do
	case "$f" in
	shared/* | */vendor/* | vendor/* | */node_modules/* | node_modules/* | third_party/* | .venv*/*) continue ;;
	esac
	case "$f" in
	*.go | *.py | *.js | *.md | *.html | *.yaml | *.yml | *.sh | *.toml | *.sql | Makefile | */Makefile) ;;
	*) continue ;;
	esac
	[ -f "$f" ] && files+=("$f")
done < <(git ls-files -z)

[ ${#files[@]} -eq 0 ] && exit 0

hits=$(grep -HnE -- "$PATTERN" "${files[@]}" || true)
for re in ${ALLOW[@]+"${ALLOW[@]}"}; do
	[ -z "$hits" ] && break
	hits=$(printf '%s\n' "$hits" | grep -vE -- "$re" || true)
done

if [ -n "$hits" ]; then
	echo "citations of outside documents or issue numbers (say what the rule is and why, or cite docs/ or the README):"
	printf '%s\n' "$hits"
	exit 1
fi
