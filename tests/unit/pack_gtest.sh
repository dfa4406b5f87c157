#!/usr/bin/env bash
# Copies a GoogleTest install's headers and static libraries into .gtest/ at the repository
# root (git-ignored), for machines that have nvcc but no GoogleTest and no network:
#
#   bash tests/unit/pack_gtest.sh            # from this machine's libgtest-dev (make deps)
#   # carry .gtest/ to the other machine, then there:
#   make test GTEST_ROOT=.gtest && bin/unit_tests
#
# SRC_ROOT=<prefix> packs another install (<prefix>/include/gtest, <prefix>/lib[/*]/libgtest*.a).
# The libraries are static: the other machine needs a compatible libstdc++, nothing else.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${SRC_ROOT:-/usr}
dest=$root/.gtest

lib=$(ls "$src"/lib/libgtest.a "$src"/lib/*/libgtest.a "$src"/lib64/libgtest.a 2>/dev/null | head -n 1 || true)
if [ ! -f "$src/include/gtest/gtest.h" ] || [ -z "$lib" ] || [ ! -f "$(dirname "$lib")/libgtest_main.a" ]; then
    echo "GoogleTest not found under $src: run make deps (or set SRC_ROOT)" >&2
    exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib"
cp -r "$src/include/gtest" "$dest/include/"
cp "$lib" "$(dirname "$lib")/libgtest_main.a" "$dest/lib/"
echo "packed GoogleTest into $dest ($(du -sh "$dest" | cut -f1)): make test GTEST_ROOT=.gtest"
