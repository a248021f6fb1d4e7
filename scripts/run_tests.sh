#!/usr/bin/env bash
# Run the whole test suite in the project environment. Extra arguments go to pytest.
# pytest's exit code is kept: 5 ("no tests collected") is a failure here too.
set -eo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
cd "$ROBOCOACH_ROOT"
exec python -m pytest "$@"
