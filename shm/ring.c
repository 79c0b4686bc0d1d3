/* ykshm shared-memory event ring: writer hot path, readers, JSON renderer, verifier.
 *
 * One writer (serialised by flock in Python), any number of read-only readers.  The writer
 * never waits: readers validate every record with the slot's seqlock after copying it and
 * after reading the interned strings it references, so a record whose slot (and therefore
 * strings) changed underneath the reader is discarded, never returned.
 */
#include <string.h>
#include <time.h>
#include <limits.h>
#include <unistd.h>
#include <errno.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include "ring.h"

#define MAGIC_EVENTS 0x31564556524B5359ULL   /* "YSKRVEV1" little-endian */
#define MAGIC_REQUESTS 0x31565152524B5359ULL /* "YSKRRQV1" */
#define NONE32 0xFFFFFFFFu

#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE_REL(p, x) __atomic_store_n((p), (x), __ATOMIC_RELEASE)
#define STORE_RLX(p, x) __atomic_store_n((p), (x), __ATOMIC_RELAXED)

_Static_assert(sizeof(ykr_record) == YKR_RECORD_SIZE, "record is 40 bytes, no padding");
_Static_assert(sizeof(ykr_entry) == 20, "entry is 20 bytes");
_Static_assert(sizeof(ykr_header) <= YKR_HEADER_SIZE, "header fits its page");
_Static_assert(sizeof(ykr_req_slot) == YKR_REQ_SLOT_SIZE, "request slot is 4096 bytes");

static const char OVERFLOW_MARK[] = "<ykshm:intern-table-full>";

/* ------------------------------------------------------------------ layout */

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static uint64_t next_pow2(uint64_t x)
{
    uint64_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* The stable seq of the slot holding event `id`: 2*lap+2 with lap = id / capacity counted modulo
 * YKR_LAP_MOD, so it is never 0 ("never written") and 2*lap+1 (odd) marks a write in progress.
 * A reader could only mistake another record for `id` if the writer lapped the slot 2^31 - 1
 * times between the reader's two loads of seq. */
static inline uint32_t lap_seq(const ykr_view *v, uint64_t id)
{
    return (uint32_t)(2 * ((id / v->capacity) % YKR_LAP_MOD) + 2);
}

void ykr_events_layout(uint64_t capacity, ykr_layout *o)
{
    o->entries_capacity = capacity / 16 + 1024;
    o->buckets_capacity = next_pow2(o->entries_capacity);
    o->arena_capacity = round_up(capacity * 3 / 2 + (1u << 20), 64);
    o->off_records = YKR_HEADER_SIZE;
    o->off_entries = round_up(o->off_records + capacity * YKR_RECORD_SIZE, 64);
    o->off_buckets = round_up(o->off_entries + o->entries_capacity * sizeof(ykr_entry), 64);
    o->off_arena = round_up(o->off_buckets + o->buckets_capacity * 4, 64);
    o->total_size = round_up(o->off_arena + o->arena_capacity, 4096);
}

void ykr_requests_layout(uint64_t capacity, ykr_layout *o)
{
    memset(o, 0, sizeof *o);
    o->off_records = YKR_HEADER_SIZE;
    o->off_entries = o->off_buckets = o->off_arena = YKR_HEADER_SIZE + capacity * YKR_REQ_SLOT_SIZE;
    o->total_size = o->off_arena;
}

int64_t ykr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int ykr_init(uint8_t *base, uint64_t size, uint32_t kind, uint64_t capacity,
             const uint8_t *uuid16, int64_t now_nano)
{
    ykr_layout L;
    if (kind == YKR_KIND_EVENTS) ykr_events_layout(capacity, &L);
    else if (kind == YKR_KIND_REQUESTS) ykr_requests_layout(capacity, &L);
    else return -YKR_E_KIND;
    if (size < L.total_size) return -YKR_E_SIZE;
    ykr_header *h = (ykr_header *)base;
    memset(h, 0, YKR_HEADER_SIZE);   /* the rest of a fresh ftruncate'd file is zero */
    h->version = YKR_LAYOUT_VERSION;
    h->header_size = YKR_HEADER_SIZE;
    memcpy(h->instance_uuid, uuid16, 16);
    h->capacity = capacity;
    h->record_size = kind == YKR_KIND_EVENTS ? YKR_RECORD_SIZE : YKR_REQ_SLOT_SIZE;
    h->segment_kind = kind;
    h->total_size = L.total_size;
    h->entries_capacity = L.entries_capacity;
    h->buckets_capacity = L.buckets_capacity;
    h->arena_capacity = L.arena_capacity;
    h->off_records = L.off_records;
    h->off_entries = L.off_entries;
    h->off_buckets = L.off_buckets;
    h->off_arena = L.off_arena;
    h->created_nano = now_nano;
    h->heartbeat_nano = now_nano;
    h->entries_hwm = 1;              /* handle 0 means "empty string" */
    h->entry_free_head = 0;
    for (int c = 0; c < 8; c++) h->class_free_head[c] = NONE32;
    STORE_REL(&h->magic, kind == YKR_KIND_EVENTS ? MAGIC_EVENTS : MAGIC_REQUESTS);
    return 0;
}

int ykr_view_init(ykr_view *v, uint8_t *base, uint64_t size, uint32_t kind)
{
    memset(v, 0, sizeof *v);
    if (size < YKR_HEADER_SIZE) return -YKR_E_SIZE;
    ykr_header *h = (ykr_header *)base;
    uint64_t magic = LOAD_ACQ(&h->magic);
    if (magic != (kind == YKR_KIND_EVENTS ? MAGIC_EVENTS : MAGIC_REQUESTS)) return -YKR_E_MAGIC;
    if (h->version != YKR_LAYOUT_VERSION || h->header_size != YKR_HEADER_SIZE) return -YKR_E_VERSION;
    if (h->segment_kind != kind) return -YKR_E_KIND;
    ykr_layout L;
    if (kind == YKR_KIND_EVENTS) ykr_events_layout(h->capacity, &L);
    else ykr_requests_layout(h->capacity, &L);
    if (L.total_size != h->total_size || L.off_arena != h->off_arena || L.off_entries != h->off_entries
        || L.off_buckets != h->off_buckets || L.entries_capacity != h->entries_capacity
        || L.arena_capacity != h->arena_capacity)
        return -YKR_E_LAYOUT;
    if (size < h->total_size) return -YKR_E_SIZE;
    v->base = base;
    v->size = size;
    v->hdr = h;
    v->capacity = h->capacity;
    if (kind == YKR_KIND_EVENTS) {
        v->records = (ykr_record *)(base + L.off_records);
        v->entries = (ykr_entry *)(base + L.off_entries);
        v->buckets = (uint32_t *)(base + L.off_buckets);
        v->arena = base + L.off_arena;
        v->entries_cap = L.entries_capacity;
        v->bucket_mask = L.buckets_capacity - 1;
        v->arena_cap = L.arena_capacity;
    } else {
        v->slots = (ykr_req_slot *)(base + L.off_records);
    }
    return 0;
}

void ykr_heartbeat(ykr_view *v, int64_t now_nano)
{
    STORE_REL(&v->hdr->heartbeat_nano, now_nano ? now_nano : ykr_now());
}

/* Wake the readers sleeping on header.wake_seq, if events were published since the last wake.
 * Called by the writer between batches (the engine: around each scheduling cycle), never by
 * publish itself, so the publish path stays a few stores with no syscall. One FUTEX_WAKE per
 * call that has news, whatever the number of waiting workers. Returns 1 if it woke. */
int ykr_wake(ykr_view *v)
{
    ykr_header *h = v->hdr;
    uint64_t nx = LOAD_RLX(&h->next_id);
    if (nx == v->woken_next) return 0;
    v->woken_next = nx;
    __atomic_add_fetch(&h->wake_seq, 1u, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &h->wake_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return 1;
}

/* The readers' side of ykr_wake: sleep while *word == expected, at most `timeout` seconds.
 * A shared (not PRIVATE) futex: waker and waiter are different processes mapping the same
 * /dev/shm file; FUTEX_WAIT only reads the word, so a read-only mapping can wait. Returns 1 when
 * woken, when the word already differed or a signal interrupted the wait (look again), 0 on
 * timeout. The Python entry `ykr_wait` (shm/_ring_build.py) releases the GIL around it. */
int ykr_futex_wait(const uint32_t *word, uint32_t expected, double timeout)
{
    if (!(timeout > 0)) timeout = 0;
    if (timeout > 1e9) timeout = 1e9;
    struct timespec ts;
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    long rc = syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
    if (rc == 0) return 1;
    return errno == EAGAIN || errno == EINTR;
}

void ykr_set_writer(ykr_view *v, int64_t pid, int64_t now_nano)
{
    ykr_header *h = v->hdr;
    STORE_REL(&h->writer_closed, pid ? 0u : 1u);
    STORE_REL(&h->writer_pid, pid);
    if (pid) h->writers_attached++;
    STORE_REL(&h->heartbeat_nano, now_nano);
}

int ykr_bounds(ykr_view *v, uint64_t *lowest, uint64_t *next_id)
{
    /* lowest first: it can then only be stale-low (records below it fail their seq check),
     * never ahead of the next_id read after it */
    uint64_t lo = LOAD_ACQ(&v->hdr->lowest_id);
    uint64_t nx = LOAD_ACQ(&v->hdr->next_id);
    uint64_t min_lo = nx > v->capacity ? nx - v->capacity : 0;
    if (lo < min_lo) lo = min_lo;
    *lowest = lo;
    *next_id = nx;
    return nx > lo;
}

/* ------------------------------------------------------------------ interning */

static inline uint32_t hash_bytes(const uint8_t *p, size_t n, uint32_t kind)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)n * 0xFF51AFD7ED558CCDULL) ^ kind;
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        h ^= x;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t x = 0;
        memcpy(&x, p, n);
        h ^= x;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return (uint32_t)h;
}

