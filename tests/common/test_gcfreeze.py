"""common.gcfreeze: full collections skip old survivors, yet old cyclic garbage is still found.

Each test runs in a child interpreter: the callback is process-wide, and pytest's own process
must keep CPython's default collector.
"""

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_a_long_lived_cache_is_frozen_after_a_full_collection_and_not_walked_again():
    out = _run("""
        import gc, time
        from common import gcfreeze
        gcfreeze.install(); gcfreeze.install()          # idempotent
        assert sum(isinstance(cb, gcfreeze._FreezeAfterFull) for cb in gc.callbacks) == 1
        cache = [{"metadata": {"name": f"p{i}", "labels": {"a": "b"}}} for i in range(200_000)]
        gc.collect()
        frozen = gc.get_freeze_count()
        walked = sum(len(g) for g in (gc.get_objects(0), gc.get_objects(1), gc.get_objects(2)))
        print(frozen >= 400_000, walked < 10_000)   # 2 tracked dicts an item
    """)
    assert out == "True True"


def test_frozen_objects_are_still_freed_by_reference_counting():
    out = _run("""
        import gc, weakref
        from common import gcfreeze
        gcfreeze.install()
        class Obj: pass
        o = Obj(); ref = weakref.ref(o)
        gc.collect()
        assert gc.get_freeze_count() > 0
        del o
        print(ref() is None)
    """)
    assert out == "True"


def test_old_cyclic_garbage_is_found_by_the_periodic_whole_heap_collection():
    out = _run("""
        import gc, weakref
        from common import gcfreeze
        gcfreeze.install(whole_heap_every=5)
        class Node: pass
        a, b = Node(), Node(); a.other, b.other = b, a    # a cycle
        ref = weakref.ref(a)
        gc.collect()                                      # survives: frozen
        del a, b
        alive = []
        for _ in range(5):
            gc.collect()
            alive.append(ref() is not None)
        print(alive)
    """)
    # frozen: the next full collections do not see the dead cycle; the 5th walks everything
    assert out == "[True, True, True, False, False]"
