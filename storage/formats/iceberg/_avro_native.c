/* Compiled decoder for Iceberg manifest records (Avro binary encoding).
 *
 * storage/formats/iceberg/_avro_program.py compiles a writer schema and a "keep" spec into a
 * program: a list of nodes, each (op, keep, size, children, keys), children after their parent.
 * Program() checks and copies that list into C arrays once; decode() runs it over records.
 * The Python decoder in _avro.py is the reference: the same schema and keep spec
 * give the same dicts, lists and values. Every read is bounds-checked: bad data raises ValueError
 * (UnicodeDecodeError, a ValueError, for strings that are not UTF-8), never reads past the buffer.
 *
 * Built by scripts/build_native.py; with -DLW_ZLIB it also frames and inflates deflate containers
 * itself, without the GIL (join_container: one z_stream reset per block instead of a
 * zlib.decompress call per block), so a read-ahead thread joins one manifest while the listing
 * decodes another.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#ifdef LW_ZLIB
#include <zlib.h>
#endif
#ifdef LW_LIBDEFLATE
#include <libdeflate.h>
#endif

/* The order is the contract with _avro_program.OPS (checked at import there). */
enum {
    OP_NULL, OP_BOOLEAN, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_STRING, OP_FIXED,
    OP_RECORD, OP_NULL_FIRST, OP_NULL_SECOND, OP_UNION, OP_ARRAY, OP_MAP,
    OP_INT_BYTES_MAP, OP_INT_LONG_MAP, OP_INT_ARRAY, OP_RAW_INT_BYTES_MAP, OP_RAW_INT_LONG_MAP, OP_COUNT
};
static const char *const OP_NAMES[OP_COUNT] = {
    "null", "boolean", "long", "float", "double", "bytes", "string", "fixed",
    "record", "null_first", "null_second", "union", "array", "map",
    "int_bytes_map", "int_long_map", "int_array", "raw_int_bytes_map", "raw_int_long_map",
};

/* Items of zero encoded bytes (nulls, empty records) give no bound on a block's count. */
#define MAX_ZERO_SIZE_ITEMS (1 << 20)

typedef struct {
    int op;
    int keep;
    Py_ssize_t size;    /* fixed: byte size */
    Py_ssize_t nkids;
    Py_ssize_t first;   /* index of the first child in Program.kids/keys */
    Py_ssize_t minsize; /* fewest bytes one value can take */
    Py_ssize_t nkeys;   /* record: fields returned */
} Node;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nnodes;
    Node *nodes;
    Py_ssize_t nkids;
    Py_ssize_t *kids;
    PyObject **keys; /* record field keys (interned str), NULL when the field is not returned */
} Program;

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cursor;

/* A dict sized for n keys: a data_file record has ~15, and growing a dict key by key (two
 * resizes) was a tenth of decoding. _PyDict_NewPresized is CPython's own, exported since 3.x. */
static PyObject *new_dict(Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030E0000
    if (n > 5)
        return _PyDict_NewPresized(n);
#endif
    return PyDict_New();
}

static PyObject *fail(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

/* Set while a thread reads without the GIL (skim_entries): failures then set no Python error;
 * the caller falls back to reading with the GIL, which raises them. */
static _Thread_local int quiet_failures;

static int failed(const char *message)
{
    if (!quiet_failures)
        PyErr_SetString(PyExc_ValueError, message);
    return -1;
}

/* ---- primitives --------------------------------------------------------------------------- */

/* The zigzag long at c->p (the cursor moved past it): NULL, or what is wrong. Touches no
 * Python object, so the container framing can run it without the GIL. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

HOT int64_t unzigzag(uint64_t v)
{
    return (int64_t)((v >> 1) ^ (~(v & 1) + 1));
}

/* varint's careful loop, for the last bytes of the data (each byte checked against the end). */
static const char *varint_near_end(Cursor *c, int64_t *out)
{
    const unsigned char *p = c->p;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= c->end)
            return "truncated Avro data: a number runs past the end";
        unsigned char b = *p++;
        if (i == 9 && b > 1)
            return "malformed Avro data: a number longer than 64 bits";
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            c->p = p;
            *out = unzigzag(v);
            return NULL;
        }
    }
    return "malformed Avro data: a number longer than 10 bytes";
}

HOT const char *varint(Cursor *c, int64_t *out)
{
    const unsigned char *p = c->p;
    if (c->end - p < 10)
        return varint_near_end(c, out);
    uint64_t v = 0; /* ten bytes are there: no end check per byte */
    for (int i = 0; i < 10; i++) {
        unsigned char b = p[i];
        if (i == 9 && b > 1)
            return "malformed Avro data: a number longer than 64 bits";
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            c->p = p + i + 1;
            *out = unzigzag(v);
            return NULL;
        }
    }
    return "malformed Avro data: a number longer than 10 bytes";
}

HOT int read_long(Cursor *c, int64_t *out)
{
    const unsigned char *p = c->p;
    if (p < c->end && *p < 0x80) { /* one-byte numbers: most of a manifest */
        c->p = p + 1;
        *out = unzigzag(*p);
        return 0;
    }
    const char *error = varint(c, out);
    return error ? failed(error) : 0;
}

/* Reads through the zigzag long at c->p without computing it: read_long's checks, less work. */
HOT int skip_long(Cursor *c)
{
    const unsigned char *p = c->p;
    if (c->end - p < 10) {
        int64_t ignored;
        return read_long(c, &ignored);
    }
    for (int i = 0; i < 9; i++) {
        if (!(p[i] & 0x80)) {
            c->p = p + i + 1;
            return 0;
        }
    }
    if (p[9] > 1)
        return failed("malformed Avro data: a number longer than 64 bits");
    c->p = p + 10;
    return 0;
}

/* Reads through n zigzag longs at c->p as n skip_long()s would (the same checks, the same
 * errors), eight bytes at a time where eight are there: a word's bytes without the top bit are
 * the ends of numbers, so the numbers ending in it are counted at once. A number of ten bytes or
 * more, or a word with no end, is left to skip_long() from that number's start, as are the last
 * bytes of the data. The maps of per-column counts in every manifest entry are such numbers. */
static int skip_longs(Cursor *c, int64_t n)
{
    const unsigned char *p = c->p;
    int carry = 0; /* bytes of the number under way when the word starts */
    while (n > 0 && c->end - p >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        uint64_t ends = ~word & 0x8080808080808080ULL; /* little-endian: byte i's top bit is bit 8i+7 */
        if (!ends || carry + (__builtin_ctzll(ends) >> 3) + 1 >= 10)
            break; /* a long number: skip_long() checks it */
        int k = __builtin_popcountll(ends);
        if (k >= n) {
            for (int64_t i = 1; i < n; i++)
                ends &= ends - 1;
            c->p = p + (__builtin_ctzll(ends) >> 3) + 1;
            return 0;
        }
        n -= k;
        carry = __builtin_clzll(ends) >> 3; /* the bytes after the word's last end */
        p += 8;
    }
    c->p = p - carry;
    for (; n > 0; n--)
        if (skip_long(c) < 0)
            return -1;
    return 0;
}

/* Length-prefixed bytes: *start and *length of the content, the cursor moved past it. */
HOT int read_span(Cursor *c, const unsigned char **start, Py_ssize_t *length)
{
    int64_t n;
    if (read_long(c, &n) < 0)
        return -1;
    if (n < 0)
        return failed("malformed Avro data: a negative length");
    if (n > c->end - c->p)
        return failed("truncated Avro data: bytes or a string run past the end");
    *start = c->p;
    *length = (Py_ssize_t)n;
    c->p += n;
    return 0;
}

HOT int take(Cursor *c, Py_ssize_t n, const unsigned char **start)
{
    if (n > c->end - c->p)
        return failed("truncated Avro data: a fixed-size value runs past the end");
    *start = c->p;
    c->p += n;
    return 0;
}

/* Item count of the next array/map block (negative: followed by the block's byte size), bounded
 * by what the remaining bytes can hold so that a corrupt count cannot allocate or loop forever. */
HOT int read_count(Cursor *c, Py_ssize_t item_size, int64_t *count)
{
    int64_t n, size;
    if (read_long(c, &n) < 0)
        return -1;
    if (n < 0) {
        if (n == INT64_MIN)
            return failed("malformed Avro data: a block count out of range");
        n = -n;
        if (read_long(c, &size) < 0)
            return -1;
        if (size < 0)
            return failed("malformed Avro data: a negative block size");
    }
    if (item_size > 0 ? n > (c->end - c->p) / item_size : n > MAX_ZERO_SIZE_ITEMS)
        return failed("malformed Avro data: a block count larger than the data left");
    *count = n;
    return 0;
}

static PyObject *read_string(Cursor *c)
{
    const unsigned char *s;
    Py_ssize_t n;
    if (read_span(c, &s, &n) < 0)
        return NULL;
    return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
}

/* ---- the interpreter ---------------------------------------------------------------------- */

static PyObject *run(const Program *prog, const Node *node, Cursor *c);

static PyObject *run_union(const Program *prog, const Node *node, Cursor *c)
{
    int64_t branch;
    if (read_long(c, &branch) < 0)
        return NULL;
    switch (node->op) {
    case OP_NULL_FIRST:
        if (branch == 0)
            Py_RETURN_NONE;
        if (branch == 1)
            return run(prog, &prog->nodes[prog->kids[node->first]], c);
        break;
    case OP_NULL_SECOND:
        if (branch == 1)
            Py_RETURN_NONE;
        if (branch == 0)
            return run(prog, &prog->nodes[prog->kids[node->first]], c);
        break;
    default:
        if (branch >= 0 && branch < node->nkids)
            return run(prog, &prog->nodes[prog->kids[node->first + branch]], c);
    }
    return fail("malformed Avro data: a union branch index out of range");
}

