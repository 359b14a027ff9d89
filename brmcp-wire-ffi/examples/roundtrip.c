/* A message framed into PMs and read back, through the C API of brmcp-wire. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brmcp_wire.h"

/* Ends the program on a status that is not OK, with the library's message. */
static void check(brmcp_wire_status st, const char *what) {
    if (st != BRMCP_WIRE_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", what, brmcp_wire_strerror(st));
        exit(1);
    }
}

int main(void) {
    const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
    /* The library has no random source: a real sender takes these 8 bytes from the
     * operating system (getrandom). Fixed here, so the output below repeats. */
    const uint8_t entropy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char mid[17];
    check(brmcp_wire_id_from_entropy(entropy, mid), "id");

    /* Sending: plan the parts (16 bytes each, to show several), encode each. */
    brmcp_wire_chunks plan;
    check(brmcp_wire_chunks_init(&plan, (const uint8_t *)"7f3a", 4, (const uint8_t *)mid,
                                 strlen(mid), 0, (const uint8_t *)msg, strlen(msg), 16),
          "plan");
    char pms[BRMCP_WIRE_MAX_PARTS][128];
    for (uint16_t seq = 1; seq <= plan.total; seq++) {
        brmcp_wire_header header;
        const uint8_t *chunk;
        size_t chunk_len, n;
        check(brmcp_wire_chunks_part(&plan, seq, &header, &chunk, &chunk_len), "part");
        check(brmcp_wire_encode_part(&header, chunk, chunk_len, (uint8_t *)pms[seq - 1],
                                     sizeof pms[0] - 1, &n),
              "encode");
        pms[seq - 1][n] = '\0';
        printf("PM %s\n", pms[seq - 1]);
    }

    /* Receiving: PMs arrive in any order, with ordinary chat among them. */
    brmcp_wire_limits limits = brmcp_wire_limits_default();
    brmcp_wire_assembler *a;
    check(brmcp_wire_assembler_new(&limits, 1 << 20, BRMCP_WIRE_MAX_PM_PAYLOAD_LEN, &a),
          "assembler");
    const uint8_t peer[BRMCP_WIRE_PEER_LEN] = {0}; /* the sender's user id */
    const char *chat = "hello, are you there?";
    const char *inbox[] = {pms[2], chat, pms[0], pms[1]};
    for (size_t i = 0; i < sizeof inbox / sizeof inbox[0]; i++) {
        brmcp_wire_accepted got;
        brmcp_wire_status st = brmcp_wire_assembler_add(
            a, peer, (const uint8_t *)inbox[i], strlen(inbox[i]), BRMCP_WIRE_MODE_COMPATIBLE,
            0, &got);
        if (brmcp_wire_is_foreign(st)) {
            printf("chat, not ours: %s\n", inbox[i]);
            continue;
        }
        check(st, "add");
        if (got.kind == BRMCP_WIRE_ACCEPTED_COMPLETE)
            printf("message: %.*s\n", (int)got.message_len, (const char *)got.message);
        else
            printf("part stored, message incomplete\n");
    }
    brmcp_wire_assembler_free(a);
    return 0;
}
