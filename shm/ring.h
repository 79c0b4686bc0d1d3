/* ykshm shared-memory event ring: the one declaration of the segment layout.
 *
 * Everything between CDEF BEGIN and CDEF END is also fed to cffi's cdef() by
 * shm/_ring_build.py, so it must stay plain C declarations (no other preprocessor
 * directives than integer #defines).  Field meanings and the size formula are documented in
 * shm/ring.py.
 */
#ifndef YKSHM_RING_H
#define YKSHM_RING_H
#include <stdint.h>
#include <stddef.h>

/* CDEF BEGIN */
#define YKR_LAYOUT_VERSION 2
#define YKR_HEADER_SIZE 4096
#define YKR_RECORD_SIZE 40
#define YKR_REQ_SLOT_SIZE 4096
#define YKR_NCLASSES 7
#define YKR_MIN_BLOCK 16
#define YKR_MAX_STRING 1024
#define YKR_MAX_RESOURCE 960
#define YKR_MAX_EVENT_JSON 32768
#define YKR_OVERFLOW 4294967295
#define YKR_FLAG_CHANGE_MASK 7
#define YKR_FLAG_REF_UUID 8
#define YKR_LAP_MOD 2147483647
#define YKR_KIND_STRING 0
#define YKR_KIND_RESOURCE 1
#define YKR_KIND_PAIR 2
#define YKR_AUX_SHIFT 4
#define YKR_AUX_MASK 48
#define YKR_AUX_NONE 0
#define YKR_AUX_MESSAGE 1
#define YKR_AUX_RESOURCE 2
#define YKR_AUX_PAIR 3
#define YKR_KIND_EVENTS 1
#define YKR_KIND_REQUESTS 2

/* error codes returned (negated) by ykr_* functions */
#define YKR_E_BADTYPE 1
#define YKR_E_BADCHANGE 2
#define YKR_E_BADDETAIL 3
#define YKR_E_BADRESOURCE 4
#define YKR_E_RESOURCE_TOO_LARGE 5
#define YKR_E_NOT_PINNED 6
#define YKR_E_CLOSED 7
#define YKR_E_MAGIC 10
#define YKR_E_VERSION 11
#define YKR_E_SIZE 12
#define YKR_E_KIND 13
#define YKR_E_LAYOUT 14

/* One event: 40 bytes, no padding (layout version 2; version 1 was 48 bytes with a 64-bit seq
 * and separate message and resource handles).  seq is the per-slot seqlock of the slot's lap
 * (lap = id / capacity, counted modulo YKR_LAP_MOD): 0 = never written, 2*lap+1 while the
 * writer fills the slot, 2*lap+2 once it is stable.  aux is the event's message or resource
 * handle, or a pair entry holding both (flags' aux bits say which). */
typedef struct {
    uint32_t seq;
    uint32_t object_id;      /* intern handles, 0 = empty, YKR_OVERFLOW = intern table full */
    int64_t timestamp_nano;
    uint8_t reference[16];   /* raw UUID bytes (flags & REF_UUID) or a uint32 intern handle */
    uint32_t aux;            /* YKR_AUX_MESSAGE / _RESOURCE: that handle; YKR_AUX_PAIR: a pair */
    uint16_t change_detail;
    uint8_t type;
    uint8_t flags;           /* change type in bits 0-2, YKR_FLAG_REF_UUID, YKR_AUX_* << 4 */
} ykr_record;

/* One interned string or resource: 20 bytes. */
typedef struct {
    uint32_t next;           /* hash chain when live, free list when refcount == 0 */
    uint32_t refcount;
    uint32_t hash;
    uint32_t offset;         /* arena offset of the bytes */
    uint16_t length;
    uint8_t size_class;      /* block size = 16 << size_class */
    uint8_t kind;            /* YKR_KIND_STRING, _RESOURCE or _PAIR (2 handles: message, resource;
                              * it holds one reference on each) */
} ykr_entry;

typedef struct {
    /* identity, written once at creation */
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint8_t instance_uuid[16];
    uint64_t capacity;
    uint32_t record_size;
    uint32_t segment_kind;
    uint64_t total_size;
    uint64_t entries_capacity;
    uint64_t buckets_capacity;
    uint64_t arena_capacity;
    uint64_t off_records;
    uint64_t off_entries;
    uint64_t off_buckets;
    uint64_t off_arena;
    int64_t created_nano;
    uint64_t reserved0[3];
    /* writer state */
    uint64_t next_id;
    uint64_t lowest_id;
    int64_t writer_pid;
    int64_t heartbeat_nano;
    uint32_t superseded;
    uint32_t writer_closed;
    uint64_t writers_attached;
    uint32_t pinned_object;     /* entry the writer holds one extra reference on (its current */
    uint32_t pinned_resource;   /* objectID / resource, see ykr_pin), 0 = none; verify counts them */
    uint32_t wake_seq;          /* bumped by ykr_wake: the futex word readers sleep on (FUTEX_WAIT
                                 * needs no write access, so read-only readers can wait on it) */
    uint32_t reserved1;
    /* counters */
    uint64_t events_written;
    uint64_t strings_interned;
    uint64_t strings_released;
    uint64_t intern_hits;
    uint64_t intern_full_drops;
    uint64_t strings_cut;
    uint64_t messages_cut;
    uint64_t entries_live;
    uint64_t entries_live_resources;
    uint64_t entries_live_pairs;
    uint64_t entries_hwm;
    uint64_t entry_free_head;
    uint64_t entry_free_count;
    uint64_t arena_bump;
    uint64_t arena_live_bytes;
    uint64_t class_free_head[8];
    uint64_t class_free_count[8];
    /* request store (segment_kind == YKR_KIND_REQUESTS) */
    uint64_t req_read_id;
    uint64_t req_overwritten;
    uint64_t req_delivered;
    uint64_t req_skipped;       /* slots ykr_req_take refused: lengths or resource out of shape */
    uint64_t reserved2[7];
} ykr_header;