static PyObject *run_record(const Program *prog, const Node *node, Cursor *c)
{
    PyObject *out = NULL;
    if (node->keep && !(out = new_dict(node->nkeys)))
        return NULL;
    for (Py_ssize_t i = 0; i < node->nkids; i++) {
        PyObject *value = run(prog, &prog->nodes[prog->kids[node->first + i]], c);
        if (!value)
            goto error;
        PyObject *key = prog->keys[node->first + i];
        int stored = (out && key) ? PyDict_SetItem(out, key, value) : 0;
        Py_DECREF(value);
        if (stored < 0)
            goto error;
    }
    if (out)
        return out;
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *run_array(const Program *prog, const Node *node, Cursor *c)
{
    const Node *item = &prog->nodes[prog->kids[node->first]];
    PyObject *out = NULL;
    int64_t count;
    if (node->keep && !(out = PyList_New(0)))
        return NULL;
    for (;;) {
        if (read_count(c, item->minsize, &count) < 0)
            goto error;
        if (count == 0)
            break;
        for (int64_t i = 0; i < count; i++) {
            PyObject *value = run(prog, item, c);
            if (!value)
                goto error;
            int appended = out ? PyList_Append(out, value) : 0;
            Py_DECREF(value);
            if (appended < 0)
                goto error;
        }
    }
    if (out)
        return out;
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *run_map(const Program *prog, const Node *node, Cursor *c)
{
    const Node *item = &prog->nodes[prog->kids[node->first]];
    PyObject *out = NULL;
    int64_t count;
    if (node->keep && !(out = PyDict_New()))
        return NULL;
    for (;;) {
        if (read_count(c, 1 + item->minsize, &count) < 0)
            goto error;
        if (count == 0)
            break;
        for (int64_t i = 0; i < count; i++) {
            /* keys are decoded even when the map is skipped: the Python decoder does, so a key
             * that is not UTF-8 fails both */
            PyObject *key = read_string(c);
            if (!key)
                goto error;
            PyObject *value = run(prog, item, c);
            if (!value) {
                Py_DECREF(key);
                goto error;
            }
            int stored = out ? PyDict_SetItem(out, key, value) : 0;
            Py_DECREF(key);
            Py_DECREF(value);
            if (stored < 0)
                goto error;
        }
    }
    if (out)
        return out;
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    return NULL;
}

/* Iceberg's map<int, binary|long> (an array of {key: int, value} records) and int arrays. */
static PyObject *run_iceberg_block(const Node *node, Cursor *c)
{
    PyObject *out = NULL;
    int is_list = node->op == OP_INT_ARRAY;
    int64_t count, key, number;
    for (;;) {
        if (read_count(c, is_list ? 1 : 2, &count) < 0)
            goto error;
        if (count == 0)
            break;
        if (node->keep && !out && !(out = is_list ? PyList_New(0) : new_dict(count)))
            goto error;
        if (!node->keep && node->op != OP_INT_BYTES_MAP) { /* numbers only, read through */
            if (skip_longs(c, is_list ? count : 2 * count) < 0)
                goto error;
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            PyObject *k = NULL, *v = NULL;
            int status = 0;
            if (read_long(c, &key) < 0)
                goto error;
            if (node->op == OP_INT_BYTES_MAP) {
                const unsigned char *s;
                Py_ssize_t n;
                if (read_span(c, &s, &n) < 0)
                    goto error;
                if (out && !(v = PyBytes_FromStringAndSize((const char *)s, n)))
                    goto error;
            }
            else if (node->op == OP_INT_LONG_MAP) {
                if (read_long(c, &number) < 0)
                    goto error;
                if (out && !(v = PyLong_FromLongLong(number)))
                    goto error;
            }
            if (!node->keep)
                continue;
            if (!(k = PyLong_FromLongLong(key))) {
                Py_XDECREF(v);
                goto error;
            }
            status = is_list ? PyList_Append(out, k) : PyDict_SetItem(out, k, v);
            Py_DECREF(k);
            Py_XDECREF(v);
            if (status < 0)
                goto error;
        }
    }
    if (out)
        return out;
    if (node->keep) /* no block: empty */
        return is_list ? PyList_New(0) : PyDict_New();
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    return NULL;
}

/* A map kept "raw": its encoded blocks, up to and with the closing zero count, as one bytes
 * object (read through, checked, as a skipped map is). int_bytes_map()/int_long_map() parse it. */
static PyObject *run_raw(const Node *node, Cursor *c)
{
    static const Node skip_bytes = {OP_INT_BYTES_MAP, 0, 0, 0, 0, 0, 0};
    static const Node skip_counts = {OP_INT_LONG_MAP, 0, 0, 0, 0, 0, 0};
    const unsigned char *start = c->p;
    PyObject *skipped = run_iceberg_block(node->op == OP_RAW_INT_BYTES_MAP ? &skip_bytes : &skip_counts, c);
    if (!skipped)
        return NULL;
    Py_DECREF(skipped);
    return PyBytes_FromStringAndSize((const char *)start, c->p - start);
}

static PyObject *run(const Program *prog, const Node *node, Cursor *c)
{
    const unsigned char *s;
    Py_ssize_t n;
    int64_t number;

    switch (node->op) {
    case OP_NULL:
        Py_RETURN_NONE;
    case OP_BOOLEAN:
        if (take(c, 1, &s) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        return PyBool_FromLong(*s != 0);
    case OP_LONG:
        if (read_long(c, &number) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        return PyLong_FromLongLong(number);
    case OP_FLOAT: {
        float f;
        if (take(c, 4, &s) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        memcpy(&f, s, 4); /* Avro is little-endian, as are the machines this builds on */
        return PyFloat_FromDouble((double)f);
    }
    case OP_DOUBLE: {
        double d;
        if (take(c, 8, &s) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        memcpy(&d, s, 8);
        return PyFloat_FromDouble(d);
    }
    case OP_BYTES:
        if (read_span(c, &s, &n) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        return PyBytes_FromStringAndSize((const char *)s, n);
    case OP_STRING:
        if (read_span(c, &s, &n) < 0)
            return NULL;
        if (!node->keep) /* like the Python decoder's skip_utf8: not validated */
            Py_RETURN_NONE;
        return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    case OP_FIXED:
        if (take(c, node->size, &s) < 0)
            return NULL;
        if (!node->keep)
            Py_RETURN_NONE;
        return PyBytes_FromStringAndSize((const char *)s, node->size);
    case OP_RECORD:
        return run_record(prog, node, c);
    case OP_NULL_FIRST:
    case OP_NULL_SECOND:
    case OP_UNION:
        return run_union(prog, node, c);
    case OP_ARRAY:
        return run_array(prog, node, c);
    case OP_MAP:
        return run_map(prog, node, c);
    case OP_RAW_INT_BYTES_MAP:
    case OP_RAW_INT_LONG_MAP:
        return run_raw(node, c);
    default: /* OP_INT_BYTES_MAP, OP_INT_LONG_MAP, OP_INT_ARRAY (checked by Program) */
        return run_iceberg_block(node, c);
    }
}

/* `count` records of the root node from buf[0:len]. */
static PyObject *run_records(const Program *prog, const unsigned char *buf, Py_ssize_t len, int64_t count)
{
    Cursor c = {buf, buf + len};
    const Node *root = &prog->nodes[0];
    if (count < 0)
        return fail("malformed Avro data: a negative record count");
    if (root->minsize > 0 ? count > len / root->minsize : count > MAX_ZERO_SIZE_ITEMS)
        return fail("malformed Avro data: more records than the data can hold");
    PyObject *out = PyList_New((Py_ssize_t)count);
    if (!out)
        return NULL;
    /* No cyclic GC while decoding: the records hold no cycles, and a collection every 700
     * allocations was a tenth of decoding. Nothing here runs Python code (no finalizer, as no
     * collection runs), so no other thread can see the collector off. */
    int collecting = PyGC_Disable();
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *record = run(prog, root, &c);
        if (!record) {
            Py_DECREF(out); /* the unset items are NULL, which list_dealloc skips */
            out = NULL;
            break;
        }
        PyList_SET_ITEM(out, i, record);
    }
    if (collecting)
        PyGC_Enable();
    return out;
}

/* ---- Program ------------------------------------------------------------------------------ */

static void Program_dealloc(Program *self)
{
    if (self->keys) {
        for (Py_ssize_t i = 0; i < self->nkids; i++)
            Py_XDECREF(self->keys[i]);
    }
    PyMem_Free(self->keys);
    PyMem_Free(self->kids);
    PyMem_Free(self->nodes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t node_minsize(const Program *p, const Node *n)
{
    Py_ssize_t total = 0;
    switch (n->op) {
    case OP_NULL:
        return 0;
    case OP_FLOAT:
        return 4;
    case OP_DOUBLE:
        return 8;
    case OP_FIXED:
        return n->size;
    case OP_RECORD:
        for (Py_ssize_t i = 0; i < n->nkids; i++) {
            Py_ssize_t kid = p->nodes[p->kids[n->first + i]].minsize;
            total = kid > PY_SSIZE_T_MAX - total ? PY_SSIZE_T_MAX : total + kid;
        }
        return total;
    default: /* a number, a length, a union index or a block count */
        return 1;
    }
}

/* One node tuple (op, keep, size, children, keys) into prog->nodes[i]; children are appended to
 * prog->kids/keys from *next. */
static int load_node(Program *prog, Py_ssize_t i, PyObject *item, Py_ssize_t *next)
{
    int op, keep;
    Py_ssize_t size;
    PyObject *kids, *keys;
    Node *node = &prog->nodes[i];
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "ipnO!O!", &op, &keep, &size, &PyTuple_Type, &kids,
                                                  &PyTuple_Type, &keys)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a program node is a tuple (op, keep, size, children, keys)");
        return -1;
    }
    Py_ssize_t nkids = PyTuple_GET_SIZE(kids);
    static const int arity[OP_COUNT] = {
        [OP_NULL_FIRST] = 1, [OP_NULL_SECOND] = 1, [OP_ARRAY] = 1, [OP_MAP] = 1,
        [OP_RECORD] = -1, [OP_UNION] = -1,
    };
    if (op < 0 || op >= OP_COUNT || size < 0 || (arity[op] >= 0 && nkids != arity[op])
        || (op == OP_RECORD && PyTuple_GET_SIZE(keys) != nkids) || *next + nkids > prog->nkids) {
        PyErr_Format(PyExc_ValueError, "malformed program node %zd", i);
        return -1;
    }
    node->op = op;
    node->keep = keep;
    node->size = size;
    node->nkids = nkids;
    node->first = *next;
    for (Py_ssize_t k = 0; k < nkids; k++) {
        Py_ssize_t kid = PyLong_AsSsize_t(PyTuple_GET_ITEM(kids, k));
        if (kid == -1 && PyErr_Occurred())
            return -1;
        /* children come after their parent: the program is a tree and every run ends */
        if (kid <= i || kid >= prog->nnodes) {
            PyErr_Format(PyExc_ValueError, "program node %zd has a child out of order", i);
            return -1;
        }
        prog->kids[*next + k] = kid;
        if (op == OP_RECORD) {
            PyObject *key = PyTuple_GET_ITEM(keys, k);
            if (key != Py_None) {
                if (!PyUnicode_Check(key)) {
                    PyErr_SetString(PyExc_TypeError, "a record field key is a str or None");
                    return -1;
                }
                Py_INCREF(key);
                PyUnicode_InternInPlace(&key);
                prog->keys[*next + k] = key;
            }
        }
    }
    node->nkeys = 0;
    for (Py_ssize_t k = 0; k < nkids; k++)
        node->nkeys += prog->keys[*next + k] != NULL;
    *next += nkids;
    return 0;
}

static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *nodes, *seq = NULL;
    static char *names[] = {"nodes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Program", names, &nodes))
        return NULL;
    if (!(seq = PySequence_Fast(nodes, "a program is a sequence of nodes")))
        return NULL;
    Py_ssize_t nnodes = PySequence_Fast_GET_SIZE(seq), nkids = 0, next = 0;
    if (nnodes == 0) {
        Py_DECREF(seq);
        return fail("an empty program");
    }
    for (Py_ssize_t i = 0; i < nnodes; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 5 && PyTuple_Check(PyTuple_GET_ITEM(item, 3)))
            nkids += PyTuple_GET_SIZE(PyTuple_GET_ITEM(item, 3));
    }
    Program *self = (Program *)type->tp_alloc(type, 0);
    if (!self)
        goto error;
    self->nnodes = nnodes;
    self->nkids = nkids;
    self->nodes = PyMem_Calloc((size_t)nnodes, sizeof(Node));
    self->kids = PyMem_Calloc((size_t)nkids + 1, sizeof(Py_ssize_t));
    self->keys = PyMem_Calloc((size_t)nkids + 1, sizeof(PyObject *));
    if (!self->nodes || !self->kids || !self->keys) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < nnodes; i++) {
        if (load_node(self, i, PySequence_Fast_GET_ITEM(seq, i), &next) < 0)
            goto error;
    }
    for (Py_ssize_t i = nnodes - 1; i >= 0; i--) /* children first */
        self->nodes[i].minsize = node_minsize(self, &self->nodes[i]);
    Py_DECREF(seq);
    return (PyObject *)self;
error:
    Py_DECREF(seq);
    Py_XDECREF(self);
    return NULL;
}

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_avro_native.Program",
    .tp_doc = "A compiled record decoder: Program([(op, keep, size, children, keys), ...]).",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Program_new,
    .tp_dealloc = (destructor)Program_dealloc,
};

/* ---- slots makers ---------------------------------------------------------------------------
 *
 * SlotsMaker(cls, names): a callable taking one positional argument per name that returns a new
 * instance of cls with those slots set, and nothing run: cls's __init__ and __new__ are skipped
 * (what _manifests.slots_builder's generated Python function does, one descriptor call per
 * slot; here the values are stored at the slots' offsets, as those descriptors store them).
 * Listing builds a DataFile, a FileSlice and three LazyStats per file with them. Each name must
 * be a writable object slot (a member descriptor) of cls or of a base. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t n;
    Py_ssize_t *offsets;
} SlotsMaker;

static PyObject *SlotsMaker_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SlotsMaker *self = (SlotsMaker *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || nargs != self->n) {
        PyErr_Format(PyExc_TypeError, "a slots maker of %s takes %zd positional arguments (%zd given%s)",
                     self->cls->tp_name, self->n, nargs, kwnames && PyTuple_GET_SIZE(kwnames) ? ", with keywords" : "");
        return NULL;
    }
    PyObject *obj = self->cls->tp_alloc(self->cls, 0);
    if (!obj)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject **slot = (PyObject **)((char *)obj + self->offsets[i]);
        Py_INCREF(args[i]);
        Py_XSETREF(*slot, args[i]);
    }
    return obj;
}

static void SlotsMaker_dealloc(SlotsMaker *self)
{
    PyMem_Free(self->offsets);
    Py_XDECREF(self->cls);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *SlotsMaker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *cls, *names;
    if (kwargs && PyDict_GET_SIZE(kwargs))
        return fail("SlotsMaker(cls, names) takes no keywords");
    if (!PyArg_ParseTuple(args, "O!O!:SlotsMaker", &PyType_Type, &cls, &PyTuple_Type, &names))
        return NULL;
    PyTypeObject *target = (PyTypeObject *)cls;
    if (target->tp_alloc == NULL || target->tp_itemsize != 0)
        return fail("SlotsMaker: the class cannot be allocated as a fixed-size object");
    SlotsMaker *self = (SlotsMaker *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->vectorcall = SlotsMaker_vectorcall;
    self->n = PyTuple_GET_SIZE(names);
    if (!(self->offsets = PyMem_Calloc(self->n ? self->n : 1, sizeof(Py_ssize_t)))) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    Py_INCREF(cls);
    self->cls = target;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *descr = PyUnicode_Check(name) ? _PyType_Lookup(target, name) : NULL; /* borrowed */
        PyMemberDef *member = NULL;
        if (descr && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
            PyType_IsSubtype(target, PyDescr_TYPE(descr)))
            member = ((PyMemberDescrObject *)descr)->d_member;
        if (!member || member->type != T_OBJECT_EX || (member->flags & READONLY) || member->offset <= 0 ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > target->tp_basicsize) {
            PyErr_Format(PyExc_ValueError, "SlotsMaker: %R is not a writable object slot of %s", name,
                         target->tp_name);
            Py_DECREF(self);
            return NULL;
        }
        self->offsets[i] = member->offset;
    }
    return (PyObject *)self;
}

