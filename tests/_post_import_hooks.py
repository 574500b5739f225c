"""Whether a patch module's ``install`` leaves a post-import hook on its verl module (shared by the patch tests
whose patch installs itself as one: test_final_outputs.py, test_chunked_logprobs.py)."""

import sys

from verl_offgrpo.patches import post_import


def install_leaves_a_hook(patch, environ, monkeypatch) -> bool:
    """``patch.install(environ)`` with ``patch.MODULE`` not yet imported: True if it left a hook; the hook is
    removed after."""
    monkeypatch.delitem(sys.modules, patch.MODULE, raising=False)
    assert post_import.installed_hook(patch.MODULE) is None
    try:
        patch.install(environ)
        return post_import.installed_hook(patch.MODULE) is not None
    finally:
        if (hook := post_import.installed_hook(patch.MODULE)) is not None:
            hook.remove()
