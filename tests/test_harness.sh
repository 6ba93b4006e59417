#!/bin/sh
# tests/test_harness.sh: the benchmark harness's figure-computing parts.
exec python3 tests/test_harness.py
