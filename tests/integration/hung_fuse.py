"""Runs a command next to a FUSE mount that never answers, in a mount
namespace of its own (so that nothing else on the machine meets it):

    unshare --mount --propagation private python3 hung_fuse.py DIR CMD...

DIR becomes a FUSE mount of type fuse.hungfs whose server never reads
/dev/fuse: the kernel's INIT is never answered, so any stat, lookup or
open under DIR blocks until the connection goes (what a SIGSTOPped or
deadlocked FUSE server does to its callers). CMD then runs; its exit
status is this script's. The mount goes with the namespace.
"""

import ctypes
import os
import subprocess
import sys

MNT_DETACH = 2


def main():
    mnt, cmd = sys.argv[1], sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)  # not inherited by CMD
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0"
    if libc.mount(b"hung", mnt.encode(), b"fuse.hungfs", 0,
                  opts.encode()) != 0:
        err = ctypes.get_errno()
        sys.exit(f"hung_fuse: mount {mnt}: {os.strerror(err)}")
    try:
        return subprocess.run(cmd).returncode
    finally:
        libc.umount2(mnt.encode(), MNT_DETACH)
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
