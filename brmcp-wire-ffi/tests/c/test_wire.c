/* Tests of the C API: roundtrips, refusals at the boundary, the shared Go vectors and
 * the assembler. Usage: test_wire <directory holding wire-parse-go.jsonl and
 * wire-encode-go.jsonl>. Prints one line per failed check and ends with
 * "N passed, M failed"; exits non-zero on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brmcp_wire.h"
#include "json.h"

static int checks_failed;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, \
                    #cond);                                                                \
            checks_failed++;                                                               \
        }                                                                                  \
    } while (0)

#define CHECK_STATUS(expr, want)                                                           \
    do {                                                                                   \
        brmcp_wire_status got_ = (expr);                                                   \
        if (got_ != (want)) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s gave %d (%s), want %s\n", __FILE__, __LINE__,   \
                    __func__, #expr, (int)got_, brmcp_wire_strerror(got_), #want);         \
            checks_failed++;                                                               \
        }                                                                                  \
    } while (0)

#define OK BRMCP_WIRE_STATUS_OK
#define COMPAT BRMCP_WIRE_MODE_COMPATIBLE
#define CANON BRMCP_WIRE_MODE_CANONICAL

static const char *SID = "a1b2c3d4e5f60718";
static const char *MID = "0000000000001000";

/* Parses `text` and decodes its body into a fresh buffer (caller frees); NULL on any
 * refusal, with the status in *status. */
static uint8_t *parse_decode(const char *text, size_t len, uint32_t mode, brmcp_wire_part *part,
                             size_t *out_len, brmcp_wire_status *status) {
    *status = brmcp_wire_parse((const uint8_t *)text, len, mode, part);
    if (*status != OK) return NULL;
    uint8_t *out = malloc(part->decoded_len_max ? part->decoded_len_max : 1);
    *status = brmcp_wire_decode_body((const uint8_t *)text + part->body_offset, part->body_len,
                                     mode, out, part->decoded_len_max, out_len);
    if (*status != OK) { free(out); return NULL; }
    return out;
}

static void test_roundtrip(void) {
    const char *payload = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
    size_t plen = strlen(payload);
    brmcp_wire_header h;
    CHECK_STATUS(brmcp_wire_header_init(&h, (const uint8_t *)SID, strlen(SID),
                                        (const uint8_t *)MID, strlen(MID), 1, 1, 1767225600),
                 OK);
    CHECK(h.sid_len == 16 && !strcmp(h.sid, SID) && !strcmp(h.mid, MID));
    size_t need = 0, written = 0;
    CHECK_STATUS(brmcp_wire_encoded_len(&h, plen, &need), OK);
    char *pm = malloc(need);
    CHECK_STATUS(brmcp_wire_encode_part(&h, (const uint8_t *)payload, plen, (uint8_t *)pm, need,
                                        &written),
                 OK);
    CHECK(written == need);
    const char *prefix = "--mcp[v=1,sid=a1b2c3d4e5f60718,mid=0000000000001000,seq=1/1,exp=1767225600]--";
    CHECK(written > strlen(prefix) && !memcmp(pm, prefix, strlen(prefix)));

    for (uint32_t mode = COMPAT; mode <= CANON; mode++) {
        brmcp_wire_part part;
        brmcp_wire_status st;
        size_t n = 0;
        uint8_t *chunk = parse_decode(pm, written, mode, &part, &n, &st);
        CHECK_STATUS(st, OK);
        CHECK(chunk && n == plen && !memcmp(chunk, payload, plen));
        CHECK(part.header.seq == 1 && part.header.total == 1 && part.header.exp == 1767225600);
        CHECK(!strcmp(part.header.sid, SID) && part.header.mid_len == 16);
        CHECK(part.body_offset == strlen(prefix) && part.body_offset + part.body_len == written);
        free(chunk);
    }
    free(pm);
}

