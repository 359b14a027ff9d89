/* A small JSON reader for the test vectors: objects, arrays, strings (with \u escapes,
 * surrogate pairs included, written out as UTF-8), integers, true, false and null.
 * Enough for the vector files; not a general parser. */
#ifndef BRMCP_TEST_JSON_H
#define BRMCP_TEST_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } json_type;

typedef struct json {
    json_type type;
    int64_t num;       /* J_NUM, J_BOOL */
    char *str;         /* J_STR: NUL-terminated; may hold NULs, see len */
    size_t len;        /* J_STR: bytes; J_ARR, J_OBJ: items */
    struct json *items;
    char **keys;       /* J_OBJ */
} json;

static const char *json_value(const char *p, json *out);

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static int json_hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static size_t json_utf8(unsigned cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static const char *json_string(const char *p, char **str, size_t *len) {
    if (*p != '"') return NULL;
    p++;
    const char *end = p;
    while (*end && *end != '"') end += (*end == '\\' && end[1]) ? 2 : 1;
    if (*end != '"') return NULL;
    char *out = malloc((size_t)(end - p) + 1);
    size_t n = 0;
    while (p < end) {
        if (*p != '\\') { out[n++] = *p++; continue; }
        p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; p++; break;
        case 't': out[n++] = '\t'; p++; break;
        case 'r': out[n++] = '\r'; p++; break;
        case 'b': out[n++] = '\b'; p++; break;
        case 'f': out[n++] = '\f'; p++; break;
        case 'u': {
            unsigned cp, lo;
            if (!json_hex4(p + 1, &cp)) { free(out); return NULL; }
            p += 5;
            if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u' && json_hex4(p + 2, &lo)
                && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            }
            n += json_utf8(cp, out + n);
            break;
        }
        default: out[n++] = *p++; break;
        }
    }
    out[n] = 0;
    *str = out;
    *len = n;
    return end + 1;
}

static const char *json_items(const char *p, json *out, int object) {
    size_t cap = 4;
    out->items = malloc(cap * sizeof(json));
    out->keys = object ? malloc(cap * sizeof(char *)) : NULL;
    out->len = 0;
    p = json_ws(p + 1);
    if (*p == (object ? '}' : ']')) return p + 1;
    for (;;) {
        if (out->len == cap) {
            cap *= 2;
            out->items = realloc(out->items, cap * sizeof(json));
            if (object) out->keys = realloc(out->keys, cap * sizeof(char *));
        }
        if (object) {
            size_t klen;
            p = json_string(json_ws(p), &out->keys[out->len], &klen);
            if (!p) return NULL;
            p = json_ws(p);
            if (*p++ != ':') { free(out->keys[out->len]); return NULL; }
        }
        p = json_value(json_ws(p), &out->items[out->len]);
        if (!p) { if (object) free(out->keys[out->len]); return NULL; }
        out->len++;
        p = json_ws(p);
        if (*p == ',') { p++; continue; }
        if (*p == (object ? '}' : ']')) return p + 1;
        return NULL;
    }
}

static const char *json_value(const char *p, json *out) {
    memset(out, 0, sizeof *out);
    p = json_ws(p);
    if (*p == '{') { out->type = J_OBJ; return json_items(p, out, 1); }
    if (*p == '[') { out->type = J_ARR; return json_items(p, out, 0); }
    if (*p == '"') { out->type = J_STR; return json_string(p, &out->str, &out->len); }
    if (!strncmp(p, "true", 4)) { out->type = J_BOOL; out->num = 1; return p + 4; }
    if (!strncmp(p, "false", 5)) { out->type = J_BOOL; return p + 5; }
    if (!strncmp(p, "null", 4)) { out->type = J_NULL; return p + 4; }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        char *end;
        out->type = J_NUM;
        out->num = strtoll(p, &end, 10);
        return end;
    }
    return NULL;
}

static void json_free(json *j) {
    if (j->type == J_STR) free(j->str);
    if (j->type == J_ARR || j->type == J_OBJ) {
        for (size_t i = 0; i < j->len; i++) {
            json_free(&j->items[i]);
            if (j->keys) free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
    }
}

/* The member `key` of object `j`, or NULL. */
static const json *json_get(const json *j, const char *key) {
    if (!j || j->type != J_OBJ) return NULL;
    for (size_t i = 0; i < j->len; i++)
        if (!strcmp(j->keys[i], key)) return &j->items[i];
    return NULL;
}

#endif