static PyTypeObject SlotsMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_avro_native.SlotsMaker",
    .tp_doc = "SlotsMaker(cls, names): a callable making instances of cls with the named slots set.",
    .tp_basicsize = sizeof(SlotsMaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(SlotsMaker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = SlotsMaker_new,
    .tp_dealloc = (destructor)SlotsMaker_dealloc,
};

/* ---- the common data file ----------------------------------------------------------------------
 *
 * plain_data_file(context, data, values, sequence, snapshot_id) -> DataFile | None: the spec model
 * of a manifest entry's decoded data_file dict (_manifests.make_data_file, whose plain case this
 * is), built without a Python frame, or None when the entry is not plain (content other than
 * data, equality ids, deletion vector or row lineage fields, a missing or odd field, a format that
 * is no str): make_data_file then builds it. `context` is _manifests.PlainContext.fields:
 * (DataFile maker, LazyStats maker, ColumnDecoder, FileContent.DATA, spec id, identity or None),
 * the makers SlotsMakers taking the fields in order. */
static PyObject *str_content, *str_equality_ids, *str_referenced, *str_content_offset, *str_first_row_id,
    *str_file_format, *str_file_path, *str_size, *str_count, *str_lower, *str_upper, *str_nulls, *str_offsets,
    *str_parquet, *str_PARQUET, *str_lower_method, *str_sequence_number, *str_snapshot_id, *str_spec_id,
    *str_identity_columns, *str_status, *str_data_file, *str_partition;

static int intern_names(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&str_content, "content"}, {&str_equality_ids, "equality_ids"},
        {&str_referenced, "referenced_data_file"}, {&str_content_offset, "content_offset"},
        {&str_first_row_id, "first_row_id"}, {&str_file_format, "file_format"}, {&str_file_path, "file_path"},
        {&str_size, "file_size_in_bytes"}, {&str_count, "record_count"}, {&str_lower, "lower_bounds"},
        {&str_upper, "upper_bounds"}, {&str_nulls, "null_value_counts"}, {&str_offsets, "split_offsets"},
        {&str_parquet, "parquet"}, {&str_PARQUET, "PARQUET"}, {&str_lower_method, "lower"},
        {&str_sequence_number, "sequence_number"}, {&str_snapshot_id, "snapshot_id"}, {&str_spec_id, "spec_id"},
        {&str_identity_columns, "identity_columns"}, {&str_status, "status"}, {&str_data_file, "data_file"},
        {&str_partition, "partition"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text)))
            return -1;
    return 0;
}

static PyObject *lazy_stats(PyObject *maker, PyObject *raw, PyObject *decoder, PyObject *bounds)
{
    if (!raw)
        Py_RETURN_NONE;
    PyObject *args[4] = {raw, decoder, bounds, Py_None};
    return PyObject_Vectorcall(maker, args, 4, NULL);
}

/* The fields of a data_file build_plain and plain_slice read, in this order (F_*): borrowed
 * references, NULL when the field is absent (a value of None is kept: build_plain tells the
 * two apart where make_data_file does). */
enum {
    F_CONTENT, F_OFFSETS, F_EQUALITY, F_REFERENCED, F_CONTENT_OFFSET, F_FIRST_ROW_ID,
    F_PATH, F_SIZE, F_COUNT, F_FORMAT, F_LOWER, F_UPPER, F_NULLS, F_COUNT_OF_FIELDS
};
static PyObject **const FIELD_NAMES[F_COUNT_OF_FIELDS] = {
    &str_content, &str_offsets, &str_equality_ids, &str_referenced, &str_content_offset, &str_first_row_id,
    &str_file_path, &str_size, &str_count, &str_file_format, &str_lower, &str_upper, &str_nulls,
};
/* ... and of the entry record (R_*) */
enum { R_STATUS, R_SEQUENCE, R_SNAPSHOT, R_COUNT_OF_FIELDS };
static PyObject **const RECORD_NAMES[R_COUNT_OF_FIELDS] = {&str_status, &str_sequence_number, &str_snapshot_id};

/* `value`, or NULL when it is None: what present() gives for a field read from a dict. */
static PyObject *not_none(PyObject *value)
{
    return value == Py_None ? NULL : value;
}

/* plain_data_file's work over a data_file's fields `f` (F_*): a new reference (None when not
 * plain), NULL on error. */
static PyObject *build_plain_fields(PyObject *context, PyObject *const *f, PyObject *values, PyObject *sequence,
                                    PyObject *snapshot)
{
    PyObject *make_file = PyTuple_GET_ITEM(context, 0), *make_stats = PyTuple_GET_ITEM(context, 1),
             *decoder = PyTuple_GET_ITEM(context, 2), *content = PyTuple_GET_ITEM(context, 3),
             *spec_id = PyTuple_GET_ITEM(context, 4), *identity = PyTuple_GET_ITEM(context, 5);
    PyObject *kind = not_none(f[F_CONTENT]);
    int overflow = 0;
    if (kind && !(PyLong_CheckExact(kind) && PyLong_AsLongAndOverflow(kind, &overflow) == 0 && !overflow))
        Py_RETURN_NONE;
    PyObject *split = not_none(f[F_OFFSETS]);
    if (split && !PyList_CheckExact(split))
        Py_RETURN_NONE;
    PyObject *equality = not_none(f[F_EQUALITY]);
    if (equality && !(PyList_CheckExact(equality) && PyList_GET_SIZE(equality) == 0))
        Py_RETURN_NONE;
    PyObject *referenced = not_none(f[F_REFERENCED]);
    if ((referenced && !(PyUnicode_CheckExact(referenced) && PyUnicode_GET_LENGTH(referenced) == 0)) ||
        not_none(f[F_CONTENT_OFFSET]) || not_none(f[F_FIRST_ROW_ID]))
        Py_RETURN_NONE;
    PyObject *path = f[F_PATH], *size = f[F_SIZE], *count = f[F_COUNT], *format = f[F_FORMAT];
    if (!path || !size || !count || !format || !PyUnicode_CheckExact(format))
        Py_RETURN_NONE;
    PyObject *file_format, *offsets = NULL, *lower = NULL, *upper = NULL, *nulls = NULL, *extra = NULL,
             *out = NULL;
    if (PyUnicode_Compare(format, str_PARQUET) == 0 || PyUnicode_Compare(format, str_parquet) == 0)
        file_format = Py_NewRef(str_parquet);
    else if (!(file_format = PyObject_CallMethodNoArgs(format, str_lower_method)))
        return NULL;
    if (split && PyList_GET_SIZE(split) > 0)
        offsets = PyList_AsTuple(split);
    else
        offsets = Py_NewRef(Py_None);
    if (!offsets)
        goto done;
    if (!(lower = lazy_stats(make_stats, not_none(f[F_LOWER]), decoder, Py_True)) ||
        !(upper = lazy_stats(make_stats, not_none(f[F_UPPER]), decoder, Py_True)) ||
        !(nulls = lazy_stats(make_stats, not_none(f[F_NULLS]), decoder, Py_False)))
        goto done;
    if (!(extra = new_dict(4)) || PyDict_SetItem(extra, str_sequence_number, sequence) < 0 ||
        PyDict_SetItem(extra, str_snapshot_id, snapshot) < 0 || PyDict_SetItem(extra, str_spec_id, spec_id) < 0 ||
        (identity != Py_None && PyDict_SetItem(extra, str_identity_columns, identity) < 0))
        goto done;
    PyObject *empty = PyTuple_New(0);
    if (!empty)
        goto done;
    PyObject *fields[12] = {path, size, count, content, file_format, values, lower, upper, nulls, offsets, empty, extra};
    out = PyObject_Vectorcall(make_file, fields, 12, NULL);
    Py_DECREF(empty);
done:
    Py_DECREF(file_format);
    Py_XDECREF(offsets);
    Py_XDECREF(lower);
    Py_XDECREF(upper);
    Py_XDECREF(nulls);
    Py_XDECREF(extra);
    return out;
}

/* The fields `f` of the dict `data`; -1 with an error set when a lookup fails. */
static int dict_fields(PyObject *data, PyObject **f)
{
    for (int i = 0; i < F_COUNT_OF_FIELDS; i++)
        f[i] = PyDict_GetItemWithError(data, *FIELD_NAMES[i]);
    return PyErr_Occurred() ? -1 : 0;
}

/* plain_data_file's work: a new reference (None when not plain), NULL on error. */
static PyObject *build_plain(PyObject *context, PyObject *data, PyObject *values, PyObject *sequence,
                             PyObject *snapshot)
{
    if (!PyTuple_CheckExact(context) || PyTuple_GET_SIZE(context) != 6)
        return fail("plain_data_file: context must be PlainContext.fields");
    if (!PyDict_CheckExact(data))
        Py_RETURN_NONE;
    PyObject *f[F_COUNT_OF_FIELDS];
    if (dict_fields(data, f) < 0)
        return NULL;
    return build_plain_fields(context, f, values, sequence, snapshot);
}

static PyObject *plain_data_file(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "plain_data_file(context, data, values, sequence, snapshot_id)");
        return NULL;
    }
    return build_plain(args[0], args[1], args[2], args[3], args[4]);
}

/* ---- a manifest's plain slices -------------------------------------------------------------------
 *
 * plain_slices(scan, records, one) -> list: the FileSlices a listing without filter, deletes, row
 * lineage or snapshot range gives for a manifest's decoded entries (index._manifest_slices, whose
 * loop this is for that case), in order: deleted entries skipped, the data sequence number and
 * snapshot id inherited as _manifests.inherited_sequence inherits them, the partition looked up in
 * the spec's cache (SpecContext.partitions) and the model built by build_plain. An entry any of that
 * does not cover (a field of an unexpected type, a partition not in the cache, an entry that is not
 * plain) is given to the Python `one(record)`, which returns its slice or None.
 * scan = (plain context, FileSlice maker, partition cache or None, partition keys, partition_of,
 *         manifest sequence number, manifest snapshot id or None).
 *
 * plain_decode does the same straight from the encoded entries (see there). */

/* The slice of one entry from its record fields `r` (R_*), data_file fields `f` and partition
 * key (a new reference, stolen; NULL when the partition is not a dict): a new reference, None
 * when the entry is not covered, False when it is deleted, NULL on error. */
static PyObject *entry_slice(PyObject *scan, PyObject *const *r, PyObject *const *f, PyObject *key)
{
    PyObject *context = PyTuple_GET_ITEM(scan, 0), *make_slice = PyTuple_GET_ITEM(scan, 1),
             *cache = PyTuple_GET_ITEM(scan, 2), *manifest_sequence = PyTuple_GET_ITEM(scan, 5),
             *manifest_snapshot = PyTuple_GET_ITEM(scan, 6), *status = r[R_STATUS];
    PyObject *entry = NULL, *zero = NULL, *file = NULL, *out = NULL;
    if (!status || !PyLong_CheckExact(status)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    long state = PyLong_AsLong(status);
    if (state == -1 && PyErr_Occurred())
        goto done;
    if (state == 2) { /* deleted: no slice */
        out = Py_NewRef(Py_False);
        goto done;
    }
    PyObject *sequence = not_none(r[R_SEQUENCE]), *snapshot = not_none(r[R_SNAPSHOT]);
    if (!sequence) {
        int zero_sequence = PyObject_Not(manifest_sequence);
        if (zero_sequence < 0)
            goto done;
        if (zero_sequence || state == 1)
            sequence = manifest_sequence;
    }
    if (sequence) {
        int falsy = PyObject_Not(sequence); /* `sequence or 0` */
        if (falsy < 0)
            goto done;
        if (falsy)
            sequence = NULL;
    }
    if (!snapshot)
        snapshot = manifest_snapshot;
    PyObject *found = key ? PyDict_GetItemWithError(cache, key) : NULL;
    if (!found) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError)) /* unhashable: to Python */
            goto done;
        PyErr_Clear();
        out = Py_NewRef(Py_None);
        goto done;
    }
    if (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 3) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    entry = Py_NewRef(found);
    if (!sequence && !(zero = PyLong_FromLong(0)))
        goto done;
    file = build_plain_fields(context, f, PyTuple_GET_ITEM(entry, 1), sequence ? sequence : zero, snapshot);
    if (!file || file == Py_None) {
        out = file;
        file = NULL;
        goto done;
    }
    PyObject *empty = PyTuple_New(0);
    if (!empty)
        goto done;
    PyObject *fields[5] = {PyTuple_GET_ITEM(entry, 2), file, empty, Py_None, snapshot};
    out = PyObject_Vectorcall(make_slice, fields, 5, NULL);
    Py_DECREF(empty);