static void test_short_buffers(void) {
    brmcp_wire_header h;
    CHECK_STATUS(brmcp_wire_header_init(&h, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        2, 3, 0),
                 OK);
    uint8_t out[16];
    size_t written = 0, need = 0;
    CHECK_STATUS(brmcp_wire_encode_part(&h, (const uint8_t *)"hello", 5, out, sizeof out, &written),
                 BRMCP_WIRE_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(brmcp_wire_encoded_len(&h, 5, &need), OK);
    CHECK(written == need && need > sizeof out);

    const char *body = "aGVsbG8gd29ybGQ="; /* "hello world" */
    CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)body, strlen(body), COMPAT, out, 4,
                                        &written),
                 BRMCP_WIRE_STATUS_BUFFER_TOO_SMALL);
    CHECK(written == 11);
    CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)body, strlen(body), COMPAT, out, 11,
                                        &written),
                 OK);
    CHECK(written == 11 && !memcmp(out, "hello world", 11));
    /* An empty output buffer may be null. */
    CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)body, strlen(body), COMPAT, NULL, 0,
                                        &written),
                 BRMCP_WIRE_STATUS_BUFFER_TOO_SMALL);
}

static void test_null_and_bad_arguments(void) {
    brmcp_wire_part part;
    brmcp_wire_header h;
    size_t n;
    const char *pm = "--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD";
    CHECK_STATUS(brmcp_wire_parse(NULL, 5, COMPAT, &part), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_parse(NULL, 0, COMPAT, &part), BRMCP_WIRE_STATUS_NOT_ENVELOPE);
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)pm, strlen(pm), COMPAT, NULL),
                 BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)pm, strlen(pm), 7, &part),
                 BRMCP_WIRE_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)pm, SIZE_MAX, COMPAT, &part),
                 BRMCP_WIRE_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)"QUJD", 4, COMPAT, NULL, 3, &n),
                 BRMCP_WIRE_STATUS_NULL_POINTER);
    uint8_t out[3];
    CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)"QUJD", 4, COMPAT, out, 3, NULL),
                 BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_header_init(NULL, (const uint8_t *)"aa", 2, (const uint8_t *)"bb", 2,
                                        1, 1, 0),
                 BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_header_init(&h, (const uint8_t *)"aa", 2, (const uint8_t *)"bb", 2,
                                        2, 1, 0),
                 BRMCP_WIRE_STATUS_BAD_SEQ);
    CHECK_STATUS(brmcp_wire_header_init(&h, (const uint8_t *)"aa", 2, (const uint8_t *)"bb", 2,
                                        1, 65, 0),
                 BRMCP_WIRE_STATUS_BAD_SEQ);
    CHECK_STATUS(brmcp_wire_encoded_len(NULL, 1, &n), BRMCP_WIRE_STATUS_NULL_POINTER);
    /* A header filled in by hand is checked again. */
    CHECK_STATUS(brmcp_wire_header_init(&h, (const uint8_t *)"aa", 2, (const uint8_t *)"bb", 2,
                                        1, 1, 0),
                 OK);
    h.sid_len = 200;
    CHECK_STATUS(brmcp_wire_encoded_len(&h, 1, &n), BRMCP_WIRE_STATUS_ID_TOO_LONG);
    h.sid_len = 2;
    h.sid[0] = 'A';
    CHECK_STATUS(brmcp_wire_encoded_len(&h, 1, &n), BRMCP_WIRE_STATUS_ID_NOT_LOWER_HEX);
    h.sid[0] = 'a';
    h.seq = 0;
    CHECK_STATUS(brmcp_wire_encoded_len(&h, 1, &n), BRMCP_WIRE_STATUS_BAD_SEQ);
    h.seq = 1;
    CHECK_STATUS(brmcp_wire_encode_part(&h, NULL, 0, out, sizeof out, &n),
                 BRMCP_WIRE_STATUS_EMPTY_PAYLOAD);
    CHECK_STATUS(brmcp_wire_check_id(NULL, 0), BRMCP_WIRE_STATUS_ID_EMPTY);
    CHECK_STATUS(brmcp_wire_id_from_entropy(NULL, (char *)out), BRMCP_WIRE_STATUS_NULL_POINTER);
}

