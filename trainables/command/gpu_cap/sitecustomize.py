"""raysweep's GPU memory cap for an unmodified PyTorch script in a fractional command trial.

Why: Ray's `{"gpu": 0.25}` is a scheduling label; a script that does not cap itself can take the
whole card and push its neighbours out of memory. `trainables/command/process.py:command_env` puts
this folder first on a fractional trial's PYTHONPATH, so each Python process of the command runs
this file at start-up (Python's `site` imports `sitecustomize`), and:

1. waits, with an import hook, for the script's own `import torch` (a process that never imports
   torch is left alone; this file never imports it);
2. queues the cap on torch's lazy CUDA initialisation (`torch.cuda._lazy_call`: the calls torch runs
   right after it initialises CUDA, as for its own device checks): at the script's first CUDA use,
   `torch.cuda.set_per_process_memory_fraction(RAYSWEEP_GPU_MEMORY_FRACTION)` on each visible device,
   never earlier, so a script that sets CUDA_VISIBLE_DEVICES after `import torch` still picks its GPU;
   one line on stderr (the trial's log) says the cap is set;
3. runs the `sitecustomize` it shadows (the next one on sys.path: a venv's, the distribution's, the
   user's), as Python would have.

Python's `-S`, `-I` and `-E` switches skip it (no site, or no PYTHONPATH). Standard library only, and no
syntax newer than Python 3.6: it runs in whatever Python the command starts.
"""

import os
import sys

FRACTION_ENV = "RAYSWEEP_GPU_MEMORY_FRACTION"
_HERE = os.path.dirname(os.path.abspath(__file__))


def apply_cap(cuda, fraction):
    """Run by torch right after CUDA starts: cap each visible device's caching allocator at `fraction`."""
    try:
        devices = cuda.device_count()
        for device in range(devices):
            cuda.set_per_process_memory_fraction(fraction, device)
        sys.stderr.write(
            "raysweep: GPU memory capped at %g of each visible device (%d) as CUDA started "
            "(RAYSWEEP_GPU_MEMORY_FRACTION; --no-memory-cap turns it off)\n" % (fraction, devices)
        )
    except Exception as e:  # a cap that cannot be set must not stop the script
        sys.stderr.write("raysweep: GPU memory cap of %g not set (%s - %s)\n" % (fraction, type(e).__name__, e))


def queue_cap(cuda, fraction):
    """Queue `apply_cap` on the CUDA initialisation of the `torch.cuda` module `cuda` (at once if CUDA runs)."""
    lazy_call = getattr(cuda, "_lazy_call", None)
    if lazy_call is None:
        sys.stderr.write("raysweep: GPU memory cap not set (this torch has no torch.cuda._lazy_call)\n")
        return
    lazy_call(lambda: apply_cap(cuda, fraction))


class CapWhenTorchLoads(object):
    """A `sys.meta_path` finder that lets the other finders find `torch.cuda`, then queues the cap once its
    module has run (torch imports it while `import torch` runs)."""

    def __init__(self, fraction):
        self.fraction = fraction
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda" or self.done:
            return None
        self.done = True
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if not hasattr(loader, "exec_module"):
            return spec
        run, fraction = loader.exec_module, self.fraction

        def exec_module(module):
            run(module)
            queue_cap(module, fraction)

        loader.exec_module = exec_module
        return spec


def install():
    """Arm the cap when RAYSWEEP_GPU_MEMORY_FRACTION holds a fraction in (0, 1)."""
    try:
        fraction = float(os.environ.get(FRACTION_ENV, ""))
    except ValueError:
        return
    if not 0 < fraction < 1:
        return
    if "torch.cuda" in sys.modules:  # imported by an earlier start-up hook
        queue_cap(sys.modules["torch.cuda"], fraction)
    else:
        sys.meta_path.insert(0, CapWhenTorchLoads(fraction))


def run_shadowed_sitecustomize():
    """Run the next `sitecustomize` on sys.path after this folder, under that name, as `site` does."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


install()
run_shadowed_sitecustomize()
