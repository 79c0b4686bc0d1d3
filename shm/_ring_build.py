"""cffi out-of-line API-mode build of shm._ringext from shm/ring.h and shm/ring.c.

The cdef is the CDEF section of ring.h, so the record layout is declared exactly once.
Built by setup.py (``cffi_modules``): ``pip install --no-build-isolation -e .`` rebuilds
shm/_ringext*.so after a change to ring.h or ring.c.
"""

from __future__ import annotations

import os

from cffi import FFI

_HERE = os.path.dirname(os.path.abspath(__file__))


def _cdef_text() -> str:
    with open(os.path.join(_HERE, "ring.h"), encoding="utf-8") as f:
        text = f.read()
    return text.split("/* CDEF BEGIN */", 1)[1].split("/* CDEF END */", 1)[0]


# Glue that only makes sense inside the CPython extension: cffi passes a `bytes` argument to a
# `const char *` parameter as a pointer to the object's own buffer (no copy), so the length can
# be read from the object header instead of being passed (4 fewer converted arguments per
# publish).  ring.py probes this at import (`ykr_bytes_len_probe`) and falls back to
# `ykr_publish` with explicit lengths if the interpreter lays bytes out differently.
_GLUE_CDEF = """
int64_t ykr_publish_b(ykr_view *v, int type, int change_type, int change_detail, int64_t ts,
                      const char *obj, const char *ref, const char *msg, const char *res);
int64_t ykr_publish_b2(ykr_view *v, int type, int change_type, int change_detail,
                       const char *obj, const char *ref);
int64_t ykr_publish_b3(ykr_view *v, int type, int change_type, int change_detail,
                       const char *obj, const char *ref, const char *res);
int64_t ykr_publish_p0(ykr_view *v, int type, int change_type, int change_detail,
                       const char *ref);
int64_t ykr_publish_p1(ykr_view *v, int type, int change_type, int change_detail,
                       const char *ref);
int64_t ykr_bytes_len_probe(const char *p);
int ykr_wait(ykr_header *h, uint32_t seen, double timeout);
"""

_GLUE_SRC = r"""
#include "ring.h"
#define YKR_BYTES_HDR (sizeof(PyVarObject) + sizeof(Py_hash_t))   /* offset of ob_sval */
static inline size_t ykr_blen(const char *p)
{
    return (size_t)((const PyVarObject *)(p - YKR_BYTES_HDR))->ob_size;
}
int64_t ykr_bytes_len_probe(const char *p) { return (int64_t)ykr_blen(p); }
int64_t ykr_publish_b(ykr_view *v, int type, int change_type, int change_detail, int64_t ts,
                      const char *obj, const char *ref, const char *msg, const char *res)
{
    return ykr_publish(v, type, change_type, change_detail, ts, obj, ykr_blen(obj), ref,
                       ykr_blen(ref), msg, ykr_blen(msg), res, ykr_blen(res));
}
/* Shorter entries for the common shapes: each `const char *` argument costs cffi ~45 ns and
 * each int ~12 ns to convert (measured), more than the C work of a publish, and most events
 * carry no message, and half of them no resource. Timestamp: now. */
int64_t ykr_publish_b2(ykr_view *v, int type, int change_type, int change_detail,
                       const char *obj, const char *ref)
{
    return ykr_publish(v, type, change_type, change_detail, 0, obj, ykr_blen(obj), ref,
                       ykr_blen(ref), "", 0, "", 0);
}
int64_t ykr_publish_b3(ykr_view *v, int type, int change_type, int change_detail,
                       const char *obj, const char *ref, const char *res)
{
    return ykr_publish(v, type, change_type, change_detail, 0, obj, ykr_blen(obj), ref,
                       ykr_blen(ref), "", 0, res, ykr_blen(res));
}
/* The pinned objectID (ykr_pin) and no resource (p0) or the pinned resource (p1): one string
 * argument left, the reference. */
int64_t ykr_publish_p0(ykr_view *v, int type, int change_type, int change_detail,
                       const char *ref)
{
    return ykr_publish_pinned(v, type, change_type, change_detail, ref, ykr_blen(ref), 0);
}
int64_t ykr_publish_p1(ykr_view *v, int type, int change_type, int change_detail,
                       const char *ref)
{
    return ykr_publish_pinned(v, type, change_type, change_detail, ref, ykr_blen(ref), 1);
}

/* The one call that blocks: a reader's FUTEX_WAIT on header.wake_seq (ring.c). It gives the GIL
 * back while it sleeps (explicitly: the macros below are emptied for every other function), so
 * the worker thread that waits does not stop the process's event loop. */
int ykr_wait(ykr_header *h, uint32_t seen, double timeout)
{
    PyThreadState *ts = PyEval_SaveThread();
    int rc = ykr_futex_wait(&h->wake_seq, seen, timeout);
    PyEval_RestoreThread(ts);
    return rc;
}

/* The functions of this module keep the GIL while they run. cffi's wrappers release and re-take
 * it around every call with these two macros, which costs ~40 ns, 15% of a publish (measured A/B
 * on the hot publish entry). Releasing only helps another Python thread of the same process run
 * meanwhile; every function here is bounded memory work that never waits (no I/O, no locks),
 * and no ykshm process calls them from more than one thread. The wrappers cffi generates follow
 * this preamble, so they see these definitions. */
#undef Py_BEGIN_ALLOW_THREADS
#undef Py_END_ALLOW_THREADS
#define Py_BEGIN_ALLOW_THREADS {
#define Py_END_ALLOW_THREADS }
"""

ffibuilder = FFI()
ffibuilder.cdef(_cdef_text() + _GLUE_CDEF)
ffibuilder.set_source(
    "shm._ringext",
    _GLUE_SRC,
    sources=[os.path.relpath(os.path.join(_HERE, "ring.c"))],
    include_dirs=[_HERE],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"],
)