static void test_invalid_utf8(void) {
    brmcp_wire_part part;
    /* An unknown key's value is ignored whatever its bytes, as in Go. */
    const char *unknown = "--mcp[v=1,sid=aa,mid=bb,seq=1/1,x=\xff\xfe]--QUJD";
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)unknown, strlen(unknown), COMPAT, &part), OK);
    CHECK(!strcmp(part.header.sid, "aa") && !strcmp(part.header.mid, "bb"));
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)unknown, strlen(unknown), CANON, &part),
                 BRMCP_WIRE_STATUS_UNKNOWN_FIELD);
    const char *sid = "--mcp[v=1,sid=a\xff,mid=bb,seq=1/1,exp=0]--QUJD";
    CHECK_STATUS(brmcp_wire_parse((const uint8_t *)sid, strlen(sid), COMPAT, &part),
                 BRMCP_WIRE_STATUS_BAD_ID);
    CHECK_STATUS(brmcp_wire_check_id((const uint8_t *)"a\xff", 2), BRMCP_WIRE_STATUS_ID_NOT_LOWER_HEX);
    const char *chat = "\xc3\x28 not utf-8 chat";
    brmcp_wire_status st = brmcp_wire_parse((const uint8_t *)chat, strlen(chat), COMPAT, &part);
    CHECK_STATUS(st, BRMCP_WIRE_STATUS_NOT_ENVELOPE);
    CHECK(brmcp_wire_is_foreign(st));
}

static void test_strerror(void) {
    CHECK(!strcmp(brmcp_wire_strerror(BRMCP_WIRE_STATUS_OK), "ok"));
    CHECK(!strcmp(brmcp_wire_strerror(BRMCP_WIRE_STATUS_EXPIRED), "part deadline passed"));
    CHECK(!strcmp(brmcp_wire_strerror(-1), "unknown status"));
    CHECK(!strcmp(brmcp_wire_strerror(1000), "unknown status"));
    int distinct = 0;
    for (int code = 0; code < 100; code++)
        if (strcmp(brmcp_wire_strerror(code), "unknown status")) distinct++;
    CHECK(distinct == 38);
    CHECK(brmcp_wire_is_foreign(BRMCP_WIRE_STATUS_UNSUPPORTED_VERSION));
    CHECK(!brmcp_wire_is_foreign(BRMCP_WIRE_STATUS_BAD_SEQ));
}