done:
    Py_XDECREF(entry);
    Py_XDECREF(zero);
    Py_XDECREF(file);
    Py_XDECREF(key);
    return out;
}

/* A decoded record's slice (see entry_slice). */
static PyObject *plain_slice(PyObject *scan, PyObject *record)
{
    if (!PyDict_CheckExact(record) || PyTuple_GET_ITEM(scan, 2) == Py_None)
        Py_RETURN_NONE;
    PyObject *r[R_COUNT_OF_FIELDS], *f[F_COUNT_OF_FIELDS];
    for (int i = 0; i < R_COUNT_OF_FIELDS; i++)
        r[i] = PyDict_GetItemWithError(record, *RECORD_NAMES[i]);
    PyObject *data = PyDict_GetItemWithError(record, str_data_file);
    if (PyErr_Occurred())
        return NULL;
    if (!r[R_STATUS] || !PyLong_CheckExact(r[R_STATUS]) || !data || !PyDict_CheckExact(data))
        Py_RETURN_NONE;
    if (dict_fields(data, f) < 0)
        return NULL;
    PyObject *partition = PyDict_GetItemWithError(data, str_partition), *key = NULL;
    if (PyErr_Occurred())
        return NULL;
    if (partition && PyDict_CheckExact(partition)) {
        PyObject *keys = PyTuple_GET_ITEM(scan, 3);
        Py_ssize_t n = PyTuple_GET_SIZE(keys);
        if (!(key = PyTuple_New(n)))
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *value = PyDict_GetItemWithError(partition, PyTuple_GET_ITEM(keys, i));
            if (!value && PyErr_Occurred()) {
                Py_DECREF(key);
                return NULL;
            }
            PyTuple_SET_ITEM(key, i, Py_NewRef(value ? value : Py_None));
        }
    }
    return entry_slice(scan, r, f, key);
}

static int scan_is_valid(PyObject *scan)
{
    return PyTuple_CheckExact(scan) && PyTuple_GET_SIZE(scan) == 7 && PyTuple_CheckExact(PyTuple_GET_ITEM(scan, 0)) &&
           PyTuple_GET_SIZE(PyTuple_GET_ITEM(scan, 0)) == 6 && PyTuple_CheckExact(PyTuple_GET_ITEM(scan, 3)) &&
           (PyTuple_GET_ITEM(scan, 2) == Py_None || PyDict_CheckExact(PyTuple_GET_ITEM(scan, 2)));
}

/* Appends `slice` (stolen; None and False are not slices) to `out`: -1 on error. */
static int add_slice(PyObject *out, PyObject *slice)
{
    int appended = !slice ? -1 : (slice == Py_None || slice == Py_False) ? 0 : PyList_Append(out, slice);
    Py_XDECREF(slice);
    return appended;
}

/* `one(record)` with the cyclic GC enabled while it runs (it runs Python code). */
static PyObject *call_one(PyObject *one, PyObject *record, int collecting)
{
    if (collecting)
        PyGC_Enable();
    PyObject *slice = PyObject_CallOneArg(one, record);
    if (collecting)
        PyGC_Disable();
    return slice;
}

static PyObject *plain_slices(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !scan_is_valid(args[0]) || !PyList_CheckExact(args[1]))
        return fail("plain_slices(scan, records, one): scan is (context, slice maker, cache, keys, partition_of,"
                    " sequence, snapshot), records a list");
    PyObject *scan = args[0], *records = args[1], *one = args[2];
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    /* No cyclic GC while building (the slices hold no cycles; a collection every 700 objects,
     * over the slices built so far, took most of the time), except while `one` runs */
    int collecting = PyGC_Disable();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        Py_INCREF(record); /* `one` runs Python code */
        PyObject *slice = plain_slice(scan, record);
        if (slice == Py_None) {
            Py_DECREF(slice);
            slice = call_one(one, record, collecting);
        }
        Py_DECREF(record);
        if (add_slice(out, slice) < 0) {
            Py_CLEAR(out);
            break;
        }
    }
    if (collecting)
        PyGC_Enable();
    return out;
}

/* ---- decoding a manifest's plain slices ------------------------------------------------------
 *
 * plain_layout(program, keys) -> layout | None and plain_decode(layout, payload, offset, count, scan,
 * one) -> (slices, offset): plain_slices' loop over the encoded entries themselves, without the
 * record, data_file and partition dicts decode() would build for them. Each field is read by run()
 * as decode() reads it (the same checks, the same errors) into a slot; the slots are what
 * plain_slice reads from the dicts (the last of two fields of one name, as in a dict). An entry
 * entry_slice does not cover is decoded again from its start with run() and its dict given to
 * `one`, as plain_slices gives it. The layout says which field goes to which slot, once per
 * program and partition keys: None when the program's entries are not records whose data_file
 * and partition are records (decode() then and plain_slices). */

typedef struct {
    PyObject *program, *keys;
    Py_ssize_t data_kid, partition_kid, npartition; /* data_file among the entry's fields, partition among data_file's */
    signed char *record_slot, *data_slot;           /* R_* / F_* of each field, -1: read and dropped */
    Py_ssize_t *key_kid;                            /* each key's partition field, -1: none (None) */
} Layout;

static const char LAYOUT_NAME[] = "lakewarden._avro_native.Layout";

static void layout_release(Layout *layout);

static void layout_free(PyObject *capsule)
{
    Layout *layout = PyCapsule_GetPointer(capsule, LAYOUT_NAME);
    if (!layout)
        return;
    Py_XDECREF(layout->program);
    Py_XDECREF(layout->keys);
    layout_release(layout);
}

/* The index of `name` among NAMES (n of them) that `key` (a field key or NULL) equals, -1 none. */
static int name_index(PyObject *key, PyObject **const *names, int n)
{
    if (!key)
        return -1;
    for (int i = 0; i < n; i++)
        if (PyUnicode_Compare(key, *names[i]) == 0)
            return i;
    return -1;
}

static int key_is(PyObject *key, PyObject *name)
{
    return key && PyUnicode_Compare(key, name) == 0;
}

/* Each field of the record `node`: its slot among `names` (n of them; -1: none) into a new
 * *slots, and the index of the last field named `nested` into *nested_kid (-1: none); -1 with
 * MemoryError when *slots cannot be allocated. */
static int map_fields(const Program *prog, const Node *node, PyObject **const *names, int n, PyObject *nested,
                      signed char **slots, Py_ssize_t *nested_kid)
{
    *nested_kid = -1;
    if (!(*slots = PyMem_Calloc(node->nkids + 1, 1))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < node->nkids; i++) {
        PyObject *key = prog->keys[node->first + i];
        (*slots)[i] = (signed char)name_index(key, names, n);
        if (key_is(key, nested))
            *nested_kid = i;
    }
    return 0;
}

/* The node of field `kid` of the record `node` when it is a record whose fields are returned,
 * else NULL. */
static const Node *kept_record(const Program *prog, const Node *node, Py_ssize_t kid)
{
    const Node *field = kid >= 0 ? &prog->nodes[prog->kids[node->first + kid]] : NULL;
    return field && field->op == OP_RECORD && field->keep ? field : NULL;
}

static void layout_release(Layout *layout)
{
    PyMem_Free(layout->record_slot);
    PyMem_Free(layout->data_slot);
    PyMem_Free(layout->key_kid);
    PyMem_Free(layout);
}

static PyObject *plain_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &ProgramType) || !PyTuple_CheckExact(args[1]))
        return fail("plain_layout(program, keys): a Program and a tuple of partition keys");
    Program *prog = (Program *)args[0];
    PyObject *keys = args[1];
    const Node *root = &prog->nodes[0], *data, *partition;
    if (root->op != OP_RECORD || !root->keep)
        Py_RETURN_NONE;
    Layout *layout = PyMem_Calloc(1, sizeof(Layout));
    if (!layout)
        return PyErr_NoMemory();
    if (map_fields(prog, root, RECORD_NAMES, R_COUNT_OF_FIELDS, str_data_file, &layout->record_slot,
                   &layout->data_kid) < 0)
        goto error;
    if (!(data = kept_record(prog, root, layout->data_kid)))
        goto not_plain;
    if (map_fields(prog, data, FIELD_NAMES, F_COUNT_OF_FIELDS, str_partition, &layout->data_slot,
                   &layout->partition_kid) < 0)
        goto error;
    if (!(partition = kept_record(prog, data, layout->partition_kid)))
        goto not_plain;
    layout->npartition = partition->nkids;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (!(layout->key_kid = PyMem_Calloc(nkeys + 1, sizeof(Py_ssize_t)))) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *name = PyTuple_GET_ITEM(keys, k);
        layout->key_kid[k] = -1;
        if (!PyUnicode_Check(name)) /* looked up in a dict of str keys: never found */
            continue;
        for (Py_ssize_t i = 0; i < partition->nkids; i++)
            if (key_is(prog->keys[partition->first + i], name))
                layout->key_kid[k] = i; /* the last field of that name, as in a dict */
    }
    PyObject *capsule = PyCapsule_New(layout, LAYOUT_NAME, layout_free);
    if (!capsule)
        goto error;
    layout->program = Py_NewRef((PyObject *)prog);
    layout->keys = Py_NewRef(keys);
    return capsule;
error:
    layout_release(layout);
    return NULL;
not_plain:
    layout_release(layout);
    Py_RETURN_NONE;
}

/* One field read at `c` into slots[slot] (a new reference), or read and dropped (slot -1). */
static int read_field(const Program *prog, const Node *node, Cursor *c, PyObject **slots, Py_ssize_t slot)
{
    PyObject *value = run(prog, node, c);
    if (!value)
        return -1;
    if (slot >= 0)
        Py_XSETREF(slots[slot], value);
    else
        Py_DECREF(value);
    return 0;
}

/* A data file's format into f[F_FORMAT] as run() reads the string: nearly every entry's is
 * "PARQUET", given as one shared str rather than decoded into a new one each time. */
static int read_format(Cursor *c, PyObject **f)
{
    const unsigned char *s;
    Py_ssize_t n;
    if (read_span(c, &s, &n) < 0)
        return -1;
    PyObject *format = n == 7 && memcmp(s, "PARQUET", 7) == 0 ? Py_NewRef(str_PARQUET)
                                                              : PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!format)
        return -1;
    Py_XSETREF(f[F_FORMAT], format);
    return 0;
}

/* The fields of one entry read at `c` into r (R_*), f (F_*) and the partition's into p (new
 * references, NULL where absent; the caller clears them): -1 on error. */
static int read_entry(const Layout *layout, Cursor *c, PyObject **r, PyObject **f, PyObject **p)
{
    const Program *prog = (const Program *)layout->program;
    const Node *root = &prog->nodes[0];
    for (Py_ssize_t i = 0; i < root->nkids; i++) {
        const Node *kid = &prog->nodes[prog->kids[root->first + i]];
        if (i != layout->data_kid) {
            if (read_field(prog, kid, c, r, layout->record_slot[i]) < 0)
                return -1;
            continue;
        }
        for (Py_ssize_t j = 0; j < kid->nkids; j++) {
            const Node *field = &prog->nodes[prog->kids[kid->first + j]];
            if (layout->data_slot[j] == F_FORMAT && field->op == OP_STRING && field->keep) {
                if (read_format(c, f) < 0)
                    return -1;
                continue;
            }
            if (j != layout->partition_kid) {
                if (read_field(prog, field, c, f, layout->data_slot[j]) < 0)
                    return -1;
                continue;
            }
            for (Py_ssize_t k = 0; k < field->nkids; k++)
                if (read_field(prog, &prog->nodes[prog->kids[field->first + k]], c, p, k) < 0)
                    return -1;
        }
    }
    return 0;
}

static void clear_slots(PyObject **slots, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(slots[i]);
}