static inline int size_class(uint32_t n)
{
    int c = 0;
    while ((uint32_t)(YKR_MIN_BLOCK << c) < n) c++;
    return c;
}

static inline uint32_t block_link(ykr_view *v, uint32_t off)
{
    uint32_t x;
    memcpy(&x, v->arena + off, 4);
    return x;
}

static inline void set_block_link(ykr_view *v, uint32_t off, uint32_t next)
{
    memcpy(v->arena + off, &next, 4);
}

static void arena_push(ykr_view *v, int c, uint32_t off)
{
    ykr_header *h = v->hdr;
    set_block_link(v, off, (uint32_t)h->class_free_head[c]);
    h->class_free_head[c] = off;
    h->class_free_count[c]++;
}

static uint32_t arena_pop(ykr_view *v, int c)
{
    ykr_header *h = v->hdr;
    uint32_t off = (uint32_t)h->class_free_head[c];
    h->class_free_head[c] = block_link(v, off);
    h->class_free_count[c]--;
    return off;
}

static uint32_t arena_alloc(ykr_view *v, int c)
{
    ykr_header *h = v->hdr;
    if (h->class_free_head[c] != NONE32) return arena_pop(v, c);
    uint64_t sz = (uint64_t)YKR_MIN_BLOCK << c;
    if (h->arena_bump + sz <= v->arena_cap) {
        uint32_t off = (uint32_t)h->arena_bump;
        h->arena_bump += sz;
        return off;
    }
    for (int k = c + 1; k < YKR_NCLASSES; k++) {
        if (h->class_free_head[k] == NONE32) continue;
        uint32_t off = arena_pop(v, k);
        while (k > c) {   /* split: keep the lower half, free the upper half */
            k--;
            arena_push(v, k, off + ((uint32_t)YKR_MIN_BLOCK << k));
        }
        return off;
    }
    return NONE32;
}

static uint32_t intern(ykr_view *v, const char *s, uint32_t n, uint8_t kind)
{
    if (n == 0) return 0;
    ykr_header *h = v->hdr;
    uint32_t hv = hash_bytes((const uint8_t *)s, n, kind);
    uint32_t *bucket = &v->buckets[hv & v->bucket_mask];
    for (uint32_t e = *bucket; e; e = v->entries[e].next) {
        ykr_entry *E = &v->entries[e];
        if (E->hash == hv && E->length == n && E->kind == kind
            && memcmp(v->arena + E->offset, s, n) == 0) {
            E->refcount++;
            h->intern_hits++;
            return e;
        }
    }
    uint32_t e;
    if (h->entry_free_head) {
        e = (uint32_t)h->entry_free_head;
    } else if (h->entries_hwm < v->entries_cap) {
        e = (uint32_t)h->entries_hwm;
    } else {
        h->intern_full_drops++;
        return YKR_OVERFLOW;
    }
    int c = size_class(n);
    uint32_t off = arena_alloc(v, c);
    if (off == NONE32) {
        h->intern_full_drops++;
        return YKR_OVERFLOW;
    }
    ykr_entry *E = &v->entries[e];
    if (e == h->entry_free_head) {
        h->entry_free_head = E->next;
        h->entry_free_count--;
    } else {
        h->entries_hwm++;
    }
    memcpy(v->arena + off, s, n);
    E->refcount = 1;
    E->hash = hv;
    E->offset = off;
    E->length = (uint16_t)n;
    E->size_class = (uint8_t)c;
    E->kind = kind;
    E->next = *bucket;
    *bucket = e;
    h->strings_interned++;
    h->entries_live++;
    if (kind == YKR_KIND_RESOURCE) h->entries_live_resources++;
    if (kind == YKR_KIND_PAIR) h->entries_live_pairs++;
    h->arena_live_bytes += (uint64_t)YKR_MIN_BLOCK << c;
    return e;
}

/* The writer's last handle for a field is very often the one it needs again (same application,
 * same resource): check that entry first.  It is only a hint: the entry must be live and hold
 * exactly these bytes, and a live entry is the only one for its (kind, bytes). */
