"""hintfs-run: runs a training command, unmodified, with automatic hints.

    hintfs-run python train.py --epochs 90       (the installed command)
    hintfs-run torchrun --nproc_per_node=8 train.py
    python -m hintfs.run train.py --epochs 90
    python -m hintfs.run -m my_package.train --epochs 90

Every DataLoader of every Python process the command starts writes each
epoch's order as a hint into the hintfs mount its dataset's files are on,
and iterates exactly that order (see hintfs.autohint).

How the hook reaches every process: the environment gets HINTFS_RUN=1 and,
first on PYTHONPATH, a folder holding only a sitecustomize.py
(hintfs/_boot) that installs the hook at interpreter start-up and then runs
the sitecustomize it hides. Children inherit both, so processes started by
torch.multiprocessing.spawn, torchrun or a DataLoader with the spawn start
method have the hook too; a DataLoader worker never starts an epoch, so it
is harmless there. `python -I` or `-E` ignores PYTHONPATH: such a child
runs without hints.

`hintfs-run COMMAND` sets that environment and executes COMMAND (a
script path ending in .py runs with this Python), so the script runs as
`python train.py` would run it. `python -m hintfs.run SCRIPT.py` (or
`-m MODULE`) runs it in this process instead, as `__main__` with sys.argv
as the script expects; either way the exit status is the script's.

Options (before the command): -v / --verbose prints one line per hint
written (HINTFS_RUN_VERBOSE=1 does the same).
"""

import os
import runpy
import sys

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")

USAGE = """\
usage: hintfs-run [-v] COMMAND [ARG...]
       python -m hintfs.run [-v] SCRIPT.py [ARG...]
       python -m hintfs.run [-v] -m MODULE [ARG...]
Runs COMMAND (or the Python SCRIPT.py or MODULE, in this interpreter)
unmodified; every PyTorch DataLoader over files on a hintfs mount hints
each epoch's order.
  -v, --verbose   one line on stderr per hint written
"""


def child_environ(env, verbose=False):
    """@env (a dict, changed in place) for processes that must install the
    hook: HINTFS_RUN=1 and the boot folder first on PYTHONPATH."""
    env["HINTFS_RUN"] = "1"
    if verbose:
        env["HINTFS_RUN_VERBOSE"] = "1"
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.abspath(p) != BOOT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR] + parts)
    return env


def _parse(argv):
    """(verbose, exec_mode, module, rest) from the arguments."""
    verbose = exec_mode = False
    module = None
    while argv:
        a = argv[0]
        if a in ("-v", "--verbose"):
            verbose = True
        elif a == "--exec":
            exec_mode = True
        elif a in ("-h", "--help"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        elif a == "-m" and not exec_mode and len(argv) > 1:
            module = argv[1]
            argv = argv[2:]
            break
        elif a == "--":
            argv = argv[1:]
            break
        elif a.startswith("-"):
            sys.stderr.write(f"hintfs-run: error: unknown option '{a}'\n"
                             + USAGE)
            sys.exit(2)
        else:
            break
        argv = argv[1:]
    return verbose, exec_mode, module, argv


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose, exec_mode, module, rest = _parse(argv)
    if module is None and not rest:
        sys.stderr.write("hintfs-run: error: no command given\n" + USAGE)
        return 2
    child_environ(os.environ, verbose)

    # A command (python, torchrun, ...) is executed; a script runs here.
    if module is None and not rest[0].endswith(".py"):
        exec_mode = True
    if exec_mode:
        cmd = rest
        if cmd[0].endswith(".py") and not os.access(cmd[0], os.X_OK):
            cmd = [sys.executable] + cmd
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            sys.stderr.write(f"hintfs-run: error: cannot run '{cmd[0]}': "
                             f"{e.strerror}\n")
            return 127

    from hintfs import autohint
    autohint.install()
    if module is not None:
        sys.argv = [module] + rest
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    script = rest[0]
    if not os.path.exists(script):
        sys.stderr.write(f"hintfs-run: error: cannot open '{script}': "
                         "No such file or directory\n")
        return 2
    sys.argv = list(rest)
    # What `python SCRIPT` puts first on sys.path: the script's folder.
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
