/* The co-occurrence pair kernels of ingest, in C.
 *
 * Σ_d w_d h_d h_dᵀ restricted to a rectangle [r0, r1) × [c0, c1) of Q costs one multiply-add
 * per pair of a document's (row word, column word) entries that fall in the rectangle. These
 * functions add it straight into a dense running sum, without an intermediate sparse matrix.
 *
 * add_pairs_dense and count_pairs exist in numba too (streamtopic/_kernels.py), the fallback
 * when this extension is not built; add_pairs_tiled (below: dense documents of each tile
 * through BLAS) is C only, and sums in another order (equal to rounding, ~1e-15 relative). The C version exists because ingest is short-lived: loading numba and
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
#include <stdlib.h>
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

/* A writable float64 matrix whose rows may be padded (row stride a multiple of 8 bytes, at
 * least its width; columns contiguous); *ld: its row stride in items. */
static int take_rows(PyObject *obj, view_t *v, int64_t *ld, const char *name, int writable) {
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &v->buf, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    v->held = 1;
    const char *f = v->buf.format ? v->buf.format : "B";
    while (*f == '<' || *f == '=' || *f == '@' || *f == '!' || *f == '>') {
        f++;
    }
    if (v->buf.itemsize != 8 || *f != 'd' || v->buf.ndim != 2 || v->buf.strides[1] != 8 ||
        v->buf.strides[0] % 8 != 0 || v->buf.strides[0] < 8 * v->buf.shape[1]) {
        PyErr_Format(PyExc_TypeError, "%s: expected a float64 matrix with contiguous rows, "
                     "rows in increasing order", name);
        release(v);
        return -1;
    }
    *ld = v->buf.strides[0] / 8;
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

/* ---------------------------------------------------------------------------------------------
 * The tiled kernel: dense documents through BLAS, the rest pair by pair.
 *
 * The rectangle is cut into tiles of BT x BT entries (512 KiB: a tile stays in the core's L2
 * cache while the partition's documents stream by). Per tile, a document with na entries in
 * the tile's rows and nb in its columns costs na * nb scattered multiply-adds in the scalar
 * loop, or one more rank of a matrix product over the whole tile (BT * BT multiply-adds at
 * the rate of a GEMM). Rows of tiles where no document can be dense in a tile (short
 * documents) skip the tiles, pair by pair as add_pairs_dense. Otherwise, documents with
 * na * nb >= kappa * (tile area) are written densely into
 * two small buffers (X: weighted rows, Y: columns; up to DB documents) and added to the tile
 * in place by BLAS dgemm (beta = 1, the tile addressed through its leading dimension: no copy
 * of the accumulator); the others go through the scalar loop, as add_pairs_dense does.
 *
 * Determinism: which documents take BLAS, how they are batched and the order of the batches
 * depend only on the arguments, and BLAS runs on one thread (pinned by the caller), so the
 * same inputs give the same bits.
 */
#define BT 256
#define DB 64

typedef void (*dgemm_t)(char *transa, char *transb, int *m, int *n, int *k, double *alpha,
                        double *a, int *lda, double *b, int *ldb, double *beta, double *c,
                        int *ldc);

typedef struct {
    const int64_t *ip;
    const int32_t *ix;
    const double *x;
    const double *wd;
    double *out;     /* acc's entry (r0, c0) */
    int64_t r0, c0, c1, ld;  /* ld: acc's row stride (items) */
    dgemm_t gemm;    /* NULL: every pair through the scalar loop */
    double kappa;
    /* per row tile: its documents (those with an entry in its rows), their row spans, and
     * a cursor into their entries from the first column of the rectangle on */
    int64_t n_act, *doc, *a0, *a1, *cur;
    /* the dense batch of the current tile */
    int n_dense;
    double *X, *Y;   /* DB x BT each, row-major */
    /* the documents by word (CSC; NULL: not given): for word i, the documents cd[q] and
     * counts cx[q], q in cp[i]:cp[i+1], documents in increasing order; with, per document,
     * its entries in the rectangle's columns (col0[d]:col1[d]) and a count buffer */
    const int64_t *cp;
    const int32_t *cd;
    const double *cx;
    int64_t *col0, *col1;
    int32_t *na;
} tiler_t;

/* Add the dense batch to the tile [t0, t1) x [u0, u1): tile^T += Y X^T (column-major terms),
 * then clear the rows of the buffers it used. */
static void flush_dense(tiler_t *T, int64_t t0, int64_t t1, int64_t u0, int64_t u1) {
    if (T->n_dense == 0) {
        return;
    }
    char nt = 'N', tt = 'T';
    int m = (int)(u1 - u0), n = (int)(t1 - t0), k = T->n_dense, ld = BT, ldc = (int)T->ld;
    double one = 1.0;
    double *c = T->out + (t0 - T->r0) * T->ld + (u0 - T->c0);
    T->gemm(&nt, &tt, &m, &n, &k, &one, T->Y, &ld, T->X, &ld, &one, c, &ldc);
    memset(T->X, 0, sizeof(double) * (size_t)k * BT);
    memset(T->Y, 0, sizeof(double) * (size_t)k * BT);
    T->n_dense = 0;
}

/* Entries a0:a1 (rows) by b0:b1 (columns) of a document of weight wt, pair by pair. */
static void scalar_pairs(tiler_t *T, double wt, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    const int32_t *ix = T->ix;
    const double *x = T->x;
    for (int64_t a = a0; a < a1; a++) {
        double *row = T->out + (ix[a] - T->r0) * T->ld - T->c0;
        double va = wt * x[a];
        for (int64_t b = b0; b < b1; b++) {
            row[ix[b]] += va * x[b];
        }
    }
}

/* One document's pairs in the tile: entries a0:a1 (rows) by b0:b1 (columns). */
static void tile_document(tiler_t *T, int64_t d, int64_t a0, int64_t a1, int64_t b0, int64_t b1,
                          int64_t t0, int64_t t1, int64_t u0, int64_t u1) {
    const int32_t *ix = T->ix;
    const double *x = T->x;
    double wt = T->wd[d];
    if (T->gemm != NULL &&
        (double)(a1 - a0) * (double)(b1 - b0) >= T->kappa * (double)(t1 - t0) * (double)(u1 - u0)) {
        double *xr = T->X + (size_t)T->n_dense * BT, *yr = T->Y + (size_t)T->n_dense * BT;
        for (int64_t a = a0; a < a1; a++) {
            xr[ix[a] - t0] = wt * x[a];
        }
        for (int64_t b = b0; b < b1; b++) {
            yr[ix[b] - u0] = x[b];
        }
        if (++T->n_dense == DB) {
            flush_dense(T, t0, t1, u0, u1);
        }
        return;
    }
    scalar_pairs(T, wt, a0, a1, b0, b1);
}

/* The documents with entries in rows [t0, t1), their spans, cursors at column c0. Returns
 * whether one of them may be dense in one of the row's tiles (its entries in the rows times
 * those in the columns, at most BT, reach kappa * BT * BT) and BLAS is at hand. */
static int row_tile(tiler_t *T, int64_t n_docs, int64_t t0, int64_t t1) {
    int any_dense = 0;
    T->n_act = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        int64_t p0 = T->ip[d], p1 = T->ip[d + 1];
        int64_t a0 = lower(T->ix, p0, p1, t0);
        int64_t a1 = lower(T->ix, a0, p1, t1);
        if (a1 == a0) {
            continue;
        }
        T->doc[T->n_act] = d;
        T->a0[T->n_act] = a0;
        T->a1[T->n_act] = a1;
        T->cur[T->n_act] = lower(T->ix, p0, p1, T->c0);
        T->n_act++;
        int64_t nb = lower(T->ix, T->cur[T->n_act - 1], p1, T->c1) - T->cur[T->n_act - 1];
        any_dense |= (double)(a1 - a0) * (double)(nb < BT ? nb : BT) >= T->kappa * BT * BT;
    }
    return any_dense && T->gemm != NULL;
}

