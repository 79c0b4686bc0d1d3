"""`ykshm --version`, shell completion generated from the argparse tree, and `ykshm bench` with no
benchmark as one stderr line (issue 35.6; newcomer-2's bad inputs)."""

from __future__ import annotations

import shutil
import subprocess
from importlib.metadata import version

import pytest

from ykcli import ROOT, env, ykshm, ykshm_argv


@pytest.mark.parametrize("flag", ["--version", "-V", "version"])
def test_version(flag):
    r = ykshm(flag)
    assert r.returncode == 0 and r.stdout.decode() == f"ykshm {version('ykshm')}\n" and r.stderr == b""


def test_bench_without_a_benchmark_is_one_stderr_line_exit_2():
    r = ykshm("bench")
    assert r.returncode == 2 and r.stdout == b""
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm bench: error: which benchmark? choose from ring,")


def complete_bash(words: str) -> list[str]:
    """What bash's completion offers after `words` (the last word is the one being completed)."""
    script = subprocess.run(ykshm_argv("completion", "bash"), capture_output=True, text=True, cwd=ROOT,
                            env=env(), timeout=60, check=True).stdout
    parts = words.split(" ")
    program = "\n".join([
        script,
        f"COMP_WORDS=({' '.join(repr(w) for w in parts)}); COMP_CWORD={len(parts) - 1}",
        "_ykshm; printf '%s\\n' \"${COMPREPLY[@]}\"",
    ])
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_bash_accepts_the_script_and_completes_from_the_argparse_tree():
    cmd = " ".join(ykshm_argv())
    out = subprocess.run(["bash", "-c", f"source <({cmd} completion bash); complete -p ykshm"],
                         capture_output=True, text=True, cwd=ROOT, env=env(), timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "complete -o bashdefault -o default -F _ykshm ykshm", \
        out.stderr
    assert {"run", "status", "ring", "sim-cluster", "completion"} <= set(complete_bash("ykshm "))
    assert complete_bash("ykshm ring st") == ["stat"]
    assert complete_bash("ykshm run --adm") == ["--admission-port"]
    assert complete_bash("ykshm run --port 9090 --log-f") == ["--log-format"]
    assert complete_bash("ykshm ring stat --name x --j") == ["--json"]
    assert complete_bash("ykshm shim st") == ["status"]
    assert complete_bash("ykshm bench re") == ["retention", "regions", "report"]
    # a flag added to a parser is completed without touching the completion code
    assert "--log-level" in complete_bash("ykshm web --")


def test_zsh_loads_the_script_and_registers_it():
    assert shutil.which("zsh"), "zsh is needed for this test (.ci/run installs it: apt-get install zsh)"
    cmd = " ".join(ykshm_argv())
    out = subprocess.run(["zsh", "-c", f"autoload -U compinit; compinit -u; source <({cmd} completion zsh); "
                                       "print $+functions[_ykshm] ${_comps[ykshm]}"],
                         capture_output=True, text=True, cwd=ROOT, env=env(), timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["1", "_ykshm"], out.stderr
    script = subprocess.run(ykshm_argv("completion", "zsh"), capture_output=True, text=True, cwd=ROOT,
                            env=env(), timeout=60).stdout
    assert "'stat:" in script and "'--admission-port'" in script


def test_an_unknown_shell_is_one_line_exit_2():
    r = ykshm("completion", "fish")
    assert r.returncode == 2
    assert r.stderr.decode().splitlines() == [
        "ykshm completion: error: argument shell: invalid choice: 'fish' (choose from 'bash', 'zsh')"]
