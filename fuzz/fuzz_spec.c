/*
 * Fuzz target: both parallel-spec parsers, with a format/parse round trip.
 * Input: the spec text. Whatever parses must format to text that parses
 * back to the same spec.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_spec: %s (input \"%s\"): %s\n", what, text, reshard_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char out[256];

    reshard_train_spec_t t, t2;
    if (reshard_train_spec_parse(text, &t) == RESHARD_OK) {
        if (reshard_train_world(&t) < 1)
            fail("train spec parses with a world that overflows", text);
        reshard_train_spec_str(&t, out, sizeof out);
        if (reshard_train_spec_parse(out, &t2) != RESHARD_OK)
            fail("formatted train spec does not parse", out);
        if (memcmp(&t, &t2, sizeof t))
            fail("train spec round trip differs", text);
    } else if (!*reshard_last_error()) {
        fail("train spec refused without a message", text);
    }

    reshard_infer_spec_t i, i2;
    if (reshard_infer_spec_parse(text, &i) == RESHARD_OK) {
        if (reshard_infer_world(&i) < 1 || (i.ep != 0 && i.ep != 1))
            fail("infer spec parses to an invalid spec", text);
        reshard_infer_spec_str(&i, out, sizeof out);
        if (reshard_infer_spec_parse(out, &i2) != RESHARD_OK)
            fail("formatted infer spec does not parse", out);
        if (memcmp(&i, &i2, sizeof i))
            fail("infer spec round trip differs", text);
    } else if (!*reshard_last_error()) {
        fail("infer spec refused without a message", text);
    }
    free(text);
    return 0;
}
