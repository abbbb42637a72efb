/*
 * The delta chunk encoding (docs/delta-reference.md): one chunk of a stream as the words whose
 * bits differ from the previous version, or dense. Pure functions on byte arrays.
 */
#ifndef RS_EXEC_DELTA_CODEC_H
#define RS_EXEC_DELTA_CODEC_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard.h"

/** Bytes of the header every encoded chunk starts with. */
#define RS_DELTA_HEADER_BYTES 16u

/** Chunk kinds (header byte 0). */
enum {
    RS_DELTA_DENSE = 0,
    RS_DELTA_BITMAP = 1,
    RS_DELTA_RUNS = 2,
    RS_DELTA_GAPS = 3,
    RS_DELTA_NKINDS = 4
};

/** The header of an encoded chunk, as read by rs_delta_header. */
typedef struct {
    uint32_t kind;  /**< RS_DELTA_* */
    uint32_t word;  /**< bytes per compared word: 1, 2, 4 or 8 */
    uint32_t nruns; /**< RS_DELTA_RUNS: number of runs; RS_DELTA_GAPS: of changed words */
    uint64_t body;  /**< bytes after the header */
} rs_delta_header_t;

/** The word size used for a chunk of @p len bytes whose elements are @p elem_size bytes:
 *  elem_size when it is 1, 2, 4 or 8 and divides len, else 1. */
uint32_t rs_delta_word(uint64_t len, uint32_t elem_size);

/**
 * Encode the @p len bytes at @p cur against @p prev (the same chunk of the previous
 * version) into @p out, which has room for RS_DELTA_HEADER_BYTES + len bytes; with
 * @p prev NULL the chunk is dense. The kind is the smallest of dense, bitmap+values,
 * runs+values and gaps+values (ties go to the earlier), so the result is never larger than
 * RS_DELTA_HEADER_BYTES + len. Values are the new bits of the changed words. Returns the
 * encoded size in bytes; the counts of changed words go to *@p changed (may be NULL).
 * Afterwards @p prev (when given) holds @p cur: the changed words are written into it (a
 * sender's snapshot is updated in the same pass).
 */
uint64_t rs_delta_encode(const uint8_t *cur, uint8_t *prev, uint64_t len, uint32_t word,
                         uint8_t *out, uint64_t *changed);

/**
 * rs_delta_encode, except that a dense result (@p prev given) is not copied: only its header
 * in @p out is the encoding's (the rest of @p out's room served as scratch), *@p body_in_prev
 * is set, and the body is the @p len bytes at @p prev after the call (which hold @p cur's). The
 * returned size and every other kind are as rs_delta_encode's; *@p body_in_prev is false for them.
 * A sender sends a dense chunk's body from its snapshot this way: the chunk is read twice and
 * written once, not twice.
 */
uint64_t rs_delta_encode_keep(const uint8_t *cur, uint8_t *prev, uint64_t len, uint32_t word,
                              uint8_t *out, uint64_t *changed, bool *body_in_prev);

/** The implementation of the codec's block passes in use (delta_blocks.h): "avx512" (x86-64
 *  with AVX-512 F/BW/VBMI/VBMI2), "avx2" (x86-64 with AVX2) or "portable". Chosen at first use:
 *  the fastest this CPU runs, or the one RESHARD_DELTA_CODEC in the environment names
 *  ("portable", "avx2", "avx512") when this build and CPU have it. Every implementation writes
 *  the same bytes. */
const char *rs_delta_codec_path(void);

/** Use the implementation called @p name ("portable", "avx2", "avx512") from now on, in every
 *  thread, or with @p name NULL the fastest this CPU runs. False (nothing changed) when this build
 *  or CPU has no @p name. For tests and benchmarks that compare implementations. */
bool rs_delta_codec_use(const char *name);

/** The 16-byte header of a dense encoded chunk of @p len bytes compared in @p word-byte
 *  words, to @p out (what rs_delta_encode writes with prev NULL). */
void rs_delta_dense_header(uint8_t *out, uint64_t len, uint32_t word);

/** Read and check the header at @p in for a chunk of @p len bytes: INVALID_ARG (with a
 *  message naming @p what) when it is not a header this code writes for that length. */
reshard_status_t rs_delta_header(const uint8_t *in, uint64_t len, rs_delta_header_t *h,
                                 const char *what);

/** Apply the encoded chunk @p in (header checked by rs_delta_header into @p h) onto the
 *  @p len bytes at @p chunk, which hold the previous version: afterwards they hold the
 *  new one. INVALID_ARG naming @p what when the body is inconsistent (a run out of
 *  range, a value count that does not match). */
reshard_status_t rs_delta_apply(const uint8_t *in, const rs_delta_header_t *h, uint8_t *chunk,
                                uint64_t len, const char *what);

/**
 * The size model of the encoding: the expected encoded bytes (header included) of a chunk
 * of @p len bytes of @p word-byte words when each word changed with probability @p p,
 * independently (scattered changes, as RL updates make them): 16 + the smallest of the
 * expected body of each kind (dense len; bitmap ceil(n/8) + c word; runs 8 E[runs] +
 * c word; gaps c (E[varint] + word), the gap before a changed word being geometric).
 * Since the encoder takes the smallest kind per chunk, its expected size is at most
 * this (E[min] <= min E): the encoding's own bound for a changed fraction.
 */
double rs_delta_expected_bytes(uint64_t len, uint32_t word, double p);

#endif
