"""README.md is exact (issue 35.4): every `ykshm ...` command in it names a subcommand and flags
that exist (read from the same argparse tree `ykshm completion` uses), and every link stays inside
the repository."""

from __future__ import annotations

import re
from pathlib import Path

from ykcli import ROOT

from tools.completion import Node, tree

README = ROOT / "README.md"
# a word that stands for something the reader fills in: FILE, NAME=..., <role>, ARGS..., "..."
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[=.:,][^\s]*)?|<[^>]*>|\.\.\.|ARGS\.\.\.|\S*\.\.\.)$")


def code_spans(text: str) -> list[str]:
    """The fenced code blocks' lines and the inline `code` spans of a Markdown text (not a
    ```text block: output shown, not commands)."""
    spans, fenced, output, inline_text = [], False, False, []
    for line in text.splitlines():
        if line.startswith("```"):
            fenced, output = not fenced, line.strip() == "```text"
            continue
        if fenced:
            if not output:
                spans.append(line.split("  #")[0])
        else:
            inline_text.append(line)
    joined = "\n".join(inline_text)
    spans += [m.group(1).replace("\n", " ") for m in re.finditer(r"`([^`]+)`", joined)]
    return spans


def commands(span: str) -> list[list[str]]:
    """The word lists after each `ykshm` that starts a command in a span (`.venv/bin/ykshm`, after
    `&&`, `;`, `|`, `$(`)."""
    out = []
    for part in re.split(r"&&|;|\|\||\$\(|(?<![a-z-])\|(?![a-z-])", span):
        words = part.strip().split()
        if words and re.fullmatch(r"(?:\S*/)?ykshm", words[0]) and len(words) > 1:
            out.append(words[1:])
    return out


def check(words: list[str], root: Node) -> list[str]:
    """What is wrong with one command: an unknown subcommand or an unknown flag."""
    node, path = root, "ykshm"
    while words and not words[0].startswith("-") and node.children:
        alternatives = words[0].split("|")
        if PLACEHOLDER.match(words[0]):
            return []       # `ykshm <role> ...`: nothing to check beyond it
        unknown = [a for a in alternatives if a not in node.children]
        if unknown:
            return [f"{path} has no subcommand {unknown[0]!r}"]
        node, path = node.children[alternatives[0]], f"{path} {alternatives[0]}"
        words = words[1:]
    problems = []
    for word in words:
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", word):
            if flag not in node.flags:
                problems.append(f"{path} has no flag {flag}")
    return problems


def test_every_ykshm_command_in_the_readme_exists():
    root = tree()
    found, problems = 0, []
    for span in code_spans(README.read_text()):
        for words in commands(span):
            found += 1
            problems += [f"`ykshm {' '.join(words)}`: {p}" for p in check(words, root)]
    assert found > 40
    assert problems == []


def test_the_checker_catches_a_wrong_command():
    root = tree()
    assert check(["run", "--ykshm-image", "X"], root) == ["ykshm run has no flag --ykshm-image"]
    assert check(["cr-operator", "--hypercorn-only"], root) == ["ykshm cr-operator has no flag --hypercorn-only"]
    assert check(["ring", "stat|bogus"], root) == ["ykshm ring has no subcommand 'bogus'"]
    assert check(["sim-cluster", "--ykshm-image", "X"], root) == []
    assert commands("python3 -m venv .venv && .venv/bin/ykshm run --port 1") == [["run", "--port", "1"]]


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_no_link_leaves_the_repository():
    for doc in [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "simcluster" / "README.md"]:
        for target in links(doc.read_text()):
            if re.match(r"https?://", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"{doc.relative_to(ROOT)}: link {target}"
    # and no prose pointer to a document a clone does not have
    assert "shared DESIGN.md" not in README.read_text()


def test_the_by_hand_sim_cluster_starts_with_nodes(tmp_path):
    """The README's by-hand `ykshm sim-cluster ...` line, run as printed (its port and PKI
    directory moved to free ones): `kubectl get nodes` lists Ready nodes, so the kustomization's
    pods have somewhere to go (newcomer-2 row 39: 0 nodes, every pod Pending)."""
    import subprocess

    from tests.simcluster.test_simcluster import start_cluster, stop_cluster

    line = next(s for s in code_spans(README.read_text()) if s.startswith("ykshm sim-cluster --port 6443"))
    words = line.split()[2:]
    words[words.index("--port") + 1] = "0"
    words[words.index("--pki-dir") + 1] = str(tmp_path / "pki")
    nodes = int(words[words.index("--nodes") + 1])
    assert nodes > 0
    proc, _ = start_cluster(*words[2:])        # start_cluster passes --port 0 itself
    try:
        out = subprocess.run(["kubectl", "--kubeconfig", str(tmp_path / "pki" / "admin.kubeconfig"), "get",
                              "nodes", "--no-headers"], capture_output=True, text=True, timeout=30,
                             env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
        assert out.returncode == 0, out.stderr
        assert [line.split()[1] for line in out.stdout.splitlines()] == ["Ready"] * nodes
    finally:
        stop_cluster(proc)


def test_the_line_that_puts_ykshm_on_path_works(tmp_path):
    """After the README's set-up (`python3 -m venv .venv && .venv/bin/pip install ...`), the one
    line it gives makes `ykshm` a command in a shell whose PATH does not have it."""
    import subprocess

    text = README.read_text()
    assert "`. .venv/bin/activate` makes every `ykshm ...` command below work as printed" in text
    assert (ROOT / ".venv" / "bin" / "activate").is_file(), "run the tests from the README's .venv"
    out = subprocess.run(["bash", "-c", "command -v ykshm || echo none; . .venv/bin/activate && ykshm --version"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["none", out.stdout.splitlines()[1]] and \
        out.stdout.splitlines()[1].startswith("ykshm ")