static PyObject *plain_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Layout *layout = nargs == 6 ? PyCapsule_GetPointer(args[0], LAYOUT_NAME) : NULL;
    if (!layout) {
        PyErr_Clear();
        return fail("plain_decode(layout, payload, offset, count, scan, one): a layout of plain_layout");
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[2]), count = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *scan = args[4], *one = args[5];
    if (!scan_is_valid(scan) || PyTuple_GET_ITEM(scan, 3) != layout->keys || PyTuple_GET_ITEM(scan, 2) == Py_None)
        return fail("plain_decode: scan is plain_slices' scan, with a cache and the layout's keys");
    Py_buffer payload;
    if (PyObject_GetBuffer(args[1], &payload, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL, **p = NULL, *r[R_COUNT_OF_FIELDS] = {0}, *f[F_COUNT_OF_FIELDS] = {0};
    if (offset < 0 || offset > payload.len || count < 0) {
        fail("plain_decode: offset or count out of range");
        goto release;
    }
    if (!(p = PyMem_Calloc(layout->npartition + 1, sizeof(PyObject *)))) {
        PyErr_NoMemory();
        goto release;
    }
    if (!(out = PyList_New(0)))
        goto release;
    const Program *prog = (const Program *)layout->program;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(layout->keys);
    Cursor c = {(const unsigned char *)payload.buf + offset, (const unsigned char *)payload.buf + payload.len};
    int collecting = PyGC_Disable(); /* as in plain_slices and run_records */
    for (Py_ssize_t n = 0; n < count; n++) {
        const unsigned char *start = c.p;
        PyObject *slice = NULL, *key = NULL;
        if (read_entry(layout, &c, r, f, p) < 0 || !(key = PyTuple_New(nkeys)))
            goto error;
        for (Py_ssize_t k = 0; k < nkeys; k++) {
            Py_ssize_t kid = layout->key_kid[k];
            PyObject *value = kid >= 0 && p[kid] ? p[kid] : Py_None;
            PyTuple_SET_ITEM(key, k, Py_NewRef(value));
        }
        slice = entry_slice(scan, r, f, key);
        clear_slots(r, R_COUNT_OF_FIELDS);
        clear_slots(f, F_COUNT_OF_FIELDS);
        clear_slots(p, layout->npartition);
        if (slice == Py_None) { /* not covered: its record, as decode() gives it, to `one` */
            Py_DECREF(slice);
            Cursor again = {start, c.end};
            PyObject *record = run(prog, &prog->nodes[0], &again);
            if (!record)
                goto error;
            if (again.p != c.p) {
                Py_DECREF(record);
                fail("plain_decode: an entry read to two different ends");
                goto error;
            }
            slice = call_one(one, record, collecting);
            Py_DECREF(record);
        }
        if (add_slice(out, slice) < 0)
            goto error;
    }
    if (collecting)
        PyGC_Enable();
    PyObject *result = Py_BuildValue("(Nn)", out, (Py_ssize_t)(c.p - (const unsigned char *)payload.buf));
    out = NULL;
    PyMem_Free(p);
    PyBuffer_Release(&payload);
    return result;
error:
    if (collecting)
        PyGC_Enable();
    clear_slots(r, R_COUNT_OF_FIELDS);
    clear_slots(f, F_COUNT_OF_FIELDS);
    clear_slots(p, layout->npartition);
    Py_CLEAR(out);
release:
    PyMem_Free(p);
    PyBuffer_Release(&payload);
    return out;
}

/* ---- module functions ---------------------------------------------------------------------- */

static PyObject *decode(PyObject *module, PyObject *args)
{
    Py_buffer payload;
    long long count;
    PyObject *prog;
    if (!PyArg_ParseTuple(args, "y*LO!:decode", &payload, &count, &ProgramType, &prog))
        return NULL;
    PyObject *out = run_records((Program *)prog, payload.buf, payload.len, count);
    PyBuffer_Release(&payload);
    return out;
}

#ifdef LW_ZLIB
typedef struct {
    unsigned char *data;
    size_t len, cap;
} Growing;

/* One buffer kept between calls (a manifest's records are a few hundred KB to a few MB: a fresh
 * one each call was page faults on every call). Taken while the GIL is held, so two threads
 * never share it: the second finds it taken and grows its own. */
static Growing scratch = {NULL, 0, 0};
#define SCRATCH_KEPT ((size_t)32 << 20)

static const char *grow(Growing *g, size_t need)
{
    if (need <= g->cap)
        return NULL;
    size_t cap = g->cap ? g->cap : 65536;
    while (cap < need) {
        if (cap > ((size_t)PY_SSIZE_T_MAX) / 2)
            return "an Avro container too large to decode";
        cap *= 2;
    }
    unsigned char *data = realloc(g->data, cap); /* not PyMem: called without the GIL */
    if (!data)
        return "out of memory inflating an Avro container";
    g->data = data;
    g->cap = cap;
    return NULL;
}

#ifdef LW_LIBDEFLATE
/* With libdeflate (-DLW_LIBDEFLATE): the same, a third faster on the small blocks manifests are
 * written in (pyiceberg writes one record per block, so setting up each block's Huffman tables is
 * most of the work): decompressed into the room left in g, retried with twice the room when it
 * does not fit. */
static const char *fast_inflate_into(struct libdeflate_decompressor *d, const unsigned char *in, int64_t n,
                                     Growing *g)
{
    const char *error;
    size_t want = (size_t)n * 4 + 4096;
    for (;;) {
        if (g->cap - g->len < want && (error = grow(g, g->len + want)))
            return error;
        size_t in_used, out_made;
        enum libdeflate_result status = libdeflate_deflate_decompress_ex(
            d, in, (size_t)n, g->data + g->len, g->cap - g->len, &in_used, &out_made);
        if (status == LIBDEFLATE_SUCCESS) {
            g->len += out_made;
            return NULL;
        }
        if (status != LIBDEFLATE_INSUFFICIENT_SPACE)
            return "an Avro block's deflate stream is corrupt or truncated";
        if (g->cap - g->len > ((size_t)PY_SSIZE_T_MAX) / 2)
            return "an Avro container too large to decode";
        want = (g->cap - g->len) * 2;
    }
}
#endif

/* What inflates a container's blocks: zlib's stream, or libdeflate's decompressor when built
 * with it (made per container: one allocation, no state kept between blocks). */
typedef struct {
    z_stream z;
#ifdef LW_LIBDEFLATE
    struct libdeflate_decompressor *fast;
#endif
} Inflater;

/* Appends the raw-deflate stream at in[0:n] to g, like zlib.decompress(in, -15): stops at the
 * stream's end (bytes after it are ignored) and fails on a stream that does not end. */
static const char *inflate_into(Inflater *inflater, const unsigned char *in, int64_t n, Growing *g)
{
#ifdef LW_LIBDEFLATE
    return fast_inflate_into(inflater->fast, in, n, g);
#else
    z_stream *z = &inflater->z;
    const char *error;
    if (inflateReset(z) != Z_OK)
        return "zlib could not reset its stream";
    z->next_in = (unsigned char *)in;
    z->avail_in = 0;
    for (;;) {
        if (z->avail_in == 0 && n > 0) {
            uInt chunk = n > (int64_t)UINT_MAX ? UINT_MAX : (uInt)n;
            z->avail_in = chunk;
            n -= chunk;
        }
        if (g->cap - g->len < 4096 && (error = grow(g, g->len + (g->len > 65536 ? g->len : 65536))))
            return error;
        size_t room = g->cap - g->len;
        z->next_out = g->data + g->len;
        z->avail_out = room > UINT_MAX ? UINT_MAX : (uInt)room;
        int status = inflate(z, Z_NO_FLUSH);
        g->len = (size_t)(z->next_out - g->data);
        if (status == Z_STREAM_END)
            return NULL;
        if (status == Z_BUF_ERROR && z->avail_in == 0 && n == 0)
            return "an Avro block's deflate stream is truncated";
        if (status != Z_OK && status != Z_BUF_ERROR)
            return "an Avro block's deflate stream is corrupt";
    }
#endif
}

/* The records of every block of c (decompressed when z is given) appended to g, their count
 * added to *total: NULL, or what is wrong. Runs without the GIL. */
static const char *join_blocks(Cursor *c, const unsigned char *sync, Inflater *z, Growing *g, int64_t *total)
{
    const char *error;
    while (c->p < c->end) {
        int64_t count, size;
        if ((error = varint(c, &count)) || (error = varint(c, &size)))
            return error;
        if (count < 0 || size < 0)
            return "an Avro block with a negative record count or size";
        if (size > c->end - c->p)
            return "truncated Avro container: a block runs past the end";
        const unsigned char *payload = c->p;
        c->p += size;
        if (c->end - c->p < 16 || memcmp(c->p, sync, 16) != 0)
            return "an Avro block does not end with the file's sync marker";
        c->p += 16;
        if (count > INT64_MAX - *total)
            return "an Avro container with too many records";
        *total += count;
        if (z) {
            if ((error = inflate_into(z, payload, size, g)))
                return error;
        }
        else {
            if ((error = grow(g, g->len + (size_t)size + 1)))
                return error;
            memcpy(g->data + g->len, payload, (size_t)size);
            g->len += (size_t)size;
        }
    }
    return NULL;
}

/* Keeps `joined` as the scratch buffer when none is kept and it is not too large, else frees it
 * (with the GIL held, like every use of `scratch`). */
static void give_back(Growing *joined)
{
    if (!scratch.data && joined->cap <= SCRATCH_KEPT)
        scratch = *joined;
    else
        free(joined->data);
}

/* Joins the blocks of the container `data` (first block at data[offset:]) into *joined (taken
 * from `scratch` when free), inflating them when `deflate`, without the GIL; sets *total to the
 * number of records. Returns 0 (the caller gives *joined back with give_back()), or -1 with
 * ValueError set and *joined already given back. */
static int join_container_into(Py_buffer *data, Py_ssize_t offset, Py_buffer *sync, int deflate,
                               Growing *joined, int64_t *total)
{
    const char *error = NULL;
    Inflater z;
    if (sync->len != 16 || offset < 0 || offset > data->len) {
        fail("join_container needs a 16-byte sync marker and an offset inside the data");
        return -1;
    }
    *joined = scratch; /* take the kept buffer, or an empty one when another call has it */
    scratch.data = NULL;
    scratch.cap = 0;
    joined->len = 0;
    *total = 0;
    Cursor c = {(const unsigned char *)data->buf + offset, (const unsigned char *)data->buf + data->len};
    memset(&z, 0, sizeof z);
    Py_BEGIN_ALLOW_THREADS
#ifdef LW_LIBDEFLATE
    if (deflate && !(z.fast = libdeflate_alloc_decompressor()))
        error = "out of memory inflating an Avro container";
    else
        error = join_blocks(&c, sync->buf, deflate ? &z : NULL, joined, total);
    if (z.fast)
        libdeflate_free_decompressor(z.fast);
#else
    if (deflate && inflateInit2(&z.z, -15) != Z_OK)
        error = "zlib could not start a raw deflate stream";
    else
        error = join_blocks(&c, sync->buf, deflate ? &z : NULL, joined, total);
    if (deflate)
        inflateEnd(&z.z);
#endif
    Py_END_ALLOW_THREADS
    if (error) {
        give_back(joined); /* kept for the next call, as on success */
        fail(error);
        return -1;
    }
    return 0;
}

#endif

/* join_container(data, offset, sync, deflate) -> (payload, count): the records of every block
 * of the container joined into one bytes object (inflated when deflate), for decode(payload,
 * count, program) later, possibly on another thread. The framing and inflating run without the
 * GIL: a read-ahead thread joins the next manifest while the listing decodes this one. */
static PyObject *join_container(PyObject *module, PyObject *args)
{
#ifndef LW_ZLIB
    PyErr_SetString(PyExc_RuntimeError, "built without zlib: use decode()");
    return NULL;
#else
    Py_buffer data, sync;
    Py_ssize_t offset;
    int deflate;
    PyObject *out = NULL;
    Growing joined;
    int64_t total;
    if (!PyArg_ParseTuple(args, "y*ny*p:join_container", &data, &offset, &sync, &deflate))
        return NULL;
    if (join_container_into(&data, offset, &sync, deflate, &joined, &total) == 0) {
        PyObject *payload = PyBytes_FromStringAndSize((const char *)joined.data, (Py_ssize_t)joined.len);
        give_back(&joined);
        if (payload) {
            out = Py_BuildValue("(NL)", payload, (long long)total);
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&sync);
    return out;
#endif
}

/* The dict of a map kept "raw" (see run_raw), as decoding it unkept gives it; ValueError for a
 * blob that is malformed, truncated or followed by more bytes. */
static PyObject *parse_raw(PyObject *raw, int op)
{
    static const Node bytes_map = {OP_INT_BYTES_MAP, 1, 0, 0, 0, 0, 0};
    static const Node long_map = {OP_INT_LONG_MAP, 1, 0, 0, 0, 0, 0};
    Py_buffer view;
    const unsigned char *buf;
    Py_ssize_t len;
    if (PyBytes_CheckExact(raw)) { /* the common case: no buffer to take and release */
        buf = (const unsigned char *)PyBytes_AS_STRING(raw);
        len = PyBytes_GET_SIZE(raw);
        view.obj = NULL;
    }
    else {
        if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        buf = view.buf;
        len = view.len;
    }
    Cursor c = {buf, buf + len};
    PyObject *out = run_iceberg_block(op == OP_INT_BYTES_MAP ? &bytes_map : &long_map, &c);
    if (out && c.p != c.end) {
        Py_CLEAR(out);
        fail("malformed raw map: bytes after its closing block");
    }
    if (view.obj)
        PyBuffer_Release(&view);
    return out;
}

static PyObject *int_bytes_map(PyObject *module, PyObject *raw)
{
    return parse_raw(raw, OP_INT_BYTES_MAP);
}

static PyObject *int_long_map(PyObject *module, PyObject *raw)
{
    return parse_raw(raw, OP_INT_LONG_MAP);
}

/* ---- bound checks on raw maps --------------------------------------------------------------
 *
 * reject_bounds(lower, upper, clauses) -> bool: whether an entry's raw lower/upper bounds maps
 * (int -> bytes, kept "raw"; None when absent) prove that no value of the file can satisfy one of
 * `clauses`, each (field id, kind, op, literal): kind 0 compares Iceberg's little-endian signed
 * integers (int, long, date, timestamps: any width 1..8) with an int literal, kind 1 bytes as
 * unsigned strings (binary) with a bytes literal, kind 2 too but only bounds that are valid UTF-8
 * (strings: UTF-8's byte order is code point order); op 0..4 is = < <= > >=.
 * A bound that is absent or cannot be read is unknown and rejects nothing, so the answer is
 * conservative like _prune.stats_check, whose per-entry Python it replaces for these clauses
 * (no dict of every column's bounds is built). ValueError for a malformed map, as int_bytes_map. */
#define MAX_CLAUSES 16
enum { KIND_INT, KIND_BYTES, KIND_STRING };
enum { CMP_EQ, CMP_LT, CMP_LE, CMP_GT, CMP_GE };

typedef struct {
    int64_t field;
    int kind;
    int op;
    int64_t number;
    const unsigned char *bytes;
    Py_ssize_t nbytes;
} Clause;

/* Where each clause's field's value is in the raw map (at[i] NULL when absent; the last one
 * wins, as in the dict int_bytes_map gives). */
static int find_bounds_in(const unsigned char *buf, Py_ssize_t size, const Clause *clauses, Py_ssize_t n,
                          const unsigned char **at, Py_ssize_t *len)
{
    for (Py_ssize_t i = 0; i < n; i++)
        at[i] = NULL;
    if (!buf) /* no map */
        return 0;
    Cursor c = {buf, buf + size};
    int64_t count, key;
    for (;;) {
        if (read_count(&c, 2, &count) < 0)
            return -1;
        if (count == 0)
            break;
        for (int64_t k = 0; k < count; k++) {
            const unsigned char *s;
            Py_ssize_t length;
            if (read_long(&c, &key) < 0 || read_span(&c, &s, &length) < 0)
                return -1;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (clauses[i].field == key) {
                    at[i] = s;
                    len[i] = length;
                }
            }
        }
    }
    if (c.p != c.end)
        return failed("malformed raw map: bytes after its closing block");
    return 0;
}

static int find_bounds(PyObject *raw, const Clause *clauses, Py_ssize_t n, const unsigned char **at,
                       Py_ssize_t *len)
{
    if (raw == Py_None)
        return find_bounds_in(NULL, 0, clauses, n, at, len);
    if (!PyBytes_CheckExact(raw)) {
        PyErr_SetString(PyExc_TypeError, "reject_bounds: a raw bounds map must be bytes or None");
        return -1;
    }
    return find_bounds_in((const unsigned char *)PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), clauses, n, at,
                          len);
}