static inline uint32_t cached(ykr_view *v, int field, const char *s, uint32_t n, uint8_t kind)
{
    uint32_t e = v->last[field];
    if (e == 0 || e >= v->entries_cap) return 0;
    ykr_entry *E = &v->entries[e];
    if (E->refcount && E->length == n && E->kind == kind && memcmp(v->arena + E->offset, s, n) == 0) {
        E->refcount++;
        v->hdr->intern_hits++;
        return e;
    }
    return 0;
}

static inline uint32_t intern_field(ykr_view *v, int field, const char *s, uint32_t n, uint8_t kind)
{
    if (n == 0) return 0;
    uint32_t e = cached(v, field, s, n, kind);
    if (e) return e;
    e = intern(v, s, n, kind);
    if (e != YKR_OVERFLOW) v->last[field] = e;
    return e;
}

static void release_parts(ykr_view *v, const uint32_t parts[2]);

static void release(ykr_view *v, uint32_t e)
{
    if (e == 0 || e == YKR_OVERFLOW || e >= v->entries_cap) return;
    ykr_entry *E = &v->entries[e];
    if (E->refcount == 0) return;       /* never happens in a consistent ring (verify says) */
    if (--E->refcount) return;
    ykr_header *h = v->hdr;
    uint32_t parts[2] = {0, 0};
    if (E->kind == YKR_KIND_PAIR) memcpy(parts, v->arena + E->offset, sizeof parts);
    uint32_t *link = &v->buckets[E->hash & v->bucket_mask];
    while (*link && *link != e) link = &v->entries[*link].next;
    if (*link == e) *link = E->next;
    arena_push(v, E->size_class, E->offset);
    h->arena_live_bytes -= (uint64_t)YKR_MIN_BLOCK << E->size_class;
    E->next = (uint32_t)h->entry_free_head;
    h->entry_free_head = e;
    h->entry_free_count++;
    h->strings_released++;
    h->entries_live--;
    if (E->kind == YKR_KIND_RESOURCE) h->entries_live_resources--;
    if (E->kind == YKR_KIND_PAIR) {
        h->entries_live_pairs--;
        release_parts(v, parts);   /* depth 1: a pair's parts are a string and a resource */
    }
}

static void release_parts(ykr_view *v, const uint32_t parts[2])
{
    release(v, parts[0]);
    release(v, parts[1]);
}

/* The record's aux handle for its message and resource (whose references the caller took):
 * the one that is set, or -- only for an event with both -- a pair entry holding them. A new
 * pair keeps the two references; an existing one (the same message and resource again) holds
 * its own, so they are dropped again, never to zero. YKR_OVERFLOW (table full) drops them too.
 * The aux kind goes to *kind. */
static uint32_t intern_aux(ykr_view *v, uint32_t msg, uint32_t res, uint8_t *kind)
{
    if (!res) { *kind = msg ? YKR_AUX_MESSAGE : YKR_AUX_NONE; return msg; }
    if (!msg) { *kind = YKR_AUX_RESOURCE; return res; }
    *kind = YKR_AUX_PAIR;
    uint32_t parts[2] = {msg, res};
    uint32_t e = intern_field(v, 4, (const char *)parts, sizeof parts, YKR_KIND_PAIR);
    if (e == YKR_OVERFLOW || v->entries[e].refcount > 1) release_parts(v, parts);
    return e;
}

/* ------------------------------------------------------------------ helpers */

/* Hex digit values of a canonical (lowercase) UUID; 0x10 marks every other byte. A table, not
 * branches: the digits of a random UUID are letters or numbers at random, so a branch per digit
 * is mispredicted about half the time (measured: ~80 ns of a ~100 ns publish). */
