/* The co-occurrence pair kernels of ingest, in C.
 *
 * Σ_d w_d h_d h_dᵀ restricted to a rectangle [r0, r1) × [c0, c1) of Q costs one multiply-add
 * per pair of a document's (row word, column word) entries that fall in the rectangle. These
 * functions add it straight into a dense running sum, without an intermediate sparse matrix.
 *
 * The same kernels exist in numba (streamtopic/_kernels.py), which is the fallback when this
 * extension is not built. The C version exists because ingest is short-lived: loading numba and
 * its cached machine code costs about 0.3 s per process, as much as ingesting a million tokens.
 *
 * Arrays arrive through the buffer protocol (no numpy headers are needed to build):
 *   indptr  int64 (n_docs + 1,)     CSR row pointers
 *   indices int32 (nnz,)            column ids, sorted within each row
 *   data    float64 (nnz,)          counts
 *   w       float64 (n_docs,)       document weights 1 / (n_d (n_d - 1))
 *   acc     float64 (r1 - r0, c1 - c0), C-contiguous, writable
 * The loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Rows of the rectangle handled together: the accumulator's slice for one tile (TILE rows of
 * at most a few thousand doubles) stays in the core's cache while all documents stream by. */
#define TILE 256

typedef struct {
    Py_buffer buf;
    int held;
} view_t;

static void release(view_t *v) {
    if (v->held) {
        PyBuffer_Release(&v->buf);
        v->held = 0;
    }
}

/* Take a buffer of the given item size and kind ('i' integer, 'f' float). */
static int take(PyObject *obj, view_t *v, Py_ssize_t itemsize, char kind, int writable,
                const char *name) {
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &v->buf, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    v->held = 1;
    const char *f = v->buf.format ? v->buf.format : "B";
    while (*f == '<' || *f == '=' || *f == '@' || *f == '!' || *f == '>') {
        f++;
    }
    int ok = v->buf.itemsize == itemsize &&
             (kind == 'f' ? (*f == 'd') : (*f == 'q' || *f == 'l' || *f == 'i'));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected %s%d items, got format '%s'", name,
                     kind == 'f' ? "float" : "int", (int)(8 * itemsize), v->buf.format);
        release(v);
        return -1;
    }
    return 0;
}

/* First position p in [p0, p1) with indices[p] >= x (indices sorted). */
static inline int64_t lower(const int32_t *indices, int64_t p0, int64_t p1, int64_t x) {
    while (p0 < p1) {
        int64_t m = p0 + ((p1 - p0) >> 1);
        if (indices[m] < x) {
            p0 = m + 1;
        } else {
            p1 = m;
        }
    }
    return p0;
}

/* A document's entries p0:p1 with row id in [r0, r1) (a0:a1) and with column id in [c0, c1)
 * (b0:b1). Returns 0 when it has no entry in the row range (b0, b1 are then not set). */
static inline int spans(const int32_t *indices, int64_t p0, int64_t p1, int64_t r0, int64_t r1,
                        int64_t c0, int64_t c1, int64_t *a0, int64_t *a1, int64_t *b0,
                        int64_t *b1) {
    *a0 = lower(indices, p0, p1, r0);
    *a1 = lower(indices, *a0, p1, r1);
    if (*a1 == *a0) {
        return 0;
    }
    *b0 = lower(indices, p0, p1, c0);
    *b1 = lower(indices, *b0, p1, c1);
    return 1;
}

static int check_docs(const view_t *indptr, const view_t *indices, int64_t *n_docs) {
    Py_ssize_t n = indptr->buf.len / 8;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "indptr: must hold at least one entry");
        return -1;
    }
    const int64_t *ip = (const int64_t *)indptr->buf.buf;
    int64_t nnz = indices->buf.len / 4;
    if (ip[0] < 0 || ip[n - 1] > nnz) {
        PyErr_SetString(PyExc_ValueError, "indptr: entries out of range of indices");
        return -1;
    }
    const int32_t *ix = (const int32_t *)indices->buf.buf;
    for (Py_ssize_t d = 0; d + 1 < n; d++) {
        if (ip[d + 1] < ip[d]) {
            PyErr_SetString(PyExc_ValueError, "indptr: must not decrease");
            return -1;
        }
        /* the spans are found by bisection: out-of-order ids would write out of bounds */
        for (int64_t p = ip[d] + 1; p < ip[d + 1]; p++) {
            if (ix[p] <= ix[p - 1]) {
                PyErr_SetString(PyExc_ValueError,
                                "indices: must increase strictly within each document");
                return -1;
            }
        }
    }
    *n_docs = (int64_t)n - 1;
    return 0;
}

