"""``python -m verl_offgrpo``, one idea per module:

* :mod:`.main` — the argument parser and the subcommands (``check``, ``config-dir``, ``compose``), usage errors
  on exit code 64;
* :mod:`.install_check` — ``check``: what the plugin registered and patched in this process, with proof;
* :mod:`.compose` — ``compose``: the shipped yaml + overrides composed and validated as main_ppo's driver does;
* :mod:`.paths` — where the shipped yaml lives, and the notes on local data/model paths missing here;
* :mod:`.quiet` — verl's import-time noise this CLI drops.

Importing any of them is cheap (standard library only at module level; hydra, omegaconf and verl inside the
functions), so :func:`.quiet.quiet_verl_imports` runs before verl is imported.
"""
