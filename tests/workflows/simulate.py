"""Run a GitHub Actions workflow's ``run:`` steps here, on the CPU, so a broken step fails CI before a runner.

What is real and what stands in (every stand-in is listed here, nothing else is changed):

* Each job runs in a fresh copy of the working tree (a git repository whose ``origin/main`` is its HEAD), its
  ``run:`` steps with ``bash -eo pipefail`` as GitHub runs them, with the workflow's, job's and step's ``env``,
  ``GITHUB_OUTPUT``/``GITHUB_STEP_SUMMARY``/``GITHUB_REPOSITORY``... files and variables, job outputs, ``needs``,
  and ``if:`` conditions (a small evaluator for the expressions these workflows use).
* GPU -> CPU: ``PERF_DEVICE``/``--perf-device``/``--device`` ``cuda`` -> ``cpu``, profile ``nightly`` -> ``smoke``;
  an ``ab`` budget is cut to ``AB_BUDGET`` and an ``ops`` sweep to a few ops (``CHEAP_OPS``).
* ``uses:`` steps: checkout = the copy; upload/download-artifact = a shared folder; cache restore/save = a folder
  that survives between simulated nightlies; setup-python = the running interpreter.
* Commands on PATH: ``pip`` installs (``pip install -e ".[extras]"``, and scripts/uv_install.py's) are checked (the
  extras must exist in pyproject.toml, the path must be a checkout) but install nothing (the shared venv already has
  everything);
  ``python -m venv`` makes a folder whose ``bin/python``/``perfsuite`` run this interpreter; ``gh`` is recorded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
AB_BUDGET = "30s"  # the first pair always runs (abloop): pairs, JSON and verdicts, as with any budget
CHEAP_OPS = "--ops linear,rmsnorm --classes unit --backends torch --dtypes float32 --examples 2"

SHIM_PYTHON = r'''#!/usr/bin/env bash
# python stand-in: pip installs are checked, not done; venvs are folders of stand-ins; the rest is real.
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then shift 2; exec "$SIM_BIN/pip" "$@"; fi
# scripts/install.sh's uv install: checked like a pip install, not done (it would install into this interpreter)
case "$1" in */uv_install.py|uv_install.py)
  echo "uv-install $2" >> "$SIM_LOG"; exec "$SIM_PYTHON" "$SIM_CHECK_PIP" install -e "$2" ;;
esac
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  for d in "$@"; do case "$d" in -*|-m|venv) ;; *) dir="$d" ;; esac; done
  mkdir -p "$dir/bin"
  for t in python pip perfsuite pytest; do ln -sf "$SIM_BIN/$t" "$dir/bin/$t"; done
  printf 'export PATH="%s:$PATH"\n' "$(cd "$dir/bin" && pwd)" > "$dir/bin/activate"
  echo "venv $dir" >> "$SIM_LOG"; exit 0
fi
exec "$SIM_PYTHON" "$@"
'''
SHIM_PIP = r'''#!/usr/bin/env bash
echo "pip $*" >> "$SIM_LOG"
exec "$SIM_PYTHON" "$SIM_CHECK_PIP" "$@"
'''
SHIM_PERFSUITE = '#!/usr/bin/env bash\nexec "$SIM_BIN/python" -m perfsuite.cli "$@"\n'
SHIM_PYTEST = '#!/usr/bin/env bash\nexec "$SIM_BIN/python" -m pytest "$@"\n'
SHIM_GH = '#!/usr/bin/env bash\necho "gh $*" >> "$SIM_LOG"\n'
CHECK_PIP = r'''
"""Check a `pip install` line of a workflow: -e "PATH[extras]" must name a checkout and extras it declares."""
import re, sys, tomllib
from pathlib import Path
args = sys.argv[1:]
if not args or args[0] not in ("install", "uninstall"):
    sys.exit(f"simulated pip: only `pip install`/`pip uninstall` are expected, got {args}")
for i, a in enumerate(args):
    if a == "-e":
        m = re.fullmatch(r"(.+?)(\[([a-z0-9_,-]+)\])?", args[i + 1])
        path, extras = Path(m.group(1)), (m.group(3) or "").split(",")
        if not (path / "pyproject.toml").is_file():
            sys.exit(f"simulated pip: {path} is not a checkout (no pyproject.toml)")
        meta = tomllib.loads((path / "pyproject.toml").read_text())
        declared = meta["project"].get("optional-dependencies", {})
        missing = [e for e in extras if e and e not in declared]
        if missing:
            sys.exit(f"simulated pip: {path} declares no extra(s) {missing}; it has {sorted(declared)}")
'''


class StepFailed(AssertionError):
    pass


@dataclass
class Sim:
    """One simulated workflow run: shared artifacts and cache folders, the log of stand-in calls."""

    base: Path
    workflow: dict[str, Any]
    name: str
    env_overrides: dict[str, str] = field(default_factory=dict)
    extra_files: dict[str, Path] = field(default_factory=dict)  # repo path -> file, added to every checkout
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # job id -> outputs
    results: dict[str, str] = field(default_factory=dict)  # job id -> success | failure | skipped
    transcript: list[str] = field(default_factory=list)

    @property
    def artifacts(self) -> Path:
        return self.base / "artifacts"

    @property
    def cache(self) -> Path:
        return self.base / "cache"

    @property
    def log(self) -> Path:
        return self.base / "calls.log"


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def _s(v: Any) -> str:
    """A YAML scalar as GitHub sees it in a string context (true/false lower case)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def _shims(base: Path) -> Path:
    bin_dir = base / "shim-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("python", SHIM_PYTHON), ("python3", SHIM_PYTHON), ("pip", SHIM_PIP),
                       ("perfsuite", SHIM_PERFSUITE), ("pytest", SHIM_PYTEST), ("gh", SHIM_GH)):
        p = bin_dir / name
        p.write_text(text)
        p.chmod(0o755)
    (base / "check_pip.py").write_text(CHECK_PIP)
    return bin_dir