/* Whether s[0:n] is UTF-8 as Python's strict decoder takes it (no overlong forms, surrogates
 * or code points past U+10FFFF): a string bound that is not reads as unknown in Python. */
static int valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (uint64_t word; i + 8 <= n; i += 8) { /* ASCII (most paths and names) eight bytes at a time */
        memcpy(&word, s + i, 8);
        if (word & 0x8080808080808080ULL)
            break;
    }
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t more;
        unsigned char low = 0x80, high = 0xBF; /* the range of the first continuation byte */
        if (b >= 0xC2 && b <= 0xDF)
            more = 1;
        else if (b >= 0xE0 && b <= 0xEF) {
            more = 2;
            if (b == 0xE0)
                low = 0xA0;
            else if (b == 0xED)
                high = 0x9F;
        }
        else if (b >= 0xF0 && b <= 0xF4) {
            more = 3;
            if (b == 0xF0)
                low = 0x90;
            else if (b == 0xF4)
                high = 0x8F;
        }
        else
            return 0;
        if (n - i <= more || s[i + 1] < low || s[i + 1] > high)
            return 0;
        for (Py_ssize_t k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* -1, 0 or 1 as the bound compares with the clause's literal; 2 when there is no bound, 3 when
 * it cannot be read (then neither bound of the column counts, as in _prune.stats_check). */
static int compare_bound(const Clause *clause, const unsigned char *s, Py_ssize_t n)
{
    if (!s)
        return 2;
    if (clause->kind == KIND_STRING && !valid_utf8(s, n))
        return 3;
    if (clause->kind == KIND_INT) {
        if (n < 1 || n > 8)
            return 3;
        uint64_t v = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            v |= (uint64_t)s[i] << (8 * i);
        if (n < 8 && (s[n - 1] & 0x80))
            v |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        int64_t bound = (int64_t)v;
        return bound < clause->number ? -1 : bound > clause->number;
    }
    Py_ssize_t common = n < clause->nbytes ? n : clause->nbytes;
    int order = common ? memcmp(s, clause->bytes, (size_t)common) : 0;
    if (order)
        return order < 0 ? -1 : 1;
    return n < clause->nbytes ? -1 : n > clause->nbytes;
}

static int clause_rejects(const Clause *clause, int low, int high)
{
    switch (clause->op) {
    case CMP_EQ:
        return (low != 2 && low > 0) || (high != 2 && high < 0);
    case CMP_LT:
        return low != 2 && low >= 0;
    case CMP_LE:
        return low != 2 && low > 0;
    case CMP_GT:
        return high != 2 && high <= 0;
    default: /* CMP_GE */
        return high != 2 && high < 0;
    }
}

/* Whether one of the n clauses is proven false by the bounds found for it (find_bounds_in). */
static int bounds_reject(const Clause *clauses, Py_ssize_t n, const unsigned char **low_at, const Py_ssize_t *low_len,
                         const unsigned char **high_at, const Py_ssize_t *high_len)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int low = compare_bound(&clauses[i], low_at[i], low_len[i]);
        int high = compare_bound(&clauses[i], high_at[i], high_len[i]);
        if (low != 3 && high != 3 && clause_rejects(&clauses[i], low, high))
            return 1;
    }
    return 0;
}

static int load_clauses(PyObject *spec, Clause *clauses, Py_ssize_t *n)
{
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) > MAX_CLAUSES)
        return failed("reject_bounds: clauses must be a tuple of at most 16 clauses");
    *n = PyTuple_GET_SIZE(spec);
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *item = PyTuple_GET_ITEM(spec, i);
        Clause *clause = &clauses[i];
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4)
            return failed("reject_bounds: a clause is (field id, kind, op, literal)");
        long kind, op;
        clause->field = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        op = PyLong_AsLong(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred())
            return -1;
        if ((kind != KIND_INT && kind != KIND_BYTES && kind != KIND_STRING) || op < CMP_EQ || op > CMP_GE)
            return failed("reject_bounds: unknown clause kind or op");
        clause->kind = (int)kind;
        clause->op = (int)op;
        PyObject *literal = PyTuple_GET_ITEM(item, 3);
        if (kind == KIND_INT) {
            if (!PyLong_CheckExact(literal))
                return failed("reject_bounds: an int clause needs an int literal");
            clause->number = PyLong_AsLongLong(literal);
            if (clause->number == -1 && PyErr_Occurred())
                return -1;
        }
        else {
            if (!PyBytes_CheckExact(literal))
                return failed("reject_bounds: a bytes clause needs a bytes literal");
            clause->bytes = (const unsigned char *)PyBytes_AS_STRING(literal);
            clause->nbytes = PyBytes_GET_SIZE(literal);
        }
    }
    return 0;
}

static PyObject *reject_bounds(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Clause clauses[MAX_CLAUSES];
    const unsigned char *low_at[MAX_CLAUSES], *high_at[MAX_CLAUSES];
    Py_ssize_t low_len[MAX_CLAUSES], high_len[MAX_CLAUSES], n;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "reject_bounds(lower, upper, clauses) takes 3 arguments");
        return NULL;
    }
    if (load_clauses(args[2], clauses, &n) < 0 || find_bounds(args[0], clauses, n, low_at, low_len) < 0 ||
        find_bounds(args[1], clauses, n, high_at, high_len) < 0)
        return NULL;
    return PyBool_FromLong(bounds_reject(clauses, n, low_at, low_len, high_at, high_len));
}

/* ---- filtered decoding ---------------------------------------------------------------------
 *
 * decode_filtered(payload, count, program, filter) -> list: the records decode() gives, less the
 * ones `filter` proves a listing drops, which are read through (checked as decode checks them:
 * the same errors for a malformed record) without building anything. A listing with a filter
 * keeps a few of a manifest's entries; building every entry's dicts only to drop them was most
 * of such a listing (see _manifests.EntryFilter, which builds `filter` and whose rules these are).
 *
 * filter = (probes, verdicts, partition_rejects, clauses):
 * - probes: the program's node index of each entry's status, data_file content, partition,
 *   lower_bounds and upper_bounds (the value node, under a nullable field's union), -1 when the
 *   schema lacks it; status must be a long node, partition a record, the bounds raw int->bytes maps;
 * - an entry whose status is 2 (deleted) is dropped;
 * - partition_rejects(partition) -> bool, or None: called with the entry's partition as decode
 *   gives it; its verdict is kept in the dict `verdicts` by the partition's encoded bytes (the
 *   caller keeps one dict per writer schema and filter; cleared past 4096 keys);
 * - clauses: reject_bounds's clauses, or None: a data entry (content 0 or absent) whose bounds
 *   reject them is dropped; bounds that cannot be read drop nothing (the entry is decoded, and
 *   the listing's own check reports them). */
enum { PROBE_STATUS, PROBE_CONTENT, PROBE_PARTITION, PROBE_LOWER, PROBE_UPPER, PROBES };

typedef struct {
    const unsigned char *at; /* NULL: not in this entry (a null, or a field the schema lacks) */
    Py_ssize_t len;
} Span;

typedef struct {
    const Program *prog;
    signed char *slot_of; /* per node: its probe, or -1 */
    Span spans[PROBES];
} Skim;

/* The items of an Iceberg int-keyed block array (or int array), read through. */
static int skim_block(int op, Cursor *c)
{
    int is_list = op == OP_INT_ARRAY;
    int64_t count;
    const unsigned char *s;
    Py_ssize_t n;
    for (;;) {
        if (read_count(c, is_list ? 1 : 2, &count) < 0)
            return -1;
        if (count == 0)
            return 0;
        if (op == OP_INT_BYTES_MAP || op == OP_RAW_INT_BYTES_MAP) {
            for (int64_t i = 0; i < count; i++)
                if (skip_long(c) < 0 || read_span(c, &s, &n) < 0)
                    return -1;
        }
        else if (skip_longs(c, op == OP_INT_ARRAY ? count : 2 * count) < 0) /* keys and values */
            return -1;
    }
}

/* One value of node read through as run() reads it (what run() would reject fails here too:
 * kept strings and map keys must be UTF-8), recording the span of each probed node. */