static PyObject *count_pairs(PyObject *self, PyObject *args) {
    PyObject *o_indptr, *o_indices;
    long long r0, r1, c0, c1;
    if (!PyArg_ParseTuple(args, "OOLLLL", &o_indptr, &o_indices, &r0, &r1, &c0, &c1)) {
        return NULL;
    }
    view_t indptr = {0}, indices = {0};
    if (take(o_indptr, &indptr, 8, 'i', 0, "indptr") < 0 ||
        take(o_indices, &indices, 4, 'i', 0, "indices") < 0) {
        release(&indptr);
        release(&indices);
        return NULL;
    }
    int64_t n_docs;
    if (check_docs(&indptr, &indices, &n_docs) < 0) {
        release(&indptr);
        release(&indices);
        return NULL;
    }
    const int64_t *ip = (const int64_t *)indptr.buf.buf;
    const int32_t *ix = (const int32_t *)indices.buf.buf;
    long long total = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t d = 0; d < n_docs; d++) {
        int64_t a0, a1, b0, b1;
        if (spans(ix, ip[d], ip[d + 1], r0, r1, c0, c1, &a0, &a1, &b0, &b1)) {
            total += (long long)(a1 - a0) * (long long)(b1 - b0);
        }
    }
    Py_END_ALLOW_THREADS
    release(&indptr);
    release(&indices);
    return PyLong_FromLongLong(total);
}

static PyObject *add_pairs_dense(PyObject *self, PyObject *args) {
    PyObject *o_acc, *o_indptr, *o_indices, *o_data, *o_w;
    long long r0, r1, c0, c1;
    if (!PyArg_ParseTuple(args, "OOOOOLLLL", &o_acc, &o_indptr, &o_indices, &o_data, &o_w, &r0,
                          &r1, &c0, &c1)) {
        return NULL;
    }
    view_t acc = {0}, indptr = {0}, indices = {0}, data = {0}, w = {0};
    PyObject *result = NULL;
    if (take(o_acc, &acc, 8, 'f', 1, "acc") < 0 || take(o_indptr, &indptr, 8, 'i', 0, "indptr") < 0 ||
        take(o_indices, &indices, 4, 'i', 0, "indices") < 0 ||
        take(o_data, &data, 8, 'f', 0, "data") < 0 || take(o_w, &w, 8, 'f', 0, "w") < 0) {
        goto done;
    }
    int64_t n_docs;
    if (check_docs(&indptr, &indices, &n_docs) < 0) {
        goto done;
    }
    if (r1 < r0 || c1 < c0 || acc.buf.ndim != 2 || acc.buf.shape[0] != r1 - r0 ||
        acc.buf.shape[1] != c1 - c0) {
        PyErr_SetString(PyExc_ValueError, "acc: shape must be (r1 - r0, c1 - c0)");
        goto done;
    }
    if (data.buf.len / 8 != indices.buf.len / 4 || w.buf.len / 8 != n_docs) {
        PyErr_SetString(PyExc_ValueError, "data must match indices, and w the documents");
        goto done;
    }
    {
        double *out = (double *)acc.buf.buf;
        const int64_t *ip = (const int64_t *)indptr.buf.buf;
        const int32_t *ix = (const int32_t *)indices.buf.buf;
        const double *x = (const double *)data.buf.buf;
        const double *wd = (const double *)w.buf.buf;
        const int64_t ncol = c1 - c0;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t t0 = r0; t0 < r1; t0 += TILE) {
            int64_t t1 = t0 + TILE < r1 ? t0 + TILE : r1;
            for (int64_t d = 0; d < n_docs; d++) {
                int64_t a0, a1, b0, b1;
                if (!spans(ix, ip[d], ip[d + 1], t0, t1, c0, c1, &a0, &a1, &b0, &b1)) {
                    continue;
                }
                double wt = wd[d];
                for (int64_t a = a0; a < a1; a++) {
                    double *row = out + (ix[a] - r0) * ncol - c0;
                    double va = wt * x[a];
                    for (int64_t b = b0; b < b1; b++) {
                        row[ix[b]] += va * x[b];
                    }
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&acc);
    release(&indptr);
    release(&indices);
    release(&data);
    release(&w);
    return result;
}

static PyMethodDef methods[] = {
    {"count_pairs", count_pairs, METH_VARARGS,
     "count_pairs(indptr, indices, r0, r1, c0, c1) -> int\n\n"
     "Number of (row entry, column entry) pairs of the documents in the rectangle "
     "[r0, r1) x [c0, c1): an upper bound on the non-zeros their sum adds there."},
    {"add_pairs_dense", add_pairs_dense, METH_VARARGS,
     "add_pairs_dense(acc, indptr, indices, data, w, r0, r1, c0, c1) -> None\n\n"
     "acc += (sum_d w_d h_d h_d^T)[r0:r1, c0:c1], in place, without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "streamtopic._pairs",
    "Compiled co-occurrence pair kernels of ingest (see streamtopic/_pairs.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__pairs(void) { return PyModule_Create(&module); }