def checkout(dest: Path, extra_files: dict[str, Path] | None = None) -> None:
    """The working tree as a fresh repository: tracked and untracked-but-not-ignored files (plus
    ``extra_files``), one commit with fixed dates, so the same tree is always the same commit id."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    for rel, src in (extra_files or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    env = {**os.environ, "GIT_AUTHOR_NAME": "sim", "GIT_AUTHOR_EMAIL": "sim@localhost",
           "GIT_COMMITTER_NAME": "sim", "GIT_COMMITTER_EMAIL": "sim@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "sim"],
                ["git", "update-ref", "refs/remotes/origin/main", "HEAD"]):
        subprocess.run(cmd, cwd=dest, check=True, env=env, capture_output=True)


# ---- expressions -----------------------------------------------------------------------------------------

def _lookup(path: str, ctx: dict[str, Any]) -> Any:
    cur: Any = ctx
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part, "")
        else:
            return ""
    return cur


def evaluate(expr: str, ctx: dict[str, Any]) -> Any:
    """The subset of GitHub expressions these workflows use: contexts, literals, ==, !=, &&, ||, !, always()."""
    expr = expr.strip()
    py = re.sub(r"\b(always|success)\(\)", "True", expr)
    py = re.sub(r"\bfailure\(\)", "False", py)
    py = py.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)

    def ctx_ref(m: re.Match[str]) -> str:
        return repr(_lookup(m.group(0), ctx))

    py = re.sub(r"\b(github|matrix|needs|steps|env|inputs|runner)(\.[A-Za-z0-9_-]+)+", ctx_ref, py)
    if re.search(r"[A-Za-z_]\w*\(", py.replace("True", "").replace("False", "")):
        raise ValueError(f"expression not supported by the simulator: {expr}")
    return eval(py, {"__builtins__": {}}, {})


def render(text: str, ctx: dict[str, Any]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(m.group(1), ctx)), text)


def cpu(text: str) -> str:
    """GPU flags and values to their CPU equivalents, and cheap budgets."""
    text = re.sub(r"--perf-device[ =]cuda", "--perf-device cpu", text)
    text = re.sub(r"--device[ =]cuda", "--device cpu", text)
    text = re.sub(r"--budget \d+m", f"--budget {AB_BUDGET}", text)
    text = re.sub(r"\bperfsuite ops ", f"perfsuite ops {CHEAP_OPS} ", text)
    return text


def _cpu_env(env: dict[str, str]) -> dict[str, str]:
    out = dict(env)
    for k, v in env.items():
        if v == "cuda":
            out[k] = "cpu"
        if v.endswith("ExecutionProvider"):
            out[k] = "CPUExecutionProvider"
        if v == "nightly" and k.endswith("PROFILE"):
            out[k] = "smoke"
    return out


# ---- jobs --------------------------------------------------------------------------------------------------

def _uses(step: dict[str, Any], ctx: dict[str, Any], work: Path, sim: Sim) -> None:
    action = step["uses"].split("@")[0]
    w = {k: render(_s(v), ctx) for k, v in (step.get("with") or {}).items()}
    if action == "actions/checkout":
        checkout(work, sim.extra_files)
        assert w.get("persist-credentials") == "false", "checkout must not persist credentials"
    elif action == "actions/setup-python":
        pass
    elif action == "actions/upload-artifact":
        # like the action: the artifact's root is the least common ancestor of the search paths
        dest = sim.artifacts / w["name"]
        patterns = [p.strip() for p in w["path"].splitlines() if p.strip()]
        roots = []
        for pattern in patterns:
            parts = Path(pattern).parts
            stem = Path(*parts[:next((i for i, q in enumerate(parts) if any(c in q for c in "*?[")), len(parts))])
            fixed = stem if (work / stem).is_dir() or stem != Path(pattern) else stem.parent
            roots.append(work / fixed)
        root = Path(os.path.commonpath(roots)) if roots else work
        found = 0
        for pattern in patterns:
            for src in work.glob(pattern):
                rel = src.relative_to(root)
                if src.is_dir():
                    shutil.copytree(src, dest / rel, dirs_exist_ok=True)
                else:
                    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest / rel)
                found += 1
        if not found and w.get("if-no-files-found") == "error":
            raise StepFailed(f"upload-artifact {w['name']}: no files match {w['path']!r}")
    elif action == "actions/download-artifact":
        target = work / w.get("path", ".")
        names = [w["name"]] if "name" in w else sorted(
            p.name for p in sim.artifacts.glob(w.get("pattern", "*")) if p.is_dir())
        if not names or not all((sim.artifacts / n).is_dir() for n in names):
            raise StepFailed(f"download-artifact: no artifact {w}")
        for n in names:
            shutil.copytree(sim.artifacts / n, target if "name" in w else target / n, dirs_exist_ok=True)
    elif action == "actions/cache/restore":
        src = sim.cache / w["path"]
        if src.is_dir():
            shutil.copytree(src, work / w["path"], dirs_exist_ok=True)
    elif action == "actions/cache/save":
        shutil.copytree(work / w["path"], sim.cache / w["path"], dirs_exist_ok=True)
    else:
        raise StepFailed(f"the simulator does not know {action}; add it to tests/workflows/simulate.py")


def run_job(sim: Sim, job_id: str, matrix: dict[str, Any] | None = None) -> dict[str, str]:
    """Run one job (one matrix entry); returns its outputs. Raises StepFailed with the step's output tail."""
    wf, job = sim.workflow, sim.workflow["jobs"][job_id]
    work = sim.base / "runs" / f"{job_id}-{'-'.join(map(str, (matrix or {}).values()))}" / "repo"
    if work.exists():
        shutil.rmtree(work.parent)
    work.mkdir(parents=True)
    bin_dir = _shims(sim.base)
    gh = {"base_ref": "main", "repository": "perfsuite/perfsuite", "run_id": "1", "server_url": "https://github.com",
          "token": "simulated-token", "ref": "refs/heads/main", "event": {"pull_request": {"number": "1"}}}
    needs = {n: {"outputs": sim.outputs.get(n, {}), "result": sim.results.get(n, "skipped")}
             for n in _needs(job)}
    ctx: dict[str, Any] = {"github": gh, "matrix": matrix or {}, "needs": needs, "steps": {}, "env": {}}
    env = _cpu_env({k: render(_s(v), ctx) for k, v in (wf.get("env") or {}).items()})
    ctx["env"] = env
    env.update(_cpu_env({k: render(_s(v), ctx) for k, v in (job.get("env") or {}).items()}))
    files = {n: work.parent / n for n in ("output", "summary", "envfile")}
    for f in files.values():
        f.touch()
    outputs_of_steps: dict[str, dict[str, str]] = {}
    for i, step in enumerate(job["steps"]):
        ctx["steps"] = {k: {"outputs": v} for k, v in outputs_of_steps.items()}
        ctx["env"] = env
        cond = step.get("if")
        if cond is not None and not evaluate(str(cond).replace("${{", "").replace("}}", ""), ctx):
            sim.transcript.append(f"{job_id} step {i}: skipped ({cond})")
            continue
        if "uses" in step:
            _uses(step, ctx, work, sim)
            sim.transcript.append(f"{job_id} step {i}: {step['uses'].split('@')[0]}")
            continue
        step_env = {**env, **_cpu_env({k: render(_s(v), ctx) for k, v in (step.get("env") or {}).items()})}
        script = cpu(render(step["run"], ctx))
        files["output"].write_text("")
        proc_env = {**os.environ, **step_env, **sim.env_overrides,
                    "PATH": f"{bin_dir}:{os.environ['PATH']}", "SIM_BIN": str(bin_dir), "SIM_PYTHON": sys.executable,
                    "SIM_LOG": str(sim.log), "SIM_CHECK_PIP": str(sim.base / "check_pip.py"),
                    "GITHUB_OUTPUT": str(files["output"]), "GITHUB_STEP_SUMMARY": str(files["summary"]),
                    "GITHUB_ENV": str(files["envfile"]), "GITHUB_REPOSITORY": gh["repository"],
                    "GITHUB_WORKSPACE": str(work), "CI": "true"}
        proc_env.pop("VIRTUAL_ENV", None)
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=work, env=proc_env, capture_output=True,
                              text=True, timeout=900)
        name = step.get("name", script.splitlines()[0])
        sim.transcript.append(f"{job_id} step {i} ({name}): exit {proc.returncode}")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise StepFailed(f"{sim.name} job {job_id} {matrix or ''} step {name!r} exited {proc.returncode}:\n"
                             f"$ {script}\n{tail}")
        if "id" in step:
            outputs_of_steps[step["id"]] = dict(
                line.split("=", 1) for line in files["output"].read_text().splitlines() if "=" in line)
    ctx["steps"] = {k: {"outputs": v} for k, v in outputs_of_steps.items()}
    outs = {k: render(_s(v), ctx) for k, v in (job.get("outputs") or {}).items()}
    sim.outputs[job_id] = outs
    (sim.base / f"summary-{job_id}.md").write_text(files["summary"].read_text())
    return outs