static const uint8_t HEXVAL[256] = {
    [0 ... 255] = 0x10,
    ['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4,
    ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8, ['9'] = 9,
    ['a'] = 10, ['b'] = 11, ['c'] = 12, ['d'] = 13, ['e'] = 14, ['f'] = 15,
};
/* Where the 16 digit pairs of 8-4-4-4-12 start. */
static const uint8_t UUID_PAIRS[16] = {0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34};

/* A canonical lowercase UUID (8-4-4-4-12) -> 16 bytes; it renders back identically. On 0 (not
 * such a UUID) `out` is all zero. */
static int parse_uuid(const char *s, size_t n, uint8_t out[16])
{
    if (n != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-') return 0;
    const unsigned char *u = (const unsigned char *)s;
    unsigned bad = 0;
    for (int j = 0; j < 16; j++) {
        unsigned a = HEXVAL[u[UUID_PAIRS[j]]], b = HEXVAL[u[UUID_PAIRS[j] + 1]];
        bad |= a | b;
        out[j] = (uint8_t)(a << 4 | b);
    }
    if (bad & 0x10) {
        memset(out, 0, 16);
        return 0;
    }
    return 1;
}

/* Cut like shm.events.cut_message: at most 1021 bytes of whole UTF-8 characters + "...". */
static size_t cut_len(const char *s, size_t n)
{
    if (n <= YKR_MAX_STRING) return n;
    size_t k = YKR_MAX_STRING - 3;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return k;
}

/* One decoded byte of an escaped JSON name s[*i..end) (orjson's escapes only); -1 at the end,
 * -2 for an escape orjson never writes. */
static int name_byte(const char *s, size_t *i, size_t end)
{
    if (*i >= end) return -1;
    unsigned char c = (unsigned char)s[*i];
    if (c != '\\') { (*i)++; return c; }
    if (*i + 1 >= end) return -2;
    char e = s[*i + 1];
    *i += 2;
    switch (e) {
    case '"': return '"';
    case '\\': return '\\';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'u':
        if (*i + 4 > end || s[*i] != '0' || s[*i + 1] != '0') return -2;
        {
            int a = HEXVAL[(unsigned char)s[*i + 2]], b = HEXVAL[(unsigned char)s[*i + 3]];
            *i += 4;
            if ((a | b) & 0x10 || (a << 4 | b) >= 0x20) return -2;
            return a << 4 | b;
        }
    default: return -2;
    }
}

/* Compare two escaped names by their decoded bytes (= code point order, like sorted()). */
static int name_cmp(const char *s, size_t a0, size_t a1, size_t b0, size_t b1)
{
    for (;;) {
        int x = name_byte(s, &a0, a1), y = name_byte(s, &b0, b1);
        if (x == -2 || y == -2) return 2;
        if (x != y) return x < y ? -1 : 1;
        if (x == -1) return 0;
    }
}

/* Resources arrive as a compact JSON dict {"name":int,...} with names in sorted order (orjson
 * OPT_SORT_KEYS, or shm.encode_resource).  Check exactly that shape. */
static int valid_resource(const char *s, size_t n)
{
    if (n < 2 || s[0] != '{' || s[n - 1] != '}') return 0;
    if (n == 2) return 1;
    size_t i = 1, prev0 = 0, prev1 = 0;
    int prev_esc = 0;
    for (;;) {
        if (i >= n || s[i] != '"') return 0;
        i++;
        size_t n0 = i;
        int esc = 0;
        while (i < n && s[i] != '"') {
            if ((unsigned char)s[i] < 0x20) return 0;
            if (s[i] == '\\') { i++; esc = 1; }
            i++;
        }
        if (i >= n) return 0;
        size_t n1 = i;
        if (n1 == n0) return 0;   /* empty name */
        if (esc && name_cmp(s, n0, n1, n0, n1) != 0) return 0;   /* an escape orjson never writes */
        if (prev1) {
            int c;
            if (esc || prev_esc) {
                c = name_cmp(s, prev0, prev1, n0, n1);
            } else {
                size_t la = prev1 - prev0, lb = n1 - n0;
                c = memcmp(s + prev0, s + n0, la < lb ? la : lb);
                if (c == 0) c = la < lb ? -1 : (la > lb ? 1 : 0);
            }
            if (c >= 0) return 0;   /* not strictly sorted */
        }
        prev0 = n0;
        prev1 = n1;
        prev_esc = esc;
        i++;
        if (i >= n || s[i] != ':') return 0;
        i++;
        if (i < n && s[i] == '-') i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d || i - d > 19) return 0;
        if (i - d > 1 && s[d] == '0') return 0;
        if (s[d - 1] == '-' && i - d == 1 && s[d] == '0') return 0;   /* -0 */
        if (i - d == 19) {   /* int64 range */
            const char *lim = s[d - 1] == '-' ? "9223372036854775808" : "9223372036854775807";
            if (memcmp(s + d, lim, 19) > 0) return 0;
        }
        if (i >= n) return 0;
        if (s[i] == '}') return i == n - 1;
        if (s[i] != ',') return 0;
        i++;
    }
}

/* ------------------------------------------------------------------ writer */

/* The writer's pins (ykr_pin): obj_pin / res_pin, when non-zero, are entries the header holds a
 * reference on, so they are live; the record takes one more reference and skips the lookup. */
static int64_t publish_impl(ykr_view *v, int type, int change_type, int change_detail, int64_t ts,
                            const char *obj, size_t objlen, const char *ref, size_t reflen,
                            const char *msg, size_t msglen, const char *res, size_t reslen,
                            uint32_t obj_pin, uint32_t res_pin)
{
    if (!v->hdr) return -YKR_E_CLOSED;
    if (type < 0 || type > 255) return -YKR_E_BADTYPE;
    if (change_type < 0 || change_type > YKR_FLAG_CHANGE_MASK) return -YKR_E_BADCHANGE;
    if (change_detail < 0 || change_detail > 65535) return -YKR_E_BADDETAIL;
    uint32_t res_h = 0;
    if (res_pin) {
        v->entries[res_pin].refcount++;
        res_h = res_pin;
    } else if (reslen) {
        /* the same resource as last time was validated then: take a reference at once */
        res_h = reslen <= YKR_MAX_RESOURCE ? cached(v, 3, res, (uint32_t)reslen, 1) : 0;
        if (!res_h) {
            if (reslen > YKR_MAX_RESOURCE) return -YKR_E_RESOURCE_TOO_LARGE;
            if (!valid_resource(res, reslen)) return -YKR_E_BADRESOURCE;
            if (reslen == 2) reslen = 0;   /* {} */
        }
    }
    ykr_header *h = v->hdr;
    if (ts == 0) ts = ykr_now();
    int cut_obj = objlen > YKR_MAX_STRING, cut_ref = reflen > YKR_MAX_STRING;
    int cut_msg = msglen > YKR_MAX_STRING;
    size_t ol = cut_len(obj, objlen), rl = cut_len(ref, reflen), ml = cut_len(msg, msglen);
    char obuf[YKR_MAX_STRING], rbuf[YKR_MAX_STRING], mbuf[YKR_MAX_STRING];
    if (cut_obj) { memcpy(obuf, obj, ol); memcpy(obuf + ol, "...", 3); obj = obuf; ol += 3; }
    if (cut_ref) { memcpy(rbuf, ref, rl); memcpy(rbuf + rl, "...", 3); ref = rbuf; rl += 3; }
    if (cut_msg) { memcpy(mbuf, msg, ml); memcpy(mbuf + ml, "...", 3); msg = mbuf; ml += 3; }
    h->strings_cut += cut_obj + cut_ref;
    h->messages_cut += cut_msg;

    uint64_t id = h->next_id;
    ykr_record *slot = &v->records[id % v->capacity];
    if (id >= v->capacity) STORE_REL(&h->lowest_id, id - v->capacity + 1);
    uint32_t seq = lap_seq(v, id);
    ykr_record old = *slot;
    STORE_REL(&slot->seq, seq - 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (old.seq) {
        release(v, old.object_id);
        release(v, old.aux);
        if (!(old.flags & YKR_FLAG_REF_UUID)) {
            uint32_t rh;
            memcpy(&rh, old.reference, 4);
            release(v, rh);
        }
    }
    ykr_record r;
    r.timestamp_nano = ts;
    r.change_detail = (uint16_t)change_detail;
    r.type = (uint8_t)type;
    r.flags = (uint8_t)change_type;
    memset(r.reference, 0, 16);
    if (rl && parse_uuid(ref, rl, r.reference)) {
        r.flags |= YKR_FLAG_REF_UUID;
    } else {
        uint32_t rh = intern_field(v, 1, ref, (uint32_t)rl, YKR_KIND_STRING);
        memcpy(r.reference, &rh, 4);
    }
    if (obj_pin) {
        v->entries[obj_pin].refcount++;
        r.object_id = obj_pin;
    } else {
        r.object_id = intern_field(v, 0, obj, (uint32_t)ol, YKR_KIND_STRING);
    }
    uint32_t msg_h = intern_field(v, 2, msg, (uint32_t)ml, YKR_KIND_STRING);
    uint32_t res_h2 = res_h ? res_h : intern_field(v, 3, res, (uint32_t)reslen, YKR_KIND_RESOURCE);
    uint8_t aux_kind;
    r.aux = intern_aux(v, msg_h, res_h2, &aux_kind);
    r.flags |= (uint8_t)(aux_kind << YKR_AUX_SHIFT);
    /* field stores, then the stable sequence number with release semantics */
    slot->object_id = r.object_id;
    slot->timestamp_nano = r.timestamp_nano;
    memcpy(slot->reference, r.reference, 16);
    slot->aux = r.aux;
    slot->change_detail = r.change_detail;
    slot->type = r.type;
    slot->flags = r.flags;
    STORE_REL(&slot->seq, seq);
    h->events_written++;
    STORE_REL(&h->next_id, id + 1);
    return (int64_t)id;
}

int64_t ykr_publish(ykr_view *v, int type, int change_type, int change_detail, int64_t ts,
                    const char *obj, size_t objlen, const char *ref, size_t reflen,
                    const char *msg, size_t msglen, const char *res, size_t reslen)
{
    return publish_impl(v, type, change_type, change_detail, ts, obj, objlen, ref, reflen,
                        msg, msglen, res, reslen, 0, 0);
}

/* Pin the writer's current objectID (which 0) or resource (which 1): intern it with one extra
 * reference held by the header and release the previous pin. While the same (immutable) str /
 * an equal resource keeps coming, the Python writer calls ykr_publish_pinned, which passes
 * neither: cffi converts a `const char *` argument at ~45 ns, more than the C work of a record.
 * Returns the entry, or 0 (use the bytes path) for an empty, over-long or invalid value, a full
 * table, or a cleared view. */
uint32_t ykr_pin(ykr_view *v, int which, const char *s, size_t n)
{
    if (!v->hdr) return 0;
    if (n == 0 || n > YKR_MAX_STRING || (which == 1 && (n > YKR_MAX_RESOURCE || n == 2 || !valid_resource(s, n))))
        return 0;
    uint32_t e = intern(v, s, (uint32_t)n, (uint8_t)which);
    if (e == 0 || e == YKR_OVERFLOW) return 0;
    uint32_t *slot = which ? &v->hdr->pinned_resource : &v->hdr->pinned_object;
    uint32_t old = *slot;
    *slot = e;
    release(v, old);
    return e;
}

void ykr_unpin_all(ykr_view *v)
{
    uint32_t o = v->hdr->pinned_object, r = v->hdr->pinned_resource;
    v->hdr->pinned_object = 0;
    v->hdr->pinned_resource = 0;
    release(v, o);
    release(v, r);
}

/* A record of the pinned objectID, with the pinned resource or none, stamped now. The pins are
 * read from the header, not passed: nothing the caller says can name an entry that is not live,
 * and there are two converted arguments fewer per call. */
int64_t ykr_publish_pinned(ykr_view *v, int type, int change_type, int change_detail,
                           const char *ref, size_t reflen, int with_resource)
{
    if (!v->hdr) return -YKR_E_CLOSED;
    uint32_t obj = v->hdr->pinned_object, res = with_resource ? v->hdr->pinned_resource : 0;
    if (!obj || (with_resource && !res)) return -YKR_E_NOT_PINNED;
    return publish_impl(v, type, change_type, change_detail, 0, "", 0, ref, reflen, "", 0, "", 0,
                        obj, res);
}

/* Forget the mapping: a publish through a view kept after its writer closed (a cached bound
 * `publish`) then fails with YKR_E_CLOSED instead of touching unmapped memory. */
void ykr_view_clear(ykr_view *v)
{
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------------ JSON rendering */

static const char HEX[] = "0123456789abcdef";

static inline char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUTLIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static const char DIGITS2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal digits written back to front two at a time (a nanosecond timestamp has 19: half the
 * divisions of one digit at a time, and no reversal); the length comes from comparisons. */
static inline char *put_u64(char *p, uint64_t x)
{
    int n = 1;
    for (uint64_t t = 10; x >= t; t *= 10)
        if (++n == 20) break;   /* x >= 10^19: 20 digits, and 10^20 does not fit */
    char *end = p + n, *q = end;
    while (x >= 100) {
        unsigned d = (unsigned)(x % 100);
        x /= 100;
        q -= 2;
        memcpy(q, DIGITS2 + 2 * d, 2);
    }
    if (x >= 10) { q -= 2; memcpy(q, DIGITS2 + 2 * x, 2); }
    else *--q = (char)('0' + x);
    return end;
}

static inline char *put_i64(char *p, int64_t x)
{
    if (x < 0) { *p++ = '-'; return put_u64(p, (uint64_t)0 - (uint64_t)x); }
    return put_u64(p, (uint64_t)x);
}

/* JSON string body, escaped exactly like orjson: \" \\ \b \f \n \r \t, other controls \u00xx,
 * everything else (UTF-8, DEL) passed through. */
static char *put_escaped(char *p, const uint8_t *s, size_t n)
{
    *p++ = '"';
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\') j++;
        if (j > i) { memcpy(p, s + i, j - i); p += j - i; }
        if (j >= n) break;
        unsigned char c = s[j];
        *p++ = '\\';
        switch (c) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\b': *p++ = 'b'; break;
        case '\f': *p++ = 'f'; break;
        case '\n': *p++ = 'n'; break;
        case '\r': *p++ = 'r'; break;
        case '\t': *p++ = 't'; break;
        default:
            *p++ = 'u'; *p++ = '0'; *p++ = '0';
            *p++ = HEX[c >> 4]; *p++ = HEX[c & 15];
        }
        i = j + 1;
    }
    *p++ = '"';
    return p;
}

/* {"a":1,"b":2} -> {"a":{"value":1},"b":{"value":2}}, bounded by n (the input may be torn). */
static char *put_resource(char *p, const char *s, size_t n)
{
    size_t i = 1;
    *p++ = '{';
    while (i < n && s[i] == '"') {
        size_t st = i++;
        while (i < n && s[i] != '"') { if (s[i] == '\\') i++; i++; }
        if (i >= n) break;
        i++;   /* closing quote */
        p = put(p, s + st, i - st);
        p = PUTLIT(p, ":{\"value\":");
        if (i < n) i++;   /* ':' */
        size_t d = i;
        while (i < n && s[i] != ',' && s[i] != '}' && i - d < 21) i++;
        p = put(p, s + d, i - d);
        *p++ = '}';
        if (i < n && s[i] == ',') { *p++ = ','; i++; }
        else break;
    }
    *p++ = '}';
    return p;
}

typedef struct {
    uint64_t id;
    int type, change_type, change_detail;
    int64_t ts;
    const uint8_t *obj; size_t objlen;
    const uint8_t *msg; size_t msglen;
    const uint8_t *ref; size_t reflen;
    const uint8_t *uuid;     /* if not NULL, reference is these 16 bytes */
    const char *res; size_t reslen;
} fields;

static char *render_fields(char *p, const fields *f)
{
    p = PUTLIT(p, "{\"id\":");
    p = put_u64(p, f->id);
    if (f->type) { p = PUTLIT(p, ",\"type\":"); p = put_u64(p, (uint64_t)f->type); }
    if (f->objlen) { p = PUTLIT(p, ",\"objectID\":"); p = put_escaped(p, f->obj, f->objlen); }
    if (f->msglen) { p = PUTLIT(p, ",\"message\":"); p = put_escaped(p, f->msg, f->msglen); }
    if (f->ts) { p = PUTLIT(p, ",\"timestampNano\":"); p = put_i64(p, f->ts); }
    if (f->change_type) { p = PUTLIT(p, ",\"eventChangeType\":"); p = put_u64(p, (uint64_t)f->change_type); }
    if (f->change_detail) { p = PUTLIT(p, ",\"eventChangeDetail\":"); p = put_u64(p, (uint64_t)f->change_detail); }
    if (f->uuid) {
        p = PUTLIT(p, ",\"referenceID\":\"");
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
            *p++ = HEX[f->uuid[i] >> 4];
            *p++ = HEX[f->uuid[i] & 15];
        }
        *p++ = '"';
    } else if (f->reflen) {
        p = PUTLIT(p, ",\"referenceID\":");
        p = put_escaped(p, f->ref, f->reflen);
    }
    if (f->reslen > 2) {
        p = PUTLIT(p, ",\"resource\":{\"resources\":");
        p = put_resource(p, f->res, f->reslen);
        *p++ = '}';
    }
    *p++ = '}';
    return p;
}