/* One request-store slot (REQUEST/NONE events, consumed only by the engine): 4096 bytes. */
typedef struct {
    uint64_t seq;            /* 0 = empty (never written or delivered), else 2*(id+1) */
    int64_t timestamp_nano;
    uint16_t object_len;
    uint16_t reference_len;
    uint16_t message_len;
    uint16_t resource_len;
    uint8_t type;
    uint8_t change_type;
    uint16_t change_detail;
    uint32_t reserved;
    char data[4064];
} ykr_req_slot;

/* A process-local view of one mapped segment (pointers into the mapping). */
typedef struct {
    uint8_t *base;
    uint64_t size;
    ykr_header *hdr;
    ykr_record *records;
    ykr_entry *entries;
    uint32_t *buckets;
    uint8_t *arena;
    ykr_req_slot *slots;
    uint64_t capacity;
    uint64_t entries_cap;
    uint64_t bucket_mask;
    uint64_t arena_cap;
    uint32_t last[5];        /* writer only: last handle per field (object, ref, msg, res, pair) */
    uint64_t woken_next;     /* writer only: header.next_id at the last ykr_wake */
} ykr_view;

typedef struct {
    uint64_t next_id;        /* the next id to read after this call */
    uint64_t count;          /* events rendered */
    uint64_t length;         /* bytes rendered */
    uint64_t lost_first;
    uint64_t lost_last;
    int32_t has_lost;
    int32_t more;            /* stopped early because the buffer was full */
} ykr_render_result;

typedef struct {
    uint64_t entries_capacity;
    uint64_t buckets_capacity;
    uint64_t arena_capacity;
    uint64_t off_records;
    uint64_t off_entries;
    uint64_t off_buckets;
    uint64_t off_arena;
    uint64_t total_size;
} ykr_layout;

void ykr_events_layout(uint64_t capacity, ykr_layout *out);
void ykr_requests_layout(uint64_t capacity, ykr_layout *out);
int ykr_init(uint8_t *base, uint64_t size, uint32_t kind, uint64_t capacity,
             const uint8_t *uuid16, int64_t now_nano);
int ykr_view_init(ykr_view *v, uint8_t *base, uint64_t size, uint32_t kind);
int64_t ykr_now(void);
void ykr_heartbeat(ykr_view *v, int64_t now_nano);
int ykr_wake(ykr_view *v);
void ykr_set_writer(ykr_view *v, int64_t pid, int64_t now_nano);
int ykr_bounds(ykr_view *v, uint64_t *lowest, uint64_t *next_id);

uint32_t ykr_pin(ykr_view *v, int which, const char *s, size_t n);
void ykr_unpin_all(ykr_view *v);
int64_t ykr_publish_pinned(ykr_view *v, int type, int change_type, int change_detail,
                           const char *ref, size_t reflen, int with_resource);
void ykr_view_clear(ykr_view *v);
int64_t ykr_publish(ykr_view *v, int type, int change_type, int change_detail, int64_t ts,
                    const char *obj, size_t objlen, const char *ref, size_t reflen,
                    const char *msg, size_t msglen, const char *res, size_t reslen);

/* mode 0: events joined by ","; mode 1: NDJSON.  cursor != 0: a start below lowest is
 * reported as lost and reading continues at lowest; cursor == 0: such a start renders nothing. */
int ykr_render(ykr_view *v, uint64_t start, uint64_t count, int mode, int cursor,
               char *buf, uint64_t buflen, ykr_render_result *res);

int64_t ykr_req_publish(ykr_view *v, int64_t ts, const char *obj, size_t objlen,
                        const char *ref, size_t reflen, const char *msg, size_t msglen,
                        const char *res, size_t reslen);
int64_t ykr_req_take(ykr_view *v, uint64_t max_events, char *buf, uint64_t buflen,
                     uint64_t *out_len);

int64_t ykr_verify(ykr_view *v, uint32_t *counts, uint8_t *bitmap, char *out, uint64_t outlen);
/* CDEF END */

/* C only (not in the cdef): it blocks, so Python calls it through ykr_wait, which releases the
 * GIL (shm/_ring_build.py). */
int ykr_futex_wait(const uint32_t *word, uint32_t expected, double timeout);

#endif
