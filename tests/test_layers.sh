#!/bin/sh
# tests/test_layers.sh: the library's layering, measured from its object files
# ($BUILD/obj/*.o, then the secure flavour's in $BUILD/obj-secure): calls go
# down only, no call cycles, allowed includes only.
exec python3 tests/test_layers.py "$@"