/* Rows [t0, t1) without BLAS: each document's pairs over all the columns at once (the order
 * of add_pairs_dense, without the tiles' bookkeeping, which short documents would feel). */
static void scalar_row_tile(tiler_t *T, int64_t c1) {
    for (int64_t k = 0; k < T->n_act; k++) {
        int64_t d = T->doc[k];
        int64_t b1 = lower(T->ix, T->cur[k], T->ip[d + 1], c1);
        scalar_pairs(T, T->wd[d], T->a0[k], T->a1[k], T->cur[k], b1);
    }
}

/* Whether no document can be dense in a tile of rows [t0, t1) (the test of row_tile: its
 * entries in the rows times at most BT in the columns below kappa * BT * BT), from the
 * documents by word: the largest count of a document's entries in the rows. */
static int no_dense_rows(tiler_t *T, int64_t t0, int64_t t1) {
    if (T->gemm == NULL) {
        return 1;
    }
    int32_t most = 0;
    for (int64_t q = T->cp[t0]; q < T->cp[t1]; q++) {
        int32_t k = ++T->na[T->cd[q]];
        most = k > most ? k : most;
    }
    for (int64_t q = T->cp[t0]; q < T->cp[t1]; q++) {
        T->na[T->cd[q]] = 0;
    }
    return (double)most * BT < T->kappa * BT * BT;
}