static inline void resolve(ykr_view *v, uint32_t h, const uint8_t **s, size_t *n)
{
    if (h == 0 || h >= v->entries_cap) {
        if (h == YKR_OVERFLOW) { *s = (const uint8_t *)OVERFLOW_MARK; *n = sizeof(OVERFLOW_MARK) - 1; }
        else { *s = NULL; *n = 0; }
        return;
    }
    const ykr_entry *E = &v->entries[h];
    uint64_t off = LOAD_RLX(&E->offset), len = LOAD_RLX(&E->length);
    if (len > YKR_MAX_STRING) len = YKR_MAX_STRING;
    if (off + len > v->arena_cap) { off = 0; len = 0; }
    *s = v->arena + off;
    *n = len;
}

/* The two handles of a pair entry; both 0 if it is not one (a torn read: the seq check that
 * follows discards the record). Reads stay inside the arena whatever the entry says. */
static void pair_parts(ykr_view *v, uint32_t pair, uint32_t parts[2])
{
    parts[0] = parts[1] = 0;
    if (pair == YKR_OVERFLOW) { parts[0] = YKR_OVERFLOW; return; }   /* the message's marker */
    if (pair == 0 || pair >= v->entries_cap) return;
    const ykr_entry *E = &v->entries[pair];
    uint64_t off = LOAD_RLX(&E->offset);
    if (LOAD_RLX(&E->kind) != YKR_KIND_PAIR || off + sizeof(uint32_t[2]) > v->arena_cap) return;
    memcpy(parts, v->arena + off, sizeof(uint32_t[2]));
}