static int skim(Skim *k, const Node *node, Cursor *c)
{
    const Program *prog = k->prog;
    const unsigned char *start = c->p, *s;
    Py_ssize_t n;
    int64_t number;
    switch (node->op) {
    case OP_NULL:
        break;
    case OP_BOOLEAN:
        if (take(c, 1, &s) < 0)
            return -1;
        break;
    case OP_LONG:
        if (skip_long(c) < 0)
            return -1;
        break;
    case OP_FLOAT:
        if (take(c, 4, &s) < 0)
            return -1;
        break;
    case OP_DOUBLE:
        if (take(c, 8, &s) < 0)
            return -1;
        break;
    case OP_BYTES:
        if (read_span(c, &s, &n) < 0)
            return -1;
        break;
    case OP_STRING:
        if (read_span(c, &s, &n) < 0)
            return -1;
        if (node->keep && !valid_utf8(s, n))
            return failed("malformed Avro data: a string that is not UTF-8");
        break;
    case OP_FIXED:
        if (take(c, node->size, &s) < 0)
            return -1;
        break;
    case OP_RECORD:
        for (Py_ssize_t i = 0; i < node->nkids; i++)
            if (skim(k, &prog->nodes[prog->kids[node->first + i]], c) < 0)
                return -1;
        break;
    case OP_NULL_FIRST:
    case OP_NULL_SECOND:
    case OP_UNION: {
        Py_ssize_t kid = -1;
        if (read_long(c, &number) < 0)
            return -1;
        if (node->op == OP_UNION) {
            if (number < 0 || number >= node->nkids)
                return failed("malformed Avro data: a union branch index out of range");
            kid = (Py_ssize_t)number;
        }
        else if (number != 0 && number != 1)
            return failed("malformed Avro data: a union branch index out of range");
        else if ((node->op == OP_NULL_FIRST) == (number == 1))
            kid = 0;
        if (kid >= 0 && skim(k, &prog->nodes[prog->kids[node->first + kid]], c) < 0)
            return -1;
        break;
    }
    case OP_ARRAY:
    case OP_MAP: {
        const Node *item = &prog->nodes[prog->kids[node->first]];
        int is_map = node->op == OP_MAP;
        int64_t count;
        for (;;) {
            if (read_count(c, is_map + item->minsize, &count) < 0)
                return -1;
            if (count == 0)
                break;
            for (int64_t i = 0; i < count; i++) {
                if (is_map) { /* keys are decoded even when the map is skipped (see run_map) */
                    if (read_span(c, &s, &n) < 0)
                        return -1;
                    if (!valid_utf8(s, n))
                        return failed("malformed Avro data: a map key that is not UTF-8");
                }
                if (skim(k, item, c) < 0)
                    return -1;
            }
        }
        break;
    }
    default: /* the Iceberg block ops and the raw maps (checked by Program) */
        if (skim_block(node->op, c) < 0)
            return -1;
    }
    signed char slot = k->slot_of[node - prog->nodes];
    if (slot >= 0) {
        k->spans[slot].at = start;
        k->spans[slot].len = c->p - start;
    }
    return 0;
}

/* The long at a probed span (the default when the entry has none). */
static int64_t span_long(const Span *span, int64_t otherwise)
{
    int64_t value;
    Cursor c = {span->at, span->at + span->len};
    if (!span->at || varint(&c, &value))
        return otherwise;
    return value;
}

typedef struct {
    PyObject *verdicts, *partition_rejects;
    Py_ssize_t partition_node;
    Clause clauses[MAX_CLAUSES];
    Py_ssize_t nclauses; /* -1: no clauses */
} EntryFilter;

/* 1 when the partition encoded at at[0:len] (`key`: those bytes, a new reference when NULL is
 * given: made here) is rejected by the filter, 0 when not, -1 on error. The verdict is kept in
 * the filter's dict by the encoded bytes. */
static int partition_rejected(const Program *prog, const EntryFilter *f, PyObject *key, const unsigned char *at,
                              Py_ssize_t len, int *collecting)
{
    int own = key == NULL;
    if (own && !(key = PyBytes_FromStringAndSize((const char *)at, len)))
        return -1;
    int result = -1;
    PyObject *verdict = PyDict_GetItemWithError(f->verdicts, key); /* borrowed */
    if (!verdict) {
        if (PyErr_Occurred())
            goto done;
        Cursor pc = {at, at + len};
        PyObject *values = run(prog, &prog->nodes[f->partition_node], &pc);
        if (values && *collecting) /* Python code runs: let the collector run too */
            PyGC_Enable();
        verdict = values ? PyObject_CallOneArg(f->partition_rejects, values) : NULL;
        if (*collecting)
            PyGC_Disable();
        Py_XDECREF(values);
        int truth = verdict ? PyObject_IsTrue(verdict) : -1;
        Py_XDECREF(verdict);
        if (truth < 0)
            goto done;
        if (PyDict_GET_SIZE(f->verdicts) > 4096)
            PyDict_Clear(f->verdicts);
        verdict = truth ? Py_True : Py_False;
        if (PyDict_SetItem(f->verdicts, key, verdict) < 0)
            goto done;
    }
    result = verdict == Py_True;
done:
    if (own)
        Py_DECREF(key);
    return result;
}

/* Whether a data entry's bounds reject the filter's clauses (1), or not (0): bounds that cannot
 * be read reject nothing (the entry is decoded, and the listing's own check reports them). Sets
 * no Python error, so it runs without the GIL too. */
static int entry_bounds_reject(const EntryFilter *f, const Span *spans)
{
    if (f->nclauses <= 0 || span_long(&spans[PROBE_CONTENT], 0) != 0)
        return 0;
    const unsigned char *low_at[MAX_CLAUSES], *high_at[MAX_CLAUSES];
    Py_ssize_t low_len[MAX_CLAUSES], high_len[MAX_CLAUSES];
    const Span *low = &spans[PROBE_LOWER], *high = &spans[PROBE_UPPER];
    int quiet = quiet_failures;
    quiet_failures = 1;
    int unreadable = find_bounds_in(low->at, low->len, f->clauses, f->nclauses, low_at, low_len) < 0 ||
                     find_bounds_in(high->at, high->len, f->clauses, f->nclauses, high_at, high_len) < 0;
    quiet_failures = quiet;
    return unreadable ? 0 : bounds_reject(f->clauses, f->nclauses, low_at, low_len, high_at, high_len);
}

/* 1 when the skimmed entry is dropped, 0 when it is decoded, -1 on error. */
static int drops(const Program *prog, const EntryFilter *f, const Span *spans, int *collecting)
{
    if (span_long(&spans[PROBE_STATUS], 0) == 2)
        return 1;
    const Span *part = &spans[PROBE_PARTITION];
    if (f->partition_rejects != Py_None && part->at) {
        int rejected = partition_rejected(prog, f, NULL, part->at, part->len, collecting);
        if (rejected != 0)
            return rejected;
    }
    return entry_bounds_reject(f, spans);
}

static const int PROBE_OPS[PROBES] = {OP_LONG, OP_LONG, OP_RECORD, OP_RAW_INT_BYTES_MAP, OP_RAW_INT_BYTES_MAP};

static int load_filter(PyObject *spec, const Program *prog, EntryFilter *f, signed char *slot_of)
{
    PyObject *probes;
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 4)
        return failed("decode_filtered: filter is (probes, verdicts, partition_rejects, clauses)");
    probes = PyTuple_GET_ITEM(spec, 0);
    f->verdicts = PyTuple_GET_ITEM(spec, 1);
    f->partition_rejects = PyTuple_GET_ITEM(spec, 2);
    if (!PyTuple_CheckExact(probes) || PyTuple_GET_SIZE(probes) != PROBES || !PyDict_CheckExact(f->verdicts) ||
        (f->partition_rejects != Py_None && !PyCallable_Check(f->partition_rejects)))
        return failed("decode_filtered: probes must be 5 node indices, verdicts a dict");
    memset(slot_of, -1, (size_t)prog->nnodes);
    f->partition_node = -1;
    for (int i = 0; i < PROBES; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(probes, i));
        if (at == -1 && PyErr_Occurred())
            return -1;
        if (at < 0)
            continue;
        if (at >= prog->nnodes || prog->nodes[at].op != PROBE_OPS[i] || slot_of[at] >= 0)
            return failed("decode_filtered: a probe is not a node of the expected kind");
        slot_of[at] = (signed char)i;
        if (i == PROBE_PARTITION)
            f->partition_node = at;
    }
    if (f->partition_rejects != Py_None && f->partition_node < 0)
        return failed("decode_filtered: a partition check without a partition probe");
    f->nclauses = -1;
    PyObject *clauses = PyTuple_GET_ITEM(spec, 3);
    if (clauses != Py_None && load_clauses(clauses, f->clauses, &f->nclauses) < 0)
        return -1;
    return 0;
}

/* Appends the record of the program's root read at `entry` to `out`: 0, or -1 on error. */
static int append_record(PyObject *out, const Program *prog, Cursor *entry)
{
    PyObject *record = run(prog, &prog->nodes[0], entry);
    if (!record || PyList_Append(out, record) < 0) {
        Py_XDECREF(record);
        return -1;
    }
    Py_DECREF(record);
    return 0;
}

static PyObject *decode_filtered(PyObject *module, PyObject *args)
{
    Py_buffer payload;
    long long count;
    PyObject *prog_, *spec, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*LO!O:decode_filtered", &payload, &count, &ProgramType, &prog_, &spec))
        return NULL;
    const Program *prog = (const Program *)prog_;
    const Node *root = &prog->nodes[0];
    EntryFilter f;
    Skim k = {prog, NULL, {{NULL, 0}}};
    if (!(k.slot_of = PyMem_Malloc((size_t)prog->nnodes))) {
        PyErr_NoMemory();
        goto done;
    }
    if (load_filter(spec, prog, &f, k.slot_of) < 0)
        goto done;
    if (count < 0 || (root->minsize > 0 ? count > payload.len / root->minsize : count > MAX_ZERO_SIZE_ITEMS)) {
        fail("malformed Avro data: more records than the data can hold");
        goto done;
    }
    if (!(out = PyList_New(0)))
        goto done;
    Cursor c = {payload.buf, (const unsigned char *)payload.buf + payload.len};
    int collecting = PyGC_Disable(); /* as in run_records */
    for (long long i = 0; i < count; i++) {
        const unsigned char *start = c.p;
        memset(k.spans, 0, sizeof k.spans);
        int dropped = skim(&k, root, &c) < 0 ? -1 : drops(prog, &f, k.spans, &collecting);
        if (dropped == 1)
            continue;
        Cursor entry = {start, c.p};
        if (dropped < 0 || append_record(out, prog, &entry) < 0) {
            Py_CLEAR(out);
            break;
        }
    }
    if (collecting)
        PyGC_Enable();
done:
    PyMem_Free(k.slot_of);
    PyBuffer_Release(&payload);
    return out;
}

/* ---- filtered decoding in two halves ----------------------------------------------------------
 *
 * skim_entries(payload, count, program, filter) -> (kept, partitions) | None: the first half of
 * decode_filtered, run without the GIL (a listing's read-ahead thread skims the next manifest
 * while the consumer decodes this one): every entry read through, the deleted ones and those
 * the clauses' bounds reject left out. `kept` packs each other entry as a SkimmedEntry (where it
 * is in the payload and its partition's index); `partitions` holds each distinct encoded
 * partition once. None when the payload is malformed: decode_filtered, with the GIL, reports it.
 *
 * decode_skimmed(payload, kept, partitions, program, filter) -> list: the second half, with the
 * GIL: one verdict per distinct partition (partition_rejects, kept in `verdicts` as
 * decode_filtered keeps them), then the entries left decoded. The same records as
 * decode_filtered(payload, count, program, filter). */
typedef struct {
    int64_t start, end; /* the entry's bytes in the payload */
    int64_t partition;  /* index into partitions; -1: no partition probed */
} SkimmedEntry;

typedef struct {
    const unsigned char *at;
    Py_ssize_t len;
    uint64_t hash;
    int64_t index;
} PartitionSlot;

typedef struct {
    PartitionSlot *slots; /* open addressing, capacity a power of two */
    size_t capacity, used;
    Span *distinct; /* in order of first appearance */
} Partitions;

static uint64_t span_hash(const unsigned char *at, Py_ssize_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < len; i++)
        h = (h ^ at[i]) * 1099511628211ULL;
    return h;
}