/* Rows [t0, t1) pair by pair, row after row: for each word of the rows, each document that
 * holds it adds its entries in the columns to the word's row of the sum. Each entry of the
 * sum takes its documents in increasing order, as in scalar_row_tile (the same bits); the
 * writes stay within one row of the sum (a few KiB, in the core's cache) where the
 * document-major order scatters them over the rows' whole slab. */
static void scalar_rows_by_word(tiler_t *T, int64_t t0, int64_t t1) {
    const int32_t *ix = T->ix;
    const double *x = T->x;
    for (int64_t i = t0; i < t1; i++) {
        double *row = T->out + (i - T->r0) * T->ld - T->c0;
        for (int64_t q = T->cp[i]; q < T->cp[i + 1]; q++) {
            int64_t d = T->cd[q], b1 = T->col1[d];
            double va = T->wd[d] * T->cx[q];
            for (int64_t b = T->col0[d]; b < b1; b++) {
                row[ix[b]] += va * x[b];
            }
        }
    }
}

static void run_tiles(tiler_t *T, int64_t n_docs, int64_t r1, int64_t c1) {
    for (int64_t t0 = T->r0; t0 < r1; t0 += BT) {
        int64_t t1 = t0 + BT < r1 ? t0 + BT : r1;
        if (T->cp != NULL && no_dense_rows(T, t0, t1)) {
            scalar_rows_by_word(T, t0, t1);
            continue;
        }
        if (!row_tile(T, n_docs, t0, t1)) {
            scalar_row_tile(T, c1);
            continue;
        }
        for (int64_t u0 = T->c0; u0 < c1 && T->n_act > 0; u0 += BT) {
            int64_t u1 = u0 + BT < c1 ? u0 + BT : c1;
            for (int64_t k = 0; k < T->n_act; k++) {
                int64_t d = T->doc[k], end = T->ip[d + 1], b0 = T->cur[k], b1 = b0;
                while (b1 < end && T->ix[b1] < u1) {
                    b1++;
                }
                T->cur[k] = b1;
                if (b1 > b0) {
                    tile_document(T, d, T->a0[k], T->a1[k], b0, b1, t0, t1, u0, u1);
                }
            }
            flush_dense(T, t0, t1, u0, u1);
        }
    }
}

/* dgemm from a capsule of scipy.linalg.cython_blas (None: no BLAS). */
static int gemm_from(PyObject *o, dgemm_t *gemm) {
    *gemm = NULL;
    if (o == Py_None) {
        return 0;
    }
    if (!PyCapsule_CheckExact(o)) {
        PyErr_SetString(PyExc_TypeError, "gemm: expected None or scipy.linalg.cython_blas's "
                                         "dgemm capsule");
        return -1;
    }
    *gemm = (dgemm_t)PyCapsule_GetPointer(o, PyCapsule_GetName(o));
    return *gemm == NULL ? -1 : 0;
}

static int check_rectangle(const view_t *acc, const view_t *indices, const view_t *data,
                           const view_t *w, int64_t n_docs, long long r0, long long r1,
                           long long c0, long long c1) {
    if (r1 < r0 || c1 < c0 || acc->buf.ndim != 2 || acc->buf.shape[0] != r1 - r0 ||
        acc->buf.shape[1] != c1 - c0) {
        PyErr_SetString(PyExc_ValueError, "acc: shape must be (r1 - r0, c1 - c0)");
        return -1;
    }
    if (data->buf.len / 8 != indices->buf.len / 4 || w->buf.len / 8 != n_docs) {
        PyErr_SetString(PyExc_ValueError, "data must match indices, and w the documents");
        return -1;
    }
    if (acc->buf.strides[0] / 8 > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "acc: too many columns for BLAS");
        return -1;
    }
    return 0;
}

