#!/usr/bin/env bash
# Install the peer systems into two separate virtual environments under benchmarks/.venvs/.
#
# LOTUS (lotus-ai 1.2.4) and Palimpzest (palimpzest 0.9.0) cannot share one environment
# (numpy<2 vs numpy==2.0.2, sentence-transformers<4 vs ==5.0.0), and unpinned pip falls back
# to Palimpzest 0.7.7 which lacks sem_join. torch==2.13.0 goes in first in each so pip takes
# the local CPU wheel instead of pulling a CUDA build.
#
# Usage: bash benchmarks/peers/install.sh [lotus|palimpzest|all]   (default: all)
# Idempotent: an environment whose marker file exists is left alone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENVS="$ROOT/benchmarks/.venvs"
PYTHON="${SEMRAY_PEER_PYTHON:-python3.11}"
WHICH="${1:-all}"

install_one() {
    local name="$1"
    shift
    local venv="$VENVS/$name"
    if [[ -f "$venv/.installed" ]]; then
        echo "[$name] already installed in $venv"
        return 0
    fi
    echo "[$name] creating $venv with $PYTHON"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install torch==2.13.0
    "$venv/bin/pip" install "$@"
    "$venv/bin/python" -c "import sys; print(sys.version)" >"$venv/.installed"
    echo "[$name] done"
}

mkdir -p "$VENVS"
case "$WHICH" in
lotus) install_one lotus lotus-ai==1.2.4 ;;
palimpzest) install_one palimpzest palimpzest==0.9.0 typing_extensions ;;
all)
    install_one lotus lotus-ai==1.2.4
    install_one palimpzest palimpzest==0.9.0 typing_extensions
    ;;
*)
    echo "usage: $0 [lotus|palimpzest|all]" >&2
    exit 2
    ;;
esac
