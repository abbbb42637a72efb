/* Element types: sizes and names. */
#include "reshard/reshard.h"

size_t reshard_dtype_size(reshard_dtype_t dtype)
{
    switch (dtype) {
    case RESHARD_BF16:
    case RESHARD_FP16:
        return 2;
    case RESHARD_FP32:
    case RESHARD_INT32:
        return 4;
    case RESHARD_FP64:
    case RESHARD_INT64:
        return 8;
    case RESHARD_FP8_E4M3:
    case RESHARD_FP8_E5M2:
    case RESHARD_INT8:
    case RESHARD_UINT8:
        return 1;
    case RESHARD_DTYPE_COUNT:
        break;
    }
    return 0;
}

const char *reshard_dtype_name(reshard_dtype_t dtype)
{
    static const char *const names[RESHARD_DTYPE_COUNT] = {
        "bf16", "fp16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2", "int8", "uint8", "int32", "int64"};
    if ((int)dtype < 0 || dtype >= RESHARD_DTYPE_COUNT)
        return "?";
    return names[dtype];
}