static int tiler_alloc(tiler_t *T, int64_t n_docs) {
    size_t n = (size_t)(n_docs > 0 ? n_docs : 1);
    T->doc = malloc(4 * n * sizeof(int64_t));
    T->X = T->gemm ? calloc(2 * (size_t)DB * BT, sizeof(double)) : NULL;
    if (T->doc == NULL || (T->gemm && T->X == NULL)) {
        free(T->doc);
        free(T->X);
        T->doc = NULL;
        T->X = NULL;
        PyErr_NoMemory();
        return -1;
    }
    T->a0 = T->doc + n;
    T->a1 = T->doc + 2 * n;
    T->cur = T->doc + 3 * n;
    T->Y = T->X ? T->X + (size_t)DB * BT : NULL;
    T->n_dense = 0;
    return 0;
}

/* The documents by word (CSC) for rows [r0, r1): cp int64 (at least r1 + 1 entries), cd
 * int32 and cx float64 of one length, cp non-decreasing over [r0, r1] and within cd, every
 * document id of those rows below n_docs. Sets T's CSC fields and each document's column
 * span [c0, c1). */
static int take_csc(tiler_t *T, view_t *cp, view_t *cd, view_t *cx, int64_t n_docs,
                    int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    int64_t n_words = cp->buf.len / 8 - 1, n = cd->buf.len / 4;
    const int64_t *p = (const int64_t *)cp->buf.buf;
    const int32_t *docs = (const int32_t *)cd->buf.buf;
    if (r0 < 0 || n_words < r1 || cx->buf.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "csc: indptr must cover the rows, and data match "
                                          "the documents");
        return -1;
    }
    for (int64_t i = r0; i < r1; i++) {
        if (p[i] < 0 || p[i + 1] < p[i] || p[i + 1] > n) {
            PyErr_SetString(PyExc_ValueError, "csc: indptr out of order or out of range");
            return -1;
        }
    }
    for (int64_t q = r0 < r1 ? p[r0] : 0; q < (r0 < r1 ? p[r1] : 0); q++) {
        if (docs[q] < 0 || docs[q] >= n_docs) {
            PyErr_SetString(PyExc_ValueError, "csc: document id out of range");
            return -1;
        }
    }
    size_t m = (size_t)(n_docs > 0 ? n_docs : 1);
    T->col0 = malloc(2 * m * sizeof(int64_t));
    T->na = calloc(m, sizeof(int32_t));
    if (T->col0 == NULL || T->na == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    T->col1 = T->col0 + m;
    for (int64_t d = 0; d < n_docs; d++) {
        T->col0[d] = lower(T->ix, T->ip[d], T->ip[d + 1], c0);
        T->col1[d] = lower(T->ix, T->col0[d], T->ip[d + 1], c1);
    }
    T->cp = p;
    T->cd = docs;
    T->cx = (const double *)cx->buf.buf;
    return 0;
}

/* The optional documents by word of add_pairs_tiled (all three None: not given). */
static int take_by_word(tiler_t *T, PyObject *o_cp, PyObject *o_cd, PyObject *o_cx, view_t *cp,
                        view_t *cd, view_t *cx, int64_t n_docs, int64_t r0, int64_t r1,
                        int64_t c0, int64_t c1) {
    int given = o_cp != Py_None;
    if (given != (o_cd != Py_None) || given != (o_cx != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "csc: give all three of indptr, documents, data");
        return -1;
    }
    if (!given) {
        return 0;
    }
    if (take(o_cp, cp, 8, 'i', 0, "csc indptr") < 0 ||
        take(o_cd, cd, 4, 'i', 0, "csc documents") < 0 ||
        take(o_cx, cx, 8, 'f', 0, "csc data") < 0) {
        return -1;
    }
    return take_csc(T, cp, cd, cx, n_docs, r0, r1, c0, c1);
}