static void test_ids(void) {
    const uint8_t entropy[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
    char id[17];
    memset(id, 'x', sizeof id);
    CHECK_STATUS(brmcp_wire_id_from_entropy(entropy, id), OK);
    CHECK(!strcmp(id, "0123456789abcdef"));
    CHECK_STATUS(brmcp_wire_check_id((const uint8_t *)id, 16), OK);
    CHECK_STATUS(brmcp_wire_check_id((const uint8_t *)"0123456789abcdef0123456789abcdef0", 33),
                 BRMCP_WIRE_STATUS_ID_TOO_LONG);
    CHECK_STATUS(brmcp_wire_check_id((const uint8_t *)"0123456789abcdef0123456789abcdef", 32), OK);
    CHECK(brmcp_wire_is_expired(100, 101) && !brmcp_wire_is_expired(100, 100));
    CHECK(!brmcp_wire_is_expired(0, INT64_MAX) && !brmcp_wire_is_expired(-5, INT64_MAX));
}

static void test_chunks(void) {
    const uint8_t payload[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    brmcp_wire_chunks plan;
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        42, payload, sizeof payload, 4),
                 OK);
    CHECK(plan.total == 3 && plan.max_pm_len > 0);
    size_t joined = 0;
    for (uint16_t seq = 1; seq <= plan.total; seq++) {
        brmcp_wire_header h;
        const uint8_t *chunk = NULL;
        size_t len = 0, written = 0;
        CHECK_STATUS(brmcp_wire_chunks_part(&plan, seq, &h, &chunk, &len), OK);
        CHECK(h.seq == seq && h.total == 3 && h.exp == 42 && !strcmp(h.mid, MID));
        CHECK(chunk == payload + joined && len == (seq < 3 ? 4u : 2u));
        joined += len;
        uint8_t *pm = malloc(plan.max_pm_len);
        CHECK_STATUS(brmcp_wire_encode_part(&h, chunk, len, pm, plan.max_pm_len, &written), OK);
        free(pm);
    }
    CHECK(joined == sizeof payload);
    brmcp_wire_header h;
    const uint8_t *chunk;
    size_t len;
    CHECK_STATUS(brmcp_wire_chunks_part(&plan, 0, &h, &chunk, &len), BRMCP_WIRE_STATUS_BAD_SEQ);
    CHECK_STATUS(brmcp_wire_chunks_part(&plan, 4, &h, &chunk, &len), BRMCP_WIRE_STATUS_BAD_SEQ);
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        0, payload, 0, 4),
                 BRMCP_WIRE_STATUS_EMPTY_PAYLOAD);
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        0, payload, sizeof payload, 0),
                 BRMCP_WIRE_STATUS_ZERO_CHUNK_LEN);
    static uint8_t big[800 * 1024];
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        0, big, 65, 1),
                 BRMCP_WIRE_STATUS_TOO_MANY_PARTS);
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)MID, 16,
                                        0, big, sizeof big, sizeof big),
                 BRMCP_WIRE_STATUS_PM_TOO_LARGE);
    CHECK_STATUS(brmcp_wire_chunks_init(&plan, (const uint8_t *)"", 0, (const uint8_t *)MID, 16,
                                        0, payload, sizeof payload, 4),
                 BRMCP_WIRE_STATUS_ID_EMPTY);
}

/* ---- the shared vectors -------------------------------------------------------- */

