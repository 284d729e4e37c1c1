"""Ray's private API is used in one package only (`trainables/ray_private/`), whose Ray range pyproject pins."""

from __future__ import annotations

import re
from pathlib import Path

import ray

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomllib is 3.11+; tomli is the same parser (a dev dependency there)
    import tomli as tomllib

from trainables import ray_private

ROOT = Path(__file__).resolve().parents[2]
# `import ray._private...`, `from ray.train._internal... import`, `ray._raylet`, `ray.tune.execution`,
# and underscore names of Ray modules read as attributes (`ray._private.worker`).
PRIVATE = re.compile(r"\bray(\.[A-Za-z0-9_]+)*\.(_[A-Za-z]\w*|execution)\b")
ALLOWED = {*(ROOT / "trainables" / "ray_private").glob("*.py"), Path(__file__).resolve()}


def code_lines(path: Path):
    """(line number, line) of `path` outside comments and docstrings that only name a module."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        if re.search(r"\b(import|from)\b", code) or re.search(r"\bray\.\w", code):
            if "`" not in code and not code.strip().startswith(('"', "'")):
                yield number, code


def test_no_file_but_ray_private_uses_ray_private_modules():
    offenders = []
    for folder in ("sweeps", "trainables", "analysis", "benchmarks", "tests", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() in ALLOWED:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}:{n}: {code.strip()}" for n, code in code_lines(path) if PRIVATE.search(code)
            ]
    assert offenders == [], "Ray's private API outside trainables/ray_private/:\n" + "\n".join(offenders)


def test_the_grep_catches_each_form():
    lines = [
        "from ray.train._internal.session import get_session",
        "from ray._raylet import GcsClient",
        "    url = ray._private.worker.get_dashboard_url()",
        "from ray.tune.execution.placement_groups import PlacementGroupFactory",
    ]
    assert all(PRIVATE.search(line) for line in lines)
    assert not PRIVATE.search("from ray.tune.search import BasicVariantGenerator")
    assert not PRIVATE.search("from ray import tune")


def test_pyproject_pins_the_range_the_module_names_and_ray_installed_is_in_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = next(d for d in project["dependencies"] if d.startswith("ray["))
    low, high = re.fullmatch(r"ray\[[^\]]*\]>=(\d+\.\d+),<(\d+\.\d+)", pin).groups()
    assert f"tested with Ray {low}-" in ray_private.__doc__ and f"<{high}`" in ray_private.__doc__
    installed = tuple(int(x) for x in ray.__version__.split(".")[:2])
    assert tuple(map(int, low.split("."))) <= installed < tuple(map(int, high.split(".")))


def test_tunes_callback_usage_record_counts_by_name_as_ray_does():
    """`count_callbacks_by_name` gives Ray's counts (built-in names, custom loggers, custom callbacks; what is
    not a callback left out) without importing the tracker integrations Ray's own count imports."""
    from ray import tune
    from ray.air._internal import usage
    from ray.tune.logger import CSVLoggerCallback, LoggerCallback

    class MyLogger(LoggerCallback):
        pass

    class WandbLoggerCallback(tune.Callback):  # a name Ray counts as its integration, as Ray does
        pass

    assert ray_private.count_callbacks_by_name() and ray_private.count_callbacks_by_name()  # idempotent
    counts = usage._count_callbacks([CSVLoggerCallback(), MyLogger(), tune.Callback(), tune.Callback(), object()])
    assert dict(counts) == {"CSVLoggerCallback": 1, "CustomLoggerCallback": 1, "CustomCallback": 2}
    assert dict(usage._count_callbacks([WandbLoggerCallback()])) == {"WandbLoggerCallback": 1}
    assert not usage._count_callbacks(None)