static PyObject *add_pairs_tiled(PyObject *self, PyObject *args) {
    PyObject *o_acc, *o_indptr, *o_indices, *o_data, *o_w, *o_gemm;
    PyObject *o_cp = Py_None, *o_cd = Py_None, *o_cx = Py_None;
    long long r0, r1, c0, c1;
    double kappa;
    if (!PyArg_ParseTuple(args, "OOOOOLLLLOd|OOO", &o_acc, &o_indptr, &o_indices, &o_data,
                          &o_w, &r0, &r1, &c0, &c1, &o_gemm, &kappa, &o_cp, &o_cd, &o_cx)) {
        return NULL;
    }
    view_t acc = {0}, indptr = {0}, indices = {0}, data = {0}, w = {0};
    view_t cp = {0}, cd = {0}, cx = {0};
    PyObject *result = NULL;
    tiler_t T = {0};
    int64_t n_docs;
    if (gemm_from(o_gemm, &T.gemm) < 0 || take_rows(o_acc, &acc, &T.ld, "acc", 1) < 0 ||
        take(o_indptr, &indptr, 8, 'i', 0, "indptr") < 0 ||
        take(o_indices, &indices, 4, 'i', 0, "indices") < 0 ||
        take(o_data, &data, 8, 'f', 0, "data") < 0 || take(o_w, &w, 8, 'f', 0, "w") < 0 ||
        check_docs(&indptr, &indices, &n_docs) < 0 ||
        check_rectangle(&acc, &indices, &data, &w, n_docs, r0, r1, c0, c1) < 0 ||
        tiler_alloc(&T, n_docs) < 0) {
        goto done;
    }
    T.ip = (const int64_t *)indptr.buf.buf;
    T.ix = (const int32_t *)indices.buf.buf;
    T.x = (const double *)data.buf.buf;
    T.wd = (const double *)w.buf.buf;
    T.out = (double *)acc.buf.buf;
    T.r0 = r0;
    T.c0 = c0;
    T.c1 = c1;
    T.kappa = kappa;
    if (take_by_word(&T, o_cp, o_cd, o_cx, &cp, &cd, &cx, n_docs, r0, r1, c0, c1) < 0) {
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    run_tiles(&T, n_docs, r1, c1);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(T.doc);
    free(T.X);
    free(T.col0);
    free(T.na);
    release(&acc);
    release(&indptr);
    release(&indices);
    release(&data);
    release(&w);
    release(&cp);
    release(&cd);
    release(&cx);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * A dense block of Q as the bytes of a sparse block (streamtopic.store's layout): a header
 * of three int64 (nnz, rows, wide), the non-zero values (float64, row by row, columns
 * increasing), the row pointers (int32, rows + 1) and the column indices (uint16, or int32
 * when wide). One pass over the block, which scipy's conversion (through COO) makes about
 * ten times slower.
 */
/* The body of sparse_bytes: returns the non-zeros written, or -1 when the block holds more
 * than nnz (nothing is written past the buffer). rv: room for one row (cols doubles, then
 * cols int32), where each row's non-zeros are gathered without branches (every entry
 * written, the count advanced by non-zeros only) before they are copied out. */
static int64_t encode_rows(const double *src, int64_t ld, int64_t rows, int64_t cols,
                           int64_t nnz, int wide, char *base, double *rv) {
    char *vals = base + 24, *ptrs = vals + 8 * nnz, *cols_at = ptrs + 4 * (rows + 1);
    int32_t *rc = (int32_t *)(rv + (cols > 0 ? cols : 1));
    int64_t head[3] = {nnz, rows, wide ? 1 : 0}, k = 0;
    int32_t at = 0;
    memcpy(base, head, sizeof head);
    memcpy(ptrs, &at, 4);
    for (int64_t i = 0; i < rows; i++) {
        const double *row = src + i * ld;
        int64_t m = 0;
        for (int64_t j = 0; j < cols; j++) {
            double v = row[j];
            rv[m] = v;
            rc[m] = (int32_t)j;
            m += v != 0.0;
        }
        if (m > nnz - k) {
            return -1;
        }
        memcpy(vals + 8 * k, rv, 8 * (size_t)m);
        if (wide) {
            memcpy(cols_at + 4 * k, rc, 4 * (size_t)m);
        } else {
            for (int64_t q = 0; q < m; q++) {
                uint16_t c = (uint16_t)rc[q];
                memcpy(cols_at + 2 * (k + q), &c, 2);
            }
        }
        k += m;
        at = (int32_t)k;
        memcpy(ptrs + 4 * (i + 1), &at, 4);
    }
    return k;
}

static PyObject *sparse_bytes(PyObject *self, PyObject *args) {
    PyObject *o_block, *o_out;
    long long nnz;
    int wide;
    if (!PyArg_ParseTuple(args, "OOLp", &o_block, &o_out, &nnz, &wide)) {
        return NULL;
    }
    view_t block = {0}, out = {0};
    PyObject *result = NULL;
    int64_t ld;
    if (take_rows(o_block, &block, &ld, "block", 0) < 0 ||
        PyObject_GetBuffer(o_out, &out.buf, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        goto done;
    }
    out.held = 1;
    int64_t rows = block.buf.shape[0], cols = block.buf.shape[1], width = wide ? 4 : 2;
    if (nnz < 0 || out.buf.len != 24 + 8 * nnz + 4 * (rows + 1) + width * nnz ||
        (!wide && cols > 65536) || rows >= INT32_MAX || nnz >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "out: must hold exactly the block's bytes");
        goto done;
    }
    {
        /* one row's non-zeros gathered at a time (cols values and column ids) */
        double *rv = malloc((size_t)(cols > 0 ? cols : 1) * (sizeof(double) + sizeof(int32_t)));
        if (rv == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        int64_t k;
        Py_BEGIN_ALLOW_THREADS
        k = encode_rows((const double *)block.buf.buf, ld, rows, cols, nnz, wide,
                        (char *)out.buf.buf, rv);
        Py_END_ALLOW_THREADS
        free(rv);
        if (k != nnz) {
            PyErr_SetString(PyExc_ValueError, "block: its non-zeros are not nnz");
            goto done;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&block);
    release(&out);
    return result;
}

/* The non-zeros of a float64 matrix whose rows are contiguous (a view of some columns of a
 * wider sum too: numpy counts those element by element, four times slower). */
static PyObject *count_nonzero_rows(PyObject *self, PyObject *args) {
    PyObject *o_block;
    if (!PyArg_ParseTuple(args, "O", &o_block)) {
        return NULL;
    }
    view_t block = {0};
    int64_t ld;
    if (take_rows(o_block, &block, &ld, "block", 0) < 0) {
        return NULL;
    }
    const double *src = (const double *)block.buf.buf;
    int64_t rows = block.buf.shape[0], cols = block.buf.shape[1];
    long long total = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < rows; i++) {
        const double *row = src + i * ld;
        int64_t k = 0;
        for (int64_t j = 0; j < cols; j++) {
            k += row[j] != 0.0;
        }
        total += k;
    }
    Py_END_ALLOW_THREADS
    release(&block);
    return PyLong_FromLongLong(total);
}

static PyMethodDef methods[] = {
    {"count_nonzero_rows", count_nonzero_rows, METH_VARARGS,
     "count_nonzero_rows(block) -> int\n\n"
     "The non-zeros of a float64 matrix with contiguous rows (any row stride)."},
    {"sparse_bytes", sparse_bytes, METH_VARARGS,
     "sparse_bytes(block, out, nnz, wide) -> None\n\n"
     "Write the float64 matrix block (rows contiguous), which holds nnz non-zeros, into out "
     "(uint8, exactly 24 + 8 nnz + 4 (rows + 1) + (4 if wide else 2) nnz bytes) as a sparse "
     "block: header (nnz, rows, wide: int64), values, row pointers (int32), column indices "
     "(uint16, int32 when wide)."},
    {"add_pairs_tiled", add_pairs_tiled, METH_VARARGS,
     "add_pairs_tiled(acc, indptr, indices, data, w, r0, r1, c0, c1, gemm, kappa[, csc_indptr, "
     "csc_docs, csc_data]) -> None\n\n"
     "acc += (sum_d w_d h_d h_d^T)[r0:r1, c0:c1], in place, without the GIL, tile by tile "
     "(256 x 256): in each tile, documents with na * nb >= kappa * area through BLAS dgemm "
     "(gemm: scipy.linalg.cython_blas's dgemm capsule; None: none), the others pair by pair. "
     "With the documents by word (CSC: int64 indptr over the words, int32 document ids in "
     "increasing order, float64 counts), rows of tiles where no document can be dense are "
     "summed row by row (the same bits, the writes within one row of acc)."},

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
