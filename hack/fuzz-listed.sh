#!/usr/bin/env bash
# Fails, naming each, when a fuzz test in the tree is not run by the
# Makefile's fuzz-smoke target (as `-fuzz '^Name$$' ... ./dir/`), so that no
# fuzzer and its committed corpus rot unseen. Run from the repository root.
set -euo pipefail
missing=0
while IFS= read -r f; do
	d=./$(dirname "${f#./}")
	for n in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$f" | cut -c6-); do
		if ! grep -qE -- "-fuzz '\^${n}\\$\\$' -fuzztime [0-9]+x ${d}/\$" Makefile; then
			echo "fuzz-smoke does not run ${n} in ${d}: add a line for it to the Makefile's fuzz-smoke target" >&2
			missing=1
		fi
	done
done < <(grep -rlE '^func Fuzz' --include='*_test.go' . | sort)
exit "$missing"