/* A copied record's fields as the renderer takes them (strings still point into the arena). */
static void decode_record(ykr_view *v, const ykr_record *r, uint64_t id, fields *f)
{
    f->id = id;
    f->type = r->type;
    f->change_type = r->flags & YKR_FLAG_CHANGE_MASK;
    f->change_detail = r->change_detail;
    f->ts = r->timestamp_nano;
    uint32_t parts[2] = {0, 0};   /* message, resource */
    switch ((r->flags & YKR_AUX_MASK) >> YKR_AUX_SHIFT) {
    case YKR_AUX_MESSAGE: parts[0] = r->aux; break;
    case YKR_AUX_RESOURCE: parts[1] = r->aux; break;
    case YKR_AUX_PAIR: pair_parts(v, r->aux, parts); break;
    }
    resolve(v, r->object_id, &f->obj, &f->objlen);
    resolve(v, parts[0], &f->msg, &f->msglen);
    const uint8_t *rs; size_t rn;
    resolve(v, parts[1], &rs, &rn);
    f->res = (const char *)rs;
    f->reslen = rs && parts[1] != YKR_OVERFLOW ? rn : 0;
    if (r->flags & YKR_FLAG_REF_UUID) {
        f->uuid = r->reference; f->ref = NULL; f->reflen = 0;
    } else {
        uint32_t rh;
        memcpy(&rh, r->reference, 4);
        f->uuid = NULL;
        resolve(v, rh, &f->ref, &f->reflen);
    }
}

int ykr_render(ykr_view *v, uint64_t start, uint64_t count, int mode, int cursor,
               char *buf, uint64_t buflen, ykr_render_result *res)
{
    memset(res, 0, sizeof *res);
    uint64_t lo, nx;
    ykr_bounds(v, &lo, &nx);
    uint64_t id = start;
    res->next_id = start;
    if (start >= nx || count == 0) return 0;
    if (start < lo) {
        if (!cursor) return 0;
        res->has_lost = 1;
        res->lost_first = start;
        res->lost_last = lo - 1;
        id = lo;
    }
    uint64_t end = cursor ? nx : (start + count < nx ? start + count : nx);
    char *p = buf, *limit = buf + buflen;
    while (id < end && res->count < count) {
        if ((uint64_t)(limit - p) < YKR_MAX_EVENT_JSON + 2) { res->more = 1; break; }
        ykr_record *slot = &v->records[id % v->capacity];
        uint32_t want = lap_seq(v, id);
        uint32_t s1 = LOAD_ACQ(&slot->seq);
        char *mark = p;
        if (s1 == want) {
            ykr_record r;
            memcpy(&r, slot, sizeof r);
            fields f;
            decode_record(v, &r, id, &f);
            if (res->count && mode == 0) *p++ = ',';
            p = render_fields(p, &f);
            if (mode == 1) *p++ = '\n';
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint32_t s2 = LOAD_RLX(&slot->seq);
            if (s2 == s1) {
                res->count++;
                id++;
                continue;
            }
            p = mark;   /* overwritten while we read it: discard */
        }
        /* the record for id is gone (overwritten, or being overwritten) */
        uint64_t nlo = LOAD_ACQ(&v->hdr->lowest_id);
        if (nlo <= id) nlo = id + 1;
        if (!cursor) { id = nlo; continue; }
        if (res->count) break;          /* report this loss on the next call */
        if (!res->has_lost) { res->has_lost = 1; res->lost_first = id; }
        res->lost_last = nlo - 1;
        id = nlo;
        if (id >= end) end = LOAD_ACQ(&v->hdr->next_id);
    }
    res->next_id = id;
    res->length = (uint64_t)(p - buf);
    return 0;
}

/* ------------------------------------------------------------------ request store */

int64_t ykr_req_publish(ykr_view *v, int64_t ts, const char *obj, size_t objlen,
                        const char *ref, size_t reflen, const char *msg, size_t msglen,
                        const char *res, size_t reslen)
{
    if (reslen > YKR_MAX_RESOURCE) return -YKR_E_RESOURCE_TOO_LARGE;
    if (reslen && !valid_resource(res, reslen)) return -YKR_E_BADRESOURCE;
    if (reslen == 2) reslen = 0;
    if (v->capacity == 0) return -1;
    ykr_header *h = v->hdr;
    if (ts == 0) ts = ykr_now();
    uint64_t id = h->next_id;
    ykr_req_slot *s = &v->slots[id % v->capacity];
    if (s->seq) h->req_overwritten++;
    size_t ol = cut_len(obj, objlen), rl = cut_len(ref, reflen), ml = cut_len(msg, msglen);
    char *d = s->data;
    memcpy(d, obj, ol); d += ol;
    if (ol < objlen) { memcpy(d, "...", 3); d += 3; ol += 3; }
    memcpy(d, ref, rl); d += rl;
    if (rl < reflen) { memcpy(d, "...", 3); d += 3; rl += 3; }
    memcpy(d, msg, ml); d += ml;
    if (ml < msglen) { memcpy(d, "...", 3); d += 3; ml += 3; h->messages_cut++; }
    memcpy(d, res, reslen);
    s->timestamp_nano = ts;
    s->object_len = (uint16_t)ol;
    s->reference_len = (uint16_t)rl;
    s->message_len = (uint16_t)ml;
    s->resource_len = (uint16_t)reslen;
    s->type = 1;          /* REQUEST */
    s->change_type = 0;   /* NONE */
    s->change_detail = 0;
    s->seq = 2 * id + 2;
    h->events_written++;
    h->next_id = id + 1;
    if (id >= v->capacity) h->lowest_id = id - v->capacity + 1;
    return (int64_t)id;
}

