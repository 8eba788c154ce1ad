#!/bin/sh
# Description: dist_sync and dist_async jobs of real processes (kvsd and
# 2-4 workers, tests/dist_worker) get every semantic right with every
# round through kvsd (KVS_COMBINE=0), and survive a worker dying; nothing
# of a job is left behind. The same as the workers combine the small keys'
# rounds: test_dist_combined.sh; kvsd reading the workers' memory:
# test_dist_remote.sh; what training code does: test_dist_training.sh;
# device arrays: test_dist_device.sh; kvsd itself dying or refused:
# test_dist_kvsd.sh.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

KVS_COMBINE=0
export KVS_COMBINE
semantics
dist_done