static char *read_file(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* Calls `each` on every line of the file, parsed; returns the number of lines. */
static int each_line(const char *dir, const char *name, void (*each)(const json *)) {
    size_t len;
    char *text = read_file(dir, name, &len);
    if (!text) { checks_failed++; return 0; }
    int lines = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (*line) {
            json j;
            const char *end = json_value(line, &j);
            CHECK(end != NULL);
            if (end) { each(&j); lines++; }
            json_free(&j);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return lines;
}

static int parse_accepted;

/* The base64 text our encoder writes for `chunk` (the body of a one-part PM). */
static char *canonical_b64(const uint8_t *chunk, size_t len) {
    brmcp_wire_header h;
    brmcp_wire_header_init(&h, (const uint8_t *)"a", 1, (const uint8_t *)"b", 1, 1, 1, 0);
    size_t need = 0, n = 0;
    brmcp_wire_encoded_len(&h, len, &need);
    char *pm = malloc(need + 1);
    if (brmcp_wire_encode_part(&h, chunk, len, (uint8_t *)pm, need, &n) != OK) { free(pm); return NULL; }
    pm[n] = 0;
    const char *body = strstr(pm, "]--") + 3;
    memmove(pm, body, strlen(body) + 1);
    return pm;
}

static void parse_case(const json *c) {
    const json *body = json_get(c, "body"), *go = json_get(c, "go");
    const char *name = json_get(c, "case")->str;
    int go_ok = (int)json_get(go, "ok")->num;
    brmcp_wire_part part;
    brmcp_wire_status st;
    size_t n = 0;
    uint8_t *chunk = parse_decode(body->str, body->len, COMPAT, &part, &n, &st);
    if ((chunk != NULL) != go_ok) {
        fprintf(stderr, "vector %s: go ok=%d, ours %s\n", name, go_ok, brmcp_wire_strerror(st));
        checks_failed++;
    }
    if (chunk && go_ok) {
        parse_accepted++;
        CHECK(!strcmp(part.header.sid, json_get(go, "sid")->str));
        CHECK(!strcmp(part.header.mid, json_get(go, "mid")->str));
        CHECK(part.header.seq == json_get(go, "seq")->num);
        CHECK(part.header.total == json_get(go, "total")->num);
        CHECK(part.header.exp == json_get(go, "exp")->num);
        char *b64 = canonical_b64(chunk, n);
        CHECK(b64 && !strcmp(b64, json_get(go, "chunk_b64")->str));
        if (b64 && strcmp(b64, json_get(go, "chunk_b64")->str))
            fprintf(stderr, "vector %s: chunk differs\n", name);
        free(b64);
    }
    free(chunk);
}

static void test_parse_vectors(const char *dir) {
    parse_accepted = 0;
    int lines = each_line(dir, "wire-parse-go.jsonl", parse_case);
    CHECK(lines == 276);
    CHECK(parse_accepted > 0 && parse_accepted < lines);
}

/* The vectors' payload generator: xorshift64 (13, 7, 17), little-endian words. */
static uint8_t *gen_payload(uint64_t seed, size_t len) {
    uint8_t *out = malloc(len + 8);
    uint64_t x = seed;
    for (size_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (int k = 0; k < 8; k++) out[i + (size_t)k] = (uint8_t)(x >> (8 * k));
    }
    return out;
}

static int encode_ok_cases;

static void encode_case(const json *c) {
    const char *name = json_get(c, "case")->str;
    const json *sid = json_get(c, "sid"), *mid = json_get(c, "mid");
    size_t plen = (size_t)json_get(c, "payload_len")->num;
    const json *b64 = json_get(c, "payload_b64");
    uint8_t *payload;
    if (b64) {
        payload = malloc(plen + 3);
        size_t n = 0;
        CHECK_STATUS(brmcp_wire_decode_body((const uint8_t *)b64->str, b64->len, COMPAT, payload,
                                            plen + 3, &n),
                     b64->len ? OK : BRMCP_WIRE_STATUS_BODY_EMPTY);
        CHECK(n == plen || b64->len == 0);
    } else {
        const json *g = json_get(c, "payload_gen");
        payload = gen_payload((uint64_t)json_get(g, "seed")->num, plen);
    }
    int64_t chunk = json_get(c, "chunk")->num;
    size_t chunk_len = chunk <= 0 ? BRMCP_WIRE_DEFAULT_CHUNK_LEN : (size_t)chunk;
    brmcp_wire_chunks plan;
    brmcp_wire_status st = brmcp_wire_chunks_init(
        &plan, (const uint8_t *)sid->str, sid->len, (const uint8_t *)mid->str, mid->len,
        json_get(c, "exp")->num, payload, plen, chunk_len);
    if (json_get(c, "ok")->num) {
        encode_ok_cases++;
        CHECK_STATUS(st, OK);
        const json *parts = json_get(c, "parts");
        CHECK(st != OK || plan.total == parts->len);
        uint8_t *pm = st == OK ? malloc(plan.max_pm_len) : NULL;
        for (uint16_t seq = 1; st == OK && seq <= plan.total && seq <= parts->len; seq++) {
            brmcp_wire_header h;
            const uint8_t *part;
            size_t len, written = 0;
            CHECK_STATUS(brmcp_wire_chunks_part(&plan, seq, &h, &part, &len), OK);
            CHECK_STATUS(brmcp_wire_encode_part(&h, part, len, pm, plan.max_pm_len, &written), OK);
            const json *want = &parts->items[seq - 1];
            if (written != want->len || memcmp(pm, want->str, written)) {
                fprintf(stderr, "vector %s: part %u differs\n", name, seq);
                checks_failed++;
            }
        }
        free(pm);
    } else {
        const char *err = json_get(c, "error")->str;
        if (!strncmp(err, "wire: invalid sid", 17))
            CHECK(st == BRMCP_WIRE_STATUS_ID_EMPTY || st == BRMCP_WIRE_STATUS_ID_TOO_LONG
                  || st == BRMCP_WIRE_STATUS_ID_NOT_LOWER_HEX);
        else if (!strcmp(err, "wire: empty payload"))
            CHECK_STATUS(st, BRMCP_WIRE_STATUS_EMPTY_PAYLOAD);
        else if (!strcmp(err, "message exceeds size bounds"))
            CHECK_STATUS(st, BRMCP_WIRE_STATUS_TOO_MANY_PARTS);
        else {
            fprintf(stderr, "vector %s: unknown go error %s\n", name, err);
            checks_failed++;
        }
    }
    free(payload);
}

static void test_encode_vectors(const char *dir) {
    encode_ok_cases = 0;
    int lines = each_line(dir, "wire-encode-go.jsonl", encode_case);
    CHECK(lines == 37 && encode_ok_cases == 30);
}

/* ---- the assembler ------------------------------------------------------------- */

/* PM texts of a payload split at `chunk_len` (caller frees each and the array). */
static char **split(const char *mid, const char *payload, size_t chunk_len, int64_t exp,
                    uint16_t *total) {
    brmcp_wire_chunks plan;
    if (brmcp_wire_chunks_init(&plan, (const uint8_t *)SID, 16, (const uint8_t *)mid,
                               strlen(mid), exp, (const uint8_t *)payload, strlen(payload),
                               chunk_len) != OK)
        return NULL;
    char **pms = calloc(plan.total, sizeof(char *));
    for (uint16_t seq = 1; seq <= plan.total; seq++) {
        brmcp_wire_header h;
        const uint8_t *chunk;
        size_t len, n = 0;
        brmcp_wire_chunks_part(&plan, seq, &h, &chunk, &len);
        pms[seq - 1] = malloc(plan.max_pm_len + 1);
        brmcp_wire_encode_part(&h, chunk, len, (uint8_t *)pms[seq - 1], plan.max_pm_len, &n);
        pms[seq - 1][n] = 0;
    }
    *total = plan.total;
    return pms;
}

static void free_split(char **pms, uint16_t total) {
    for (uint16_t i = 0; pms && i < total; i++) free(pms[i]);
    free(pms);
}

static brmcp_wire_status add(brmcp_wire_assembler *a, const uint8_t *peer, const char *pm,
                             int64_t now, brmcp_wire_accepted *acc) {
    return brmcp_wire_assembler_add(a, peer, (const uint8_t *)pm, strlen(pm), COMPAT, now, acc);
}

static void exercise(brmcp_wire_assembler *a) {
    uint8_t peer[BRMCP_WIRE_PEER_LEN] = {1}, other[BRMCP_WIRE_PEER_LEN] = {2};
    const char *payload = "the quick brown fox jumps over the lazy dog";
    const int64_t now = 1767225600;
    uint16_t total = 0;
    char **pms = split("0000000000000001", payload, 8, now + 60, &total);
    CHECK(pms && total == 6);
    brmcp_wire_accepted acc;
    /* Out of order, with a duplicate: only the last part completes. */
    const int order[] = {5, 2, 0, 2, 4, 1, 3};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        CHECK_STATUS(add(a, peer, pms[order[i]], now, &acc), OK);
        if (i == 3) CHECK(acc.kind == BRMCP_WIRE_ACCEPTED_DUPLICATE);
        else if (i + 1 < sizeof order / sizeof order[0]) CHECK(acc.kind == BRMCP_WIRE_ACCEPTED_PENDING);
        if (i == 1) {
            brmcp_wire_stats s;
            CHECK_STATUS(brmcp_wire_assembler_stats(a, &s), OK);
            CHECK(s.messages == 1 && s.bytes >= 11);
            bool has = false;
            int64_t deadline = 0;
            CHECK_STATUS(brmcp_wire_assembler_next_deadline(a, &has, &deadline), OK);
            CHECK(has && deadline == now + 61);
        }
    }
    CHECK(acc.kind == BRMCP_WIRE_ACCEPTED_COMPLETE);
    CHECK(acc.message_len == strlen(payload) && !memcmp(acc.message, payload, acc.message_len));
    brmcp_wire_stats s;
    CHECK_STATUS(brmcp_wire_assembler_stats(a, &s), OK);
    CHECK(s.messages == 0 && s.bytes == 0);
    bool has = true;
    int64_t deadline = -1;
    CHECK_STATUS(brmcp_wire_assembler_next_deadline(a, &has, &deadline), OK);
    CHECK(!has && deadline == 0);

    /* A single part completes at once; chat is "not ours"; an expired part is refused. */
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD", now, &acc), OK);
    CHECK(acc.kind == BRMCP_WIRE_ACCEPTED_COMPLETE && acc.message_len == 3 && !memcmp(acc.message, "ABC", 3));
    CHECK_STATUS(add(a, peer, "hello there", now, &acc), BRMCP_WIRE_STATUS_NOT_ENVELOPE);
    CHECK_STATUS(add(a, peer, pms[0], now + 61, &acc), BRMCP_WIRE_STATUS_EXPIRED);

    /* The per-peer bound (2 here): a third partial message is refused; another peer is not. */
    char mid[] = "00000000000000a0";
    for (int m = 0; m < 3; m++) {
        uint16_t t;
        mid[15] = (char)('0' + m);
        char **p = split(mid, payload, 8, 0, &t);
        CHECK_STATUS(add(a, peer, p[0], now, &acc), m < 2 ? OK : BRMCP_WIRE_STATUS_PEER_PENDING);
        if (m == 2) CHECK_STATUS(add(a, other, p[0], now, &acc), OK);
        free_split(p, t);
    }
    CHECK_STATUS(brmcp_wire_assembler_peer_stats(a, peer, &s), OK);
    CHECK(s.messages == 2);
    size_t dropped = 0;
    CHECK_STATUS(brmcp_wire_assembler_forget_peer(a, peer, &dropped), OK);
    CHECK(dropped == 2);
    CHECK_STATUS(brmcp_wire_assembler_peer_stats(a, peer, &s), OK);
    CHECK(s.messages == 0);
    /* The partial timeout (600 s by default here) expires the other peer's message. */
    CHECK_STATUS(brmcp_wire_assembler_expire(a, now + 600, &dropped), OK);
    CHECK(dropped == 0);
    CHECK_STATUS(brmcp_wire_assembler_expire(a, now + 601, &dropped), OK);
    CHECK(dropped == 1);

    /* A part count that contradicts its message drops the message. */
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=cc,seq=1/2,exp=0]--QUJD", now, &acc), OK);
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=cc,seq=2/3,exp=0]--QUJD", now, &acc),
                 BRMCP_WIRE_STATUS_INCONSISTENT_TOTAL);
    CHECK_STATUS(brmcp_wire_assembler_stats(a, &s), OK);
    CHECK(s.messages == 0);
    /* An invalid body refuses its part. */
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=dd,seq=1/1,exp=0]--QU!D", now, &acc),
                 BRMCP_WIRE_STATUS_BODY_INVALID);
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=dd,seq=1/1,exp=0]--QUJ", now, &acc),
                 BRMCP_WIRE_STATUS_BODY_INVALID);
    /* Null arguments. */
    CHECK_STATUS(add(NULL, peer, pms[0], now, &acc), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(add(a, NULL, pms[0], now, &acc), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(add(a, peer, pms[0], now, NULL), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_assembler_stats(a, NULL), BRMCP_WIRE_STATUS_NULL_POINTER);
    free_split(pms, total);
}

static void test_assembler_library_storage(void) {
    brmcp_wire_limits limits = brmcp_wire_limits_default();
    CHECK(limits.max_pending_per_peer == 8 && limits.max_message_bytes == 16u << 20);
    CHECK(limits.max_total_bytes == 64u << 20 && limits.partial_timeout_secs == 600);
    limits.max_pending_per_peer = 2;
    brmcp_wire_assembler *a = NULL;
    CHECK_STATUS(brmcp_wire_assembler_new(&limits, 4096, BRMCP_WIRE_MAX_PM_PAYLOAD_LEN, &a), OK);
    CHECK(a != NULL);
    if (a) exercise(a);
    brmcp_wire_assembler_free(a);
    brmcp_wire_assembler_free(NULL);
    CHECK_STATUS(brmcp_wire_assembler_new(NULL, 1, 1, &a), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_assembler_new(&limits, 1, 1, NULL), BRMCP_WIRE_STATUS_NULL_POINTER);
    CHECK_STATUS(brmcp_wire_assembler_new(&limits, SIZE_MAX, 1, &a),
                 BRMCP_WIRE_STATUS_INVALID_ARGUMENT);
}

static void test_assembler_caller_storage(void) {
    brmcp_wire_limits limits = brmcp_wire_limits_default();
    limits.max_pending_per_peer = 2;
    static uint8_t arena[4096], scratch[1024];
    brmcp_wire_assembler *a = NULL;
    CHECK_STATUS(brmcp_wire_assembler_new_in(&limits, arena, sizeof arena, scratch, sizeof scratch, &a),
                 OK);
    if (a) exercise(a);
    brmcp_wire_assembler_free(a);
    CHECK_STATUS(brmcp_wire_assembler_new_in(&limits, NULL, 16, scratch, sizeof scratch, &a),
                 BRMCP_WIRE_STATUS_NULL_POINTER);

    /* The arena bounds the bytes held: a message larger than it is refused. */
    static uint8_t small[16];
    CHECK_STATUS(brmcp_wire_assembler_new_in(&limits, small, sizeof small, scratch, 8, &a), OK);
    uint8_t peer[BRMCP_WIRE_PEER_LEN] = {3};
    brmcp_wire_accepted acc;
    uint16_t total;
    char **pms = split("0000000000000002", "0123456789abcdefghij", 10, 0, &total);
    CHECK_STATUS(add(a, peer, pms[0], 1, &acc), BRMCP_WIRE_STATUS_TOTAL_BYTES);
    /* And the scratch buffer bounds single-part messages. */
    CHECK_STATUS(add(a, peer, "--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--MDEyMzQ1Njc4OQ==", 1, &acc),
                 BRMCP_WIRE_STATUS_MESSAGE_TOO_LARGE);
    free_split(pms, total);
    brmcp_wire_assembler_free(a);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <vector directory>\n", argv[0]);
        return 2;
    }
    struct { const char *name; void (*run)(void); } tests[] = {
        {"roundtrip", test_roundtrip},
        {"short_buffers", test_short_buffers},
        {"null_and_bad_arguments", test_null_and_bad_arguments},
        {"invalid_utf8", test_invalid_utf8},
        {"strerror", test_strerror},
        {"ids", test_ids},
        {"chunks", test_chunks},
        {"assembler_library_storage", test_assembler_library_storage},
        {"assembler_caller_storage", test_assembler_caller_storage},
    };
    struct { const char *name; void (*run)(const char *); } vector_tests[] = {
        {"parse_vectors", test_parse_vectors},
        {"encode_vectors", test_encode_vectors},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = checks_failed;
        tests[i].run();
        if (checks_failed == before) passed++;
        else { failed++; printf("FAIL %s\n", tests[i].name); }
    }
    for (size_t i = 0; i < sizeof vector_tests / sizeof vector_tests[0]; i++) {
        int before = checks_failed;
        vector_tests[i].run(argv[1]);
        if (checks_failed == before) passed++;
        else { failed++; printf("FAIL %s\n", vector_tests[i].name); }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
