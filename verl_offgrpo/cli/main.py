"""``python -m verl_offgrpo`` (installed as ``verl-offgrpo`` too): self-check, the shipped config's location, a dry
composition.

    python -m verl_offgrpo check [-v] [--config-path DIR --config-name NAME] [overrides]
                                                   # the verdict and any problems; exit 1 if the plugin is not
                                                   # usable here; -v lists each registration, patch (live?) and
                                                   # verl internal; with overrides (or your yaml), also compose's
                                                   # validation
    python -m verl_offgrpo config-dir              # directory of off_grpo_trainer.yaml (for --config-path)
    python -m verl_offgrpo compose [--config-path DIR --config-name NAME] [overrides]
                                                   # compose + validate the full training config (the shipped
                                                   # yaml, or your own as main_ppo takes it), print it; notes
                                                   # data/model paths that do not exist here

Exit codes: 0 fine; 1 the plugin is not usable here (turned off, not loaded, a patch or the TransferQueue missing); 2
the plugin's checks reject the config; 3 a mandatory ``???`` value is still unset (or a null model path or data
file); 4 hydra cannot compose the config, or verl's ``validate_config`` or its workers' ``RolloutConfig`` rejects
it; 5 a value cannot be read (a ``${...}`` that does not resolve, a section set to null); 6 verl's
``validate_config`` needs what this machine lacks for the config (vLLM installed, the model hub): not checked here;
64 a usage error (an unknown flag: ``check`` and ``compose`` take hydra overrides and ``--config-path``/
``--config-name`` only).
"""

from __future__ import annotations

import argparse
import os
import sys

from .compose import dry_run
from .install_check import check
from .paths import config_dir
from .quiet import quiet_verl_imports

#: exit code of a usage error (BSD sysexits' EX_USAGE): argparse's own 2 is the plugin's checks' code here
EX_USAGE = 64
_OVERRIDES_ONLY = ("hydra overrides only (key=value; and --config-path/--config-name), not hydra's other "
                   "flags (--cfg, ...); hydra's "
                   "composition without the checks is main_ppo's --cfg job: python -m verl.trainer.main_ppo "
                   "--config-path \"$(python -m verl_offgrpo config-dir)\" --config-name off_grpo_trainer "
                   "<overrides> --cfg job")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on exit code :data:`EX_USAGE`, not 2 (the plugin's checks' code)."""

    #: the command line being parsed (set by :func:`main`), so an error can say which subcommand it was
    argv: list[str] = []

    def error(self, message):
        if "unrecognized arguments: " in message:
            flags = [arg for arg in message.split("unrecognized arguments: ", 1)[1].split() if arg.startswith("-")]
            if "config-dir" in self.argv[:1]:
                message += "; config-dir takes no arguments"
            else:
                message += ("; compose and check take " + _OVERRIDES_ONLY if flags
                            else "; put the overrides after the options (check's -v, compose's --path-hint)")
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """``python -m verl_offgrpo``'s parser: the subcommands check, config-dir and compose."""
    from verl_offgrpo import __version__

    prog = "verl-offgrpo" if os.path.basename(sys.argv[0]) == "verl-offgrpo" else "python -m verl_offgrpo"
    parser = _Parser(prog=prog, description=__doc__.replace("``", "`"),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"verl-offgrpo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser(
        "check", help="whether the plugin is usable here: the verdict and any problems (-v: each registration, patch "
        "and verl internal checked); exit 1 if the plugin is not usable here (its V1 trainer mode needs the TransferQueue); "
        "with overrides (or your yaml), also compose's validation of the yaml + overrides (compose's one-line error and exit "
        "code 2/3/4/5/6; no yaml)",
        description="Self-check: the plugin's registrations, patches and versions, for the shipped yaml (+ overrides): "
        "the verdict, the versions, the config and any problems (in full), or with -v everything checked; "
        "exit 1 if the plugin is not usable here (its V1 trainer mode needs the TransferQueue). Given overrides or "
        "your yaml (--config-path/--config-name, as compose), check also validates the config exactly as compose does "
        "(same one-line error, same exit code 2/3/4/5/6: 6 where verl's checks need what this machine lacks, e.g. vLLM "
        "for LoRA; the yaml is not printed); without them the config is not validated (the shipped yaml alone is not "
        "runnable). Takes " + _OVERRIDES_ONLY)
    p_check.add_argument("-v", "--verbose", action="store_true",
                         help="list each registration, patch target (live in this process?) and verl internal the "
                         "check looked at; by default only the verdict, the versions, the config and any problems "
                         "(problems are always printed in full)")
    for p in (p_check,):  # your own yaml, as compose takes it
        p.add_argument("--config-path", metavar="DIR", help="the directory of your yaml, absolute (as compose)")
        p.add_argument("--config-name", metavar="NAME", help="your yaml's name (with --config-path)")
    p_check.add_argument("overrides", nargs="*", help="hydra overrides of the shipped yaml (or yours), as for "
                         "compose/main_ppo")
    sub.add_parser("config-dir", help="print the directory of the shipped yaml")
    p_compose = sub.add_parser(
        "compose", help="compose + validate the training config (no GPU), print it",
        description="Compose the shipped yaml + overrides and validate it as main_ppo's driver does, without Ray or "
        "a GPU: exit 0 and the yaml on stdout, or one line on stderr: 1 the plugin is not usable here, 2 the "
        "plugin's checks, 3 a ??? value still unset (or a null model path or data file), 4 hydra or verl's "
        "validate_config, 5 a value that cannot be read "
        "(a ${...} that does not resolve, a section set to null), 6 verl's validate_config needs what this machine "
        "lacks (vLLM installed, the model hub): not checked here, the plugin's checks (where they apply) passed; 64 a "
        "usage error. "
        + "Takes hydra overrides and main_ppo's --config-path/--config-name (your own yaml; an absolute path, as "
        "main_ppo reads a relative one from verl/trainer/); other hydra flags (--cfg, ...) are main_ppo's.")
    p_compose.add_argument("--config-path", metavar="DIR", help="the directory of your yaml, absolute, as main_ppo's "
                           "--config-path (default: the shipped yaml's, `python -m verl_offgrpo config-dir`)")
    p_compose.add_argument("--config-name", metavar="NAME", help="your yaml's name, as main_ppo's --config-name "
                           "(with --config-path; default: off_grpo_trainer)")
    p_compose.add_argument("--path-hint", action="append", default=[], nargs=2, metavar=("PATH", "TEXT"),
                           help="what the note about PATH says in parentheses if PATH does not exist here "
                           "(the recipes: how to make their data); repeatable")
    p_compose.add_argument("overrides", nargs="*", help="hydra overrides, as for main_ppo (no --cfg)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand of ``argv`` (``sys.argv[1:]`` when None); its exit code."""
    parser = build_parser()
    _Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "config-dir":
        print(config_dir())
        return 0
    quiet_verl_imports()  # before verl is imported
    if bool(args.config_path) != bool(args.config_name):
        parser.error("--config-path and --config-name go together (your yaml's directory and name); without "
                     "them compose reads the shipped yaml")
    if args.config_path and not os.path.isabs(os.path.expanduser(args.config_path)):
        parser.error(f"--config-path {args.config_path} is relative, which main_ppo (hydra) reads from "
                     f"verl/trainer/, not from here: pass an absolute path, e.g. \"$(pwd)/{args.config_path}\"")
    if args.command == "check":
        return check(args.overrides, verbose=args.verbose, config_path=args.config_path, config_name=args.config_name)
    return dry_run(args.overrides, dict(args.path_hint), args.config_path, args.config_name)
