"""`ykshm completion bash|zsh`: a shell completion script generated from the argparse tree.

    source <(ykshm completion bash)                        # ~/.bashrc
    source <(ykshm completion zsh)                         # ~/.zshrc, after compinit

The tree is read, not written twice: the command table (`tools.cli.SUBCOMMANDS`, and
`bench.cli.BENCHMARKS` below `ykshm bench`) names the subcommands, and each subcommand's own
parser gives its flags and sub-subcommands (`ykshm ring stat`). The parsers are built inside each
module's `main`, so `parser_of` runs that `main` with `--help` and takes the parser at its first
`parse_known_args`, before it parses anything (no module grows a second way to build its parser).
A subcommand completes its flags; a word after a flag that takes a value completes file names (the
shell's default), as kubectl's completion does for arguments it cannot know.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.cliutil import Parser, run_main

PROG = "ykshm completion"


@dataclass
class Node:
    """One command of the tree: its help line, its flags and its subcommands."""

    help: str = ""
    flags: list[str] = field(default_factory=list)
    children: dict[str, Node] = field(default_factory=dict)


# subcommands a role's main dispatches before argparse (`ykshm shim status`): no parser names them
BY_HAND = {"shim": {"status": "the running shim's state, history and bindings (its status file)"},
           "realk8s": {"build": "build etcd, kube-apiserver, kube-controller-manager and kube-scheduler (Go) into the cache",
                       "build-peers": "build Apache YuniKorn's scheduler and KWOK into the cache",
                       "run": "run a command against a real control plane in a network namespace of its own"}}


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def parser_of(main: Callable[[Sequence[str]], object]) -> argparse.ArgumentParser | None:
    """The parser `main` builds, taken at its first parse (see the module docstring)."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a main that prints its usage by hand
            main(["--help"])
    except _Captured as got:
        return got.parser
    except (Exception, SystemExit):  # noqa: BLE001 - a main that parses by hand: no flags known
        return None
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    return None


def node_of(parser: argparse.ArgumentParser, help_: str = "") -> Node:
    node = Node(help=help_)
    for action in parser._actions:
        node.flags += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.children[name] = node_of(sub, helps.get(name, ""))
    return node


def _main_of(spec: str) -> Callable[[Sequence[str]], object]:
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function or "main")


def tree() -> Node:
    """The whole `ykshm` command tree."""
    from bench.cli import BENCHMARKS
    from tools.cli import SUBCOMMANDS

    root = Node(flags=["--help", "--version"])
    for name, (spec, help_) in SUBCOMMANDS.items():
        if name == "bench":
            bench = Node(help=help_, flags=["--help"])
            for bname, (bspec, bhelp) in BENCHMARKS.items():
                parser = parser_of(_main_of(bspec))
                bench.children[bname] = node_of(parser, bhelp) if parser else Node(help=bhelp, flags=["--help"])
            root.children[name] = bench
            continue
        parser = parser_of(_main_of(spec))
        root.children[name] = node_of(parser, help_) if parser else Node(help=help_, flags=["--help"])
        for sub, sub_help in BY_HAND.get(name, {}).items():
            parser = parser_of(lambda argv, main=_main_of(spec), sub=sub: main([sub, *argv]))
            root.children[name].children[sub] = (node_of(parser, sub_help) if parser
                                                 else Node(help=sub_help, flags=["--help"]))
    root.children["completion"] = Node(help="print a bash or zsh completion script",
                                       children={"bash": Node(), "zsh": Node()})
    return root


def _paths(node: Node, path: str = "") -> list[tuple[str, Node]]:
    """(cmd/sub, node) for every node, depth-first; the root is ""."""
    out = [(path, node)]
    for name, child in node.children.items():
        out += _paths(child, f"{path}/{name}" if path else name)
    return out


def _words(node: Node) -> str:
    return " ".join([*node.children, *node.flags])


def bash_script(root: Node) -> str:
    """A `complete -F` function: the first two words that are not flags pick the node."""
    cases = []
    for path, node in _paths(root):
        pattern = f'"{path}"' if node.children or not path else f'"{path}"|"{path}/"*'
        cases.append(f"        {pattern}) words='{_words(node)}' ;;")
    return "\n".join([
        "# bash completion for ykshm, generated by `ykshm completion bash`",
        "_ykshm() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" w i words=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        [[ $w == -* ]] && continue',
        '        [[ ${COMP_WORDS[i-1]} == --* && $i -gt 1 && $path != "" ]] && continue',
        '        path="${path:+$path/}$w"',
        "    done",
        '    case "$path" in',
        *cases,
        "    esac",
        '    if [[ $cur == -* || -n $words && $prev != --* ]]; then',
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "    fi",
        "}",
        "complete -o bashdefault -o default -F _ykshm ykshm",
        "",
    ])


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def zsh_script(root: Node) -> str:
    """A native zsh completion function (`_describe` shows each subcommand's help)."""
    cases = []
    for path, node in _paths(root):
        items = [f"{name.replace(':', chr(92) + ':')}:{child.help}" for name, child in node.children.items()]
        pattern = f"'{path}'" if node.children or not path else f"'{path}'|'{path}/'*"
        cases.append(f"    ({pattern}) subs=({' '.join(_zsh_quote(i) for i in items)}); "
                     f"flags=({' '.join(_zsh_quote(f) for f in node.flags)}) ;;")
    return "\n".join([
        "#compdef ykshm",
        "# zsh completion for ykshm, generated by `ykshm completion zsh`",
        "_ykshm() {",
        "  local path_='' w i",
        "  local -a subs flags",
        "  for (( i = 2; i < CURRENT; i++ )); do",
        "    w=${words[i]}",
        "    [[ $w == -* ]] && continue",
        "    [[ ${words[i-1]} == --* && -n $path_ ]] && continue",
        "    path_=${path_:+$path_/}$w",
        "  done",
        "  case $path_ in",
        *cases,
        "  esac",
        "  if [[ ${words[CURRENT]} == -* ]]; then",
        "    compadd -a flags",
        "  elif (( ${#subs} )); then",
        "    _describe 'command' subs",
        "  else",
        "    _files",
        "  fi",
        "}",
        "if (( $+functions[compdef] )); then compdef _ykshm ykshm; fi",
        "",
    ])


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Print a shell completion script for ykshm.")
    parser.add_argument("shell", choices=["bash", "zsh"])
    args = parser.parse_args(list(argv))
    root = tree()
    sys.stdout.write(bash_script(root) if args.shell == "bash" else zsh_script(root))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))
