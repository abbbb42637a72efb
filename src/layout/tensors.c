/* The catalogue of logical tensors. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

reshard_status_t reshard_tensors_create(reshard_tensors_t **out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_tensors_create: out of memory");
    return RESHARD_OK;
}

void reshard_tensors_destroy(reshard_tensors_t *tensors)
{
    if (!tensors)
        return;
    for (int32_t i = 0; i < tensors->n; i++)
        free(tensors->t[i].name);
    free(tensors->t);
    free(tensors);
}

/* numel of a shape with overflow check; -1 on overflow or bad extent. */
static int64_t shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || n > INT64_MAX / shape[d])
            return -1;
        n *= shape[d];
    }
    return n;
}

reshard_status_t reshard_tensors_add(reshard_tensors_t *tensors, const char *name,
                                     reshard_dtype_t dtype, int ndim, const int64_t *shape,
                                     int view_ndim, const int64_t *view_shape, int32_t *id_out)
{
    rs_error_clear();
    if (!tensors || !name || !shape || (view_ndim > 0 && !view_shape))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_add: NULL argument");
    if (!*name)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_add: empty tensor name");
    if (ndim < 1 || ndim > RESHARD_MAX_DIMS || view_ndim < 0 || view_ndim > RESHARD_MAX_DIMS)
        return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: ndim %d / view ndim %d out of range",
                        name, ndim, view_ndim);
    if (reshard_dtype_size(dtype) == 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: invalid dtype %d", name, (int)dtype);
    if (reshard_tensors_find(tensors, name) >= 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: duplicate name", name);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 1)
            return rs_error(RESHARD_ERR_SHAPE, "tensor %s: extent %lld of dim %d is < 1", name,
                            (long long)shape[d], d);
    int64_t numel = shape_numel(ndim, shape);
    if (numel < 0 || (uint64_t)numel > UINT64_MAX / 8)
        return rs_error(RESHARD_ERR_OVERFLOW, "tensor %s: element count overflows", name);
    if (view_ndim > 0 && shape_numel(view_ndim, view_shape) != numel)
        return rs_error(RESHARD_ERR_SHAPE, "tensor %s: view shape has a different element count",
                        name);
    if (tensors->n == tensors->cap) {
        int32_t cap = tensors->cap ? tensors->cap * 2 : 64;
        rs_tensor_t *t = realloc(tensors->t, (size_t)cap * sizeof *t);
        if (!t)
            return rs_error(RESHARD_ERR_NOMEM, "tensor %s: out of memory", name);
        tensors->t = t;
        tensors->cap = cap;
    }
    rs_tensor_t *t = &tensors->t[tensors->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return rs_error(RESHARD_ERR_NOMEM, "tensor %s: out of memory", name);
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->vndim = view_ndim > 0 ? view_ndim : ndim;
    memcpy(t->vshape, view_ndim > 0 ? view_shape : shape, (size_t)t->vndim * sizeof *shape);
    t->numel = numel;
    t->bytes = (uint64_t)numel * reshard_dtype_size(dtype);
    if (id_out)
        *id_out = tensors->n;
    tensors->n++;
    return RESHARD_OK;
}

int32_t reshard_tensors_count(const reshard_tensors_t *tensors)
{
    return tensors ? tensors->n : 0;
}

int32_t reshard_tensors_find(const reshard_tensors_t *tensors, const char *name)
{
    if (!tensors || !name)
        return -1;
    for (int32_t i = 0; i < tensors->n; i++)
        if (strcmp(tensors->t[i].name, name) == 0)
            return i;
    return -1;
}

reshard_status_t reshard_tensors_info(const reshard_tensors_t *tensors, int32_t id,
                                      reshard_tensor_info_t *info)
{
    rs_error_clear();
    if (!tensors || !info || id < 0 || id >= tensors->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_info: bad tensor id %d", id);
    const rs_tensor_t *t = &tensors->t[id];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    memcpy(info->shape, t->shape, sizeof t->shape);
    info->view_ndim = t->vndim;
    memcpy(info->view_shape, t->vshape, sizeof t->vshape);
    info->numel = t->numel;
    info->bytes = t->bytes;
    return RESHARD_OK;
}

uint64_t reshard_tensors_bytes(const reshard_tensors_t *tensors)
{
    uint64_t b = 0;
    for (int32_t i = 0; tensors && i < tensors->n; i++)
        b += tensors->t[i].bytes;
    return b;
}