def _needs(job: dict[str, Any]) -> list[str]:
    n = job.get("needs") or []
    return [n] if isinstance(n, str) else list(n)


def matrix_entries(job: dict[str, Any]) -> list[dict[str, Any]]:
    m = (job.get("strategy") or {}).get("matrix")
    if not m:
        return [{}]
    entries: list[dict[str, Any]] = [{}]
    for k, values in m.items():
        entries = [{**e, k: v} for e in entries for v in values]
    return entries


def job_condition(sim: Sim, job_id: str) -> bool:
    job = sim.workflow["jobs"][job_id]
    cond = job.get("if")
    needs = {n: {"outputs": sim.outputs.get(n, {}), "result": sim.results.get(n, "skipped")} for n in _needs(job)}
    if cond is None:
        return all(sim.results.get(n) == "success" for n in _needs(job))
    return bool(evaluate(str(cond), {"needs": needs, "github": {}, "matrix": {}, "steps": {}, "env": {}}))


def pyproject_extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def calls(sim: Sim) -> list[str]:
    return sim.log.read_text().splitlines() if sim.log.exists() else []


def command_lines(script: str) -> list[str]:
    return [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]


__all__ = ["Sim", "StepFailed", "calls", "checkout", "command_lines", "cpu", "evaluate", "job_condition", "json",
           "load", "matrix_entries", "pyproject_extras", "run_job", "shlex"]
