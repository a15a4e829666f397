#!/bin/sh
# The targeted test of total.sh.
cd "$(dirname "$0")" || exit 1
got=$(sh total.sh 1000 20)
if [ "$got" = 1200 ]; then echo "PASS total.sh"; else echo "FAIL total.sh: got $got, want 1200"; exit 1; fi