/* A slot's lengths come from shared memory: each within what ykr_req_publish writes (a string
 * at most YKR_MAX_STRING bytes, a resource at most YKR_MAX_RESOURCE and of the canonical shape)
 * and together within the slot's data, so rendering reads only the slot and writes at most
 * YKR_MAX_EVENT_JSON bytes. */
static int req_slot_sane(const ykr_req_slot *s)
{
    size_t ol = s->object_len, rl = s->reference_len, ml = s->message_len, xl = s->resource_len;
    if (ol > YKR_MAX_STRING || rl > YKR_MAX_STRING || ml > YKR_MAX_STRING) return 0;
    if (xl > YKR_MAX_RESOURCE || ol + rl + ml + xl > sizeof s->data) return 0;
    return xl == 0 || valid_resource(s->data + ol + rl + ml, xl);
}

int64_t ykr_req_take(ykr_view *v, uint64_t max_events, char *buf, uint64_t buflen,
                     uint64_t *out_len)
{
    ykr_header *h = v->hdr;
    uint64_t nx = h->next_id;
    uint64_t id = h->req_read_id;
    if (nx > v->capacity && id < nx - v->capacity) id = nx - v->capacity;
    char *p = buf, *limit = buf + buflen;
    int64_t n = 0;
    while (id < nx && (uint64_t)n < max_events) {
        if ((uint64_t)(limit - p) < YKR_MAX_EVENT_JSON + 2) break;
        ykr_req_slot *s = &v->slots[id % v->capacity];
        if (s->seq == 2 * id + 2 && !req_slot_sane(s)) {
            s->seq = 0;   /* corrupt or forged: skipped, counted, never rendered */
            h->req_skipped++;
        } else if (s->seq == 2 * id + 2) {
            fields f;
            f.id = id;
            f.type = s->type;
            f.change_type = s->change_type;
            f.change_detail = s->change_detail;
            f.ts = s->timestamp_nano;
            const uint8_t *d = (const uint8_t *)s->data;
            f.obj = d; f.objlen = s->object_len; d += f.objlen;
            f.ref = d; f.reflen = s->reference_len; d += f.reflen;
            f.uuid = NULL;
            f.msg = d; f.msglen = s->message_len; d += f.msglen;
            f.res = (const char *)d; f.reslen = s->resource_len;
            if (n) *p++ = ',';
            p = render_fields(p, &f);
            s->seq = 0;   /* delivered: clear the slot */
            h->req_delivered++;
            n++;
        }
        id++;
    }
    h->req_read_id = id;
    *out_len = (uint64_t)(p - buf);
    return n;
}

/* ------------------------------------------------------------------ verify */

typedef struct { char *p, *end; int64_t n; } vout;

static void vsay(vout *o, const char *a, uint64_t x, const char *b, uint64_t y, const char *c)
{
    o->n++;
    if (o->end - o->p < 200) return;
    char *p = o->p;
    p = put(p, a, strlen(a)); p = put_u64(p, x);
    p = put(p, b, strlen(b)); p = put_u64(p, y);
    p = put(p, c, strlen(c));
    *p++ = '\n';
    o->p = p;
}

/* One reference from `who` `id` to entry e, which must be of kind `kind`. */
static void count_ref(vout *o, ykr_view *v, uint32_t *counts, uint64_t hwm, const char *who,
                      uint64_t id, uint32_t e, uint8_t kind)
{
    if (e == 0 || e == YKR_OVERFLOW) return;
    if (e >= hwm) { vsay(o, who, id, " references entry ", e, " beyond the table"); return; }
    counts[e]++;
    if (v->entries[e].kind != kind) vsay(o, who, id, " references entry ", e, " of the wrong kind");
}