static int partitions_grow(Partitions *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 64;
    PartitionSlot *slots = PyMem_RawCalloc(capacity, sizeof *slots);
    Span *distinct = PyMem_RawRealloc(t->distinct, capacity / 2 * sizeof *distinct);
    if (!slots || !distinct) {
        PyMem_RawFree(slots);
        if (distinct)
            t->distinct = distinct;
        return -1;
    }
    t->distinct = distinct;
    for (size_t i = 0; i < t->capacity; i++) {
        PartitionSlot *old = &t->slots[i];
        if (!old->at)
            continue;
        size_t j = old->hash & (capacity - 1);
        while (slots[j].at)
            j = (j + 1) & (capacity - 1);
        slots[j] = *old;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* The index of the partition encoded at at[0:len], added when new; -1 when out of memory. */
static int64_t partition_index(Partitions *t, const unsigned char *at, Py_ssize_t len)
{
    if ((t->used + 1) * 2 > t->capacity && partitions_grow(t) < 0)
        return -1;
    uint64_t hash = span_hash(at, len);
    size_t j = hash & (t->capacity - 1);
    while (t->slots[j].at) {
        PartitionSlot *slot = &t->slots[j];
        if (slot->hash == hash && slot->len == len && !memcmp(slot->at, at, (size_t)len))
            return slot->index;
        j = (j + 1) & (t->capacity - 1);
    }
    t->slots[j] = (PartitionSlot){at ? at : (const unsigned char *)"", len, hash, (int64_t)t->used};
    t->distinct[t->used].at = at;
    t->distinct[t->used].len = len;
    return (int64_t)t->used++;
}

/* Skims `count` entries of buf[0:len] into out (kept entries; *kept their number) and parts:
 * 0, -1 for malformed data, -2 out of memory. Touches no Python object. */
static int skim_kept(Skim *k, const EntryFilter *f, const unsigned char *buf, Py_ssize_t len, long long count,
                     SkimmedEntry *out, Py_ssize_t *kept, Partitions *parts)
{
    Cursor c = {buf, buf + len};
    const Node *root = &k->prog->nodes[0];
    int with_partitions = f->partition_rejects != Py_None;
    *kept = 0;
    for (long long i = 0; i < count; i++) {
        const unsigned char *start = c.p;
        memset(k->spans, 0, sizeof k->spans);
        if (skim(k, root, &c) < 0)
            return -1;
        if (span_long(&k->spans[PROBE_STATUS], 0) == 2 || entry_bounds_reject(f, k->spans))
            continue;
        const Span *part = &k->spans[PROBE_PARTITION];
        int64_t index = -1;
        if (with_partitions && part->at && (index = partition_index(parts, part->at, part->len)) < 0)
            return -2;
        out[*kept] = (SkimmedEntry){start - buf, c.p - buf, index};
        ++*kept;
    }
    return 0;
}

static PyObject *skim_entries(PyObject *module, PyObject *args)
{
    Py_buffer payload;
    long long count;
    PyObject *prog_, *spec, *kept_bytes = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LO!O:skim_entries", &payload, &count, &ProgramType, &prog_, &spec))
        return NULL;
    const Program *prog = (const Program *)prog_;
    EntryFilter f;
    Skim k = {prog, NULL, {{NULL, 0}}};
    Partitions parts = {NULL, 0, 0, NULL};
    Py_ssize_t kept = 0;
    int status;
    if (!(k.slot_of = PyMem_Malloc((size_t)prog->nnodes))) {
        PyErr_NoMemory();
        goto done;
    }
    if (load_filter(spec, prog, &f, k.slot_of) < 0)
        goto done;
    Py_ssize_t minsize = prog->nodes[0].minsize;
    if (count < 0 || (minsize > 0 ? count > payload.len / minsize : count > MAX_ZERO_SIZE_ITEMS)) {
        result = Py_NewRef(Py_None); /* decode_filtered reports it */
        goto done;
    }
    if ((unsigned long long)count > (unsigned long long)(PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(SkimmedEntry))) {
        PyErr_NoMemory(); /* only where Py_ssize_t is narrower than the count */
        goto done;
    }
    if (!(kept_bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * (long long)sizeof(SkimmedEntry)))))
        goto done;
    SkimmedEntry *out = (SkimmedEntry *)PyBytes_AS_STRING(kept_bytes);
    Py_BEGIN_ALLOW_THREADS
    quiet_failures = 1;
    status = skim_kept(&k, &f, payload.buf, payload.len, count, out, &kept, &parts);
    quiet_failures = 0;
    Py_END_ALLOW_THREADS
    if (status == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (status < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (_PyBytes_Resize(&kept_bytes, kept * (Py_ssize_t)sizeof(SkimmedEntry)) < 0)
        goto done;
    PyObject *distinct = PyTuple_New((Py_ssize_t)parts.used);
    if (!distinct)
        goto done;
    for (size_t i = 0; i < parts.used; i++) {
        PyObject *item = PyBytes_FromStringAndSize((const char *)parts.distinct[i].at, parts.distinct[i].len);
        if (!item) {
            Py_DECREF(distinct);
            goto done;
        }
        PyTuple_SET_ITEM(distinct, (Py_ssize_t)i, item);
    }
    result = PyTuple_Pack(2, kept_bytes, distinct);
    Py_DECREF(distinct);
done:
    Py_XDECREF(kept_bytes);
    PyMem_RawFree(parts.slots);
    PyMem_RawFree(parts.distinct);
    PyMem_Free(k.slot_of);
    PyBuffer_Release(&payload);
    return result;
}

/* Per distinct partition, whether the filter rejects it (a new array, NULL on error). */
static char *rejected_partitions(const Program *prog, const EntryFilter *f, PyObject *partitions)
{
    Py_ssize_t n = PyTuple_GET_SIZE(partitions);
    char *rejected = PyMem_Calloc((size_t)n + 1, 1);
    if (!rejected) {
        PyErr_NoMemory();
        return NULL;
    }
    int collecting = PyGC_Disable();
    for (Py_ssize_t i = 0; i < n && f->partition_rejects != Py_None; i++) {
        PyObject *key = PyTuple_GET_ITEM(partitions, i);
        if (!PyBytes_CheckExact(key)) {
            failed("decode_skimmed: partitions must be bytes");
            goto error;
        }
        int verdict = partition_rejected(prog, f, key, (const unsigned char *)PyBytes_AS_STRING(key),
                                         PyBytes_GET_SIZE(key), &collecting);
        if (verdict < 0)
            goto error;
        rejected[i] = (char)verdict;
    }
    if (collecting)
        PyGC_Enable();
    return rejected;
error:
    if (collecting)
        PyGC_Enable();
    PyMem_Free(rejected);
    return NULL;
}

static PyObject *decode_skimmed(PyObject *module, PyObject *args)
{
    Py_buffer payload, kept;
    PyObject *partitions, *prog_, *spec, *out = NULL;
    char *rejected = NULL;
    PyObject *kept_bytes;
    if (!PyArg_ParseTuple(args, "y*O!O!O!O:decode_skimmed", &payload, &PyBytes_Type, &kept_bytes, &PyTuple_Type,
                          &partitions, &ProgramType, &prog_, &spec))
        return NULL;
    /* bytes (what skim_entries gives): its data is aligned for reading SkimmedEntry in place */
    if (PyObject_GetBuffer(kept_bytes, &kept, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    const Program *prog = (const Program *)prog_;
    EntryFilter f;
    signed char *slot_of = PyMem_Malloc((size_t)prog->nnodes);
    if (!slot_of) {
        PyErr_NoMemory();
        goto done;
    }
    if (load_filter(spec, prog, &f, slot_of) < 0 || !(rejected = rejected_partitions(prog, &f, partitions)))
        goto done;
    if (kept.len % (Py_ssize_t)sizeof(SkimmedEntry)) {
        failed("decode_skimmed: kept is not whole entries");
        goto done;
    }
    const SkimmedEntry *entries = kept.buf;
    Py_ssize_t n = kept.len / (Py_ssize_t)sizeof(SkimmedEntry), nparts = PyTuple_GET_SIZE(partitions);
    if (!(out = PyList_New(0)))
        goto done;
    int collecting = PyGC_Disable(); /* as in run_records */
    for (Py_ssize_t i = 0; i < n; i++) {
        const SkimmedEntry *e = &entries[i];
        if (e->start < 0 || e->start > e->end || e->end > payload.len || e->partition < -1 ||
            e->partition >= nparts) {
            failed("decode_skimmed: an entry outside the payload or its partitions");
            Py_CLEAR(out);
            break;
        }
        if (e->partition >= 0 && rejected[e->partition])
            continue;
        Cursor entry = {(const unsigned char *)payload.buf + e->start, (const unsigned char *)payload.buf + e->end};
        if (append_record(out, prog, &entry) < 0) {
            Py_CLEAR(out);
            break;
        }
    }
    if (collecting)
        PyGC_Enable();
done:
    PyMem_Free(rejected);
    PyMem_Free(slot_of);
    PyBuffer_Release(&kept);
    PyBuffer_Release(&payload);
    return out;
}

static PyMethodDef methods[] = {
    {"int_bytes_map", int_bytes_map, METH_O,
     "int_bytes_map(raw) -> dict: the int -> bytes map whose encoded blocks (kept \"raw\") are `raw`."},
    {"int_long_map", int_long_map, METH_O,
     "int_long_map(raw) -> dict: the int -> long map whose encoded blocks (kept \"raw\") are `raw`."},
    {"reject_bounds", (PyCFunction)(void (*)(void))reject_bounds, METH_FASTCALL,
     "reject_bounds(lower, upper, clauses) -> bool: whether raw bounds maps prove no value can\n"
     "satisfy one of the clauses ((field id, kind, op, literal); see _prune.native_clauses)."},
    {"plain_data_file", (PyCFunction)(void (*)(void))plain_data_file, METH_FASTCALL,
     "plain_data_file(context, data, values, sequence, snapshot_id) -> DataFile | None: a plain entry's\n"
     "model (see _manifests.make_data_file), None when the entry is not plain."},
    {"plain_slices", (PyCFunction)(void (*)(void))plain_slices, METH_FASTCALL,
     "plain_slices(scan, records, one) -> list: a manifest's slices in a listing without filter,\n"
     "deletes or row lineage (see index._manifest_slices)."},
    {"plain_layout", (PyCFunction)(void (*)(void))plain_layout, METH_FASTCALL,
     "plain_layout(program, keys) -> layout | None: where plain_decode reads an entry's fields from,\n"
     "None when the program's entries are not shaped as plain_slices reads them."},
    {"plain_decode", (PyCFunction)(void (*)(void))plain_decode, METH_FASTCALL,
     "plain_decode(layout, payload, offset, count, scan, one) -> (slices, offset): plain_slices over\n"
     "`count` entries encoded in `payload` from `offset`, without decoding them to dicts."},
    {"decode_filtered", decode_filtered, METH_VARARGS,
     "decode_filtered(payload, count, program, filter) -> list: the records decode() gives, less\n"
     "those `filter` proves a listing drops (see _manifests.EntryFilter)."},
    {"skim_entries", skim_entries, METH_VARARGS,
     "skim_entries(payload, count, program, filter) -> (kept, partitions) | None: decode_filtered's\n"
     "first half, without the GIL: the entries it would not drop by status or bounds, and their\n"
     "distinct partitions; None for a malformed payload (decode_filtered reports it)."},
    {"decode_skimmed", decode_skimmed, METH_VARARGS,
     "decode_skimmed(payload, kept, partitions, program, filter) -> list: decode_filtered's second\n"
     "half, over what skim_entries kept: the same records as decode_filtered."},
    {"decode", decode, METH_VARARGS,
     "decode(payload, count, program) -> list: `count` records decoded from the bytes `payload`."},
    {"join_container", join_container, METH_VARARGS,
     "join_container(data, offset, sync, deflate) -> (payload, count): the records of every block\n"
     "of the container joined (and inflated), for decode(payload, count, program)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_avro_native", "Compiled decoder for Iceberg manifest records.", -1, methods,
};

PyMODINIT_FUNC PyInit__avro_native(void)
{
    PyObject *module = PyModule_Create(&module_def);
    PyObject *ops = NULL;
    if (!module)
        return NULL;
    if (intern_names() < 0)
        goto error;
    if (PyType_Ready(&ProgramType) < 0 || PyModule_AddObjectRef(module, "Program", (PyObject *)&ProgramType) < 0)
        goto error;
    if (PyType_Ready(&SlotsMakerType) < 0 ||
        PyModule_AddObjectRef(module, "SlotsMaker", (PyObject *)&SlotsMakerType) < 0)
        goto error;
    if (!(ops = PyTuple_New(OP_COUNT)))
        goto error;
    for (int i = 0; i < OP_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(OP_NAMES[i]);
        if (!name)
            goto error;
        PyTuple_SET_ITEM(ops, i, name);
    }
    if (PyModule_AddObjectRef(module, "OPS", ops) < 0)
        goto error;
    Py_DECREF(ops);
#ifdef LW_LIBDEFLATE
    if (PyModule_AddIntConstant(module, "LIBDEFLATE", 1) < 0)
        goto error;
#else
    if (PyModule_AddIntConstant(module, "LIBDEFLATE", 0) < 0)
        goto error;
#endif
#ifdef LW_ZLIB
    if (PyModule_AddIntConstant(module, "CONTAINER", 1) < 0)
        goto error;
#else
    if (PyModule_AddIntConstant(module, "CONTAINER", 0) < 0)
        goto error;
#endif
    return module;
error:
    Py_XDECREF(ops);
    Py_DECREF(module);
    return NULL;
}
