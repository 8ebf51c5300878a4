"""Put first on PYTHONPATH by hintfs-run (with HINTFS_RUN=1), so that every
Python process of the job installs hintfs's DataLoader hook at start-up:
the script itself, torch.multiprocessing.spawn's children, torchrun's
workers, DataLoader workers started with spawn. Then it runs the
sitecustomize it hides (Debian's, a virtual environment's), if any.

This folder holds nothing else, so that the PYTHONPATH entry shadows no
other module.
"""


def _boot():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("HINTFS_RUN") == "1":
        try:
            if importlib.util.find_spec("hintfs") is None:
                # Not installed where this Python looks: the package this
                # file belongs to, after everything else.
                sys.path.append(os.path.dirname(os.path.dirname(here)))
            from hintfs import autohint
            autohint.install()
        except Exception as e:  # never stop the process over a hint
            sys.stderr.write(f"hintfs-run: hook not installed: {e}\n")
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


_boot()
del _boot