int64_t ykr_verify(ykr_view *v, uint32_t *counts, uint8_t *bitmap, char *out, uint64_t outlen)
{
    vout o = {out, out + outlen, 0};
    ykr_header *h = v->hdr;
    uint64_t cap = v->capacity;
    uint64_t nx = LOAD_ACQ(&h->next_id);
    uint64_t lo = nx > cap ? nx - cap : 0;
    if (LOAD_ACQ(&h->lowest_id) != lo)
        vsay(&o, "header lowest_id ", h->lowest_id, " != expected ", lo, "");
    if (h->events_written != nx)
        vsay(&o, "events_written ", h->events_written, " != next_id ", nx, "");
    uint64_t ecap = v->entries_cap, hwm = h->entries_hwm;
    if (hwm < 1 || hwm > ecap) { vsay(&o, "entries_hwm ", hwm, " outside 1..", ecap, ""); hwm = ecap; }
    memset(counts, 0, ecap * sizeof(uint32_t));
    /* 1. sequence numbers and references of every slot */
    for (uint64_t i = 0; i < cap; i++) {
        ykr_record *r = &v->records[i];
        uint64_t seq = LOAD_ACQ(&r->seq);
        uint64_t id;
        if (nx <= i) { id = UINT64_MAX; }
        else { id = nx - 1 - ((nx - 1 - i) % cap); }   /* newest id that maps to slot i */
        if (id == UINT64_MAX) {
            if (seq != 0) vsay(&o, "slot ", i, " never written but seq is ", seq, "");
            continue;
        }
        if (seq != lap_seq(v, id)) {
            vsay(&o, "slot ", i, ": seq ", seq, " does not encode the retained id (torn or stale)");
            continue;
        }
        if ((r->flags & YKR_FLAG_CHANGE_MASK) > 3)
            vsay(&o, "event ", id, ": change type ", r->flags & YKR_FLAG_CHANGE_MASK, " out of range");
        static const uint8_t aux_kinds[4] = {YKR_KIND_STRING, YKR_KIND_STRING, YKR_KIND_RESOURCE,
                                             YKR_KIND_PAIR};
        unsigned aux = (r->flags & YKR_AUX_MASK) >> YKR_AUX_SHIFT;
        if (aux == YKR_AUX_NONE && r->aux)
            vsay(&o, "event ", id, " has no message or resource but references entry ", r->aux, "");
        uint32_t hs[3] = {r->object_id, aux ? r->aux : 0, 0};
        if (!(r->flags & YKR_FLAG_REF_UUID)) memcpy(&hs[2], r->reference, 4);
        uint8_t kinds[3] = {YKR_KIND_STRING, aux_kinds[aux], YKR_KIND_STRING};
        for (int k = 0; k < 3; k++)
            count_ref(&o, v, counts, hwm, "event ", id, hs[k], kinds[k]);
    }
    /* every live pair holds one reference on each of its parts */
    static const uint8_t part_kinds[2] = {YKR_KIND_STRING, YKR_KIND_RESOURCE};
    for (uint64_t e = 1; e < hwm; e++) {
        ykr_entry *E = &v->entries[e];
        if (!E->refcount || E->kind != YKR_KIND_PAIR) continue;
        if (E->length != sizeof(uint32_t[2]) || E->offset + sizeof(uint32_t[2]) > v->arena_cap) {
            vsay(&o, "pair entry ", e, " has length ", E->length, "");
            continue;
        }
        uint32_t parts[2];
        memcpy(parts, v->arena + E->offset, sizeof parts);
        for (int k = 0; k < 2; k++)
            count_ref(&o, v, counts, hwm, "pair entry ", e, parts[k], part_kinds[k]);
    }
    /* the writer's pins hold one reference each */
    uint32_t pins[2] = {h->pinned_object, h->pinned_resource};
    for (int k = 0; k < 2; k++) {
        uint32_t e = pins[k];
        if (e == 0) continue;
        if (e >= hwm) { vsay(&o, "pinned entry ", e, " beyond the table", 0, ""); continue; }
        counts[e]++;
        if (v->entries[e].kind != (uint8_t)k) vsay(&o, "pinned entry ", e, " of the wrong kind", 0, "");
    }
    /* 2. refcounts */
    uint64_t live = 0, live_res = 0, live_pairs = 0, live_bytes = 0;
    for (uint64_t e = 1; e < hwm; e++) {
        ykr_entry *E = &v->entries[e];
        if (E->refcount != counts[e]) {
            if (counts[e] == 0) vsay(&o, "entry ", e, " leaked: refcount ", E->refcount, " but no retained record uses it");
            else vsay(&o, "entry ", e, ": refcount ", E->refcount, " != references from retained records");
        }
        if (E->refcount) {
            live++;
            live_res += E->kind == YKR_KIND_RESOURCE;
            live_pairs += E->kind == YKR_KIND_PAIR;
            live_bytes += (uint64_t)YKR_MIN_BLOCK << E->size_class;
            if (E->size_class >= YKR_NCLASSES || E->length > ((uint32_t)YKR_MIN_BLOCK << E->size_class)
                || E->offset + ((uint64_t)YKR_MIN_BLOCK << E->size_class) > h->arena_bump)
                vsay(&o, "entry ", e, ": bad block (offset ", E->offset, ")");
            else if (hash_bytes(v->arena + E->offset, E->length, E->kind) != E->hash)
                vsay(&o, "entry ", e, ": stored hash does not match its bytes", 0, "");
        }
    }
    if (live != h->entries_live) vsay(&o, "entries_live ", h->entries_live, " != counted ", live, "");
    if (live_pairs != h->entries_live_pairs)
        vsay(&o, "entries_live_pairs ", h->entries_live_pairs, " != counted ", live_pairs, "");
    if (live_res != h->entries_live_resources)
        vsay(&o, "entries_live_resources ", h->entries_live_resources, " != counted ", live_res, "");
    if (live_bytes != h->arena_live_bytes)
        vsay(&o, "arena_live_bytes ", h->arena_live_bytes, " != counted ", live_bytes, "");
    /* 3. hash chains: every live entry exactly once, in its bucket */
    memset(counts, 0, ecap * sizeof(uint32_t));
    uint64_t chained = 0;
    for (uint64_t b = 0; b <= v->bucket_mask; b++) {
        uint64_t steps = 0;
        for (uint32_t e = v->buckets[b]; e; e = v->entries[e].next) {
            if (e >= hwm) { vsay(&o, "bucket ", b, " links to entry ", e, " beyond the table"); break; }
            if (++steps > hwm) { vsay(&o, "bucket ", b, " chain has a cycle", 0, ""); break; }
            if (counts[e]++) { vsay(&o, "entry ", e, " is chained twice (bucket ", b, ")"); break; }
            if (v->entries[e].refcount == 0) vsay(&o, "entry ", e, " is chained but free (bucket ", b, ")");
            if ((v->entries[e].hash & v->bucket_mask) != b) vsay(&o, "entry ", e, " is in the wrong bucket ", b, "");
            chained++;
        }
    }
    if (chained != live) vsay(&o, "hash chains hold ", chained, " entries, live entries ", live, "");
    /* 4. entry free list */
    uint64_t nfree = 0;
    for (uint64_t e = h->entry_free_head; e; e = v->entries[e].next) {
        if (e >= hwm) { vsay(&o, "entry free list links to ", e, " beyond hwm ", hwm, ""); break; }
        if (counts[e]++) { vsay(&o, "entry ", e, " is on the free list and chained/free twice", 0, ""); break; }
        if (v->entries[e].refcount) vsay(&o, "entry ", e, " on the free list has refcount ", v->entries[e].refcount, "");
        nfree++;
    }
    if (nfree != h->entry_free_count) vsay(&o, "entry_free_count ", h->entry_free_count, " != counted ", nfree, "");
    if (live + nfree != hwm - 1) vsay(&o, "live ", live, " + free entries != hwm-1 = ", hwm - 1, "");
    /* 5. arena: live blocks and free blocks tile [0, bump) without overlap */
    uint64_t units = v->arena_cap / YKR_MIN_BLOCK;
    memset(bitmap, 0, (units + 7) / 8);
    uint64_t covered = 0;
#define MARK(off, cls, what, who)                                                        \
    do {                                                                                 \
        uint64_t u0 = (off) / YKR_MIN_BLOCK, nu = (uint64_t)1 << (cls);                 \
        if ((off) % YKR_MIN_BLOCK || (off) + nu * YKR_MIN_BLOCK > h->arena_bump) {       \
            vsay(&o, what, who, " has a block outside the arena (offset ", (off), ")"); \
            break;                                                                       \
        }                                                                                \
        for (uint64_t u = u0; u < u0 + nu; u++) {                                        \
            if (bitmap[u >> 3] & (1u << (u & 7))) {                                      \
                vsay(&o, what, who, " overlaps another block at offset ", u * 16, "");  \
                break;                                                                   \
            }                                                                            \
            bitmap[u >> 3] |= (uint8_t)(1u << (u & 7));                                  \
            covered++;                                                                   \
        }                                                                                \
    } while (0)
    for (uint64_t e = 1; e < hwm; e++) {
        ykr_entry *E = &v->entries[e];
        if (E->refcount && E->size_class < YKR_NCLASSES) MARK((uint64_t)E->offset, E->size_class, "entry ", e);
    }
    for (int c = 0; c < YKR_NCLASSES; c++) {
        uint64_t n = 0;
        for (uint64_t off = h->class_free_head[c]; off != NONE32; off = block_link(v, (uint32_t)off)) {
            if (off >= v->arena_cap || ++n > units) { vsay(&o, "free list of class ", c, " is broken at ", off, ""); break; }
            MARK(off, c, "free list of class ", (uint64_t)c);
        }
        if (n != h->class_free_count[c]) vsay(&o, "class_free_count[", c, "] != counted ", n, "");
    }
    if (covered * YKR_MIN_BLOCK != h->arena_bump)
        vsay(&o, "arena blocks cover ", covered * YKR_MIN_BLOCK, " bytes but bump is ", h->arena_bump, "");
#undef MARK
    return o.n;
}
