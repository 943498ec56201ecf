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
#include <stdint.h>
#include <string.h>
#ifdef LW_ZLIB
#include <zlib.h>
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

static int failed(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return -1;
}

/* ---- primitives --------------------------------------------------------------------------- */

/* The zigzag long at c->p (the cursor moved past it): NULL, or what is wrong. Touches no
 * Python object, so the container framing can run it without the GIL. */
static const char *varint(Cursor *c, int64_t *out)
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
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return NULL;
        }
    }
    return "malformed Avro data: a number longer than 10 bytes";
}

static int read_long(Cursor *c, int64_t *out)
{
    const unsigned char *p = c->p;
    if (p < c->end && *p < 0x80) { /* one-byte numbers: most of a manifest */
        uint64_t v = *p;
        c->p = p + 1;
        *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
        return 0;
    }
    const char *error = varint(c, out);
    return error ? failed(error) : 0;
}

/* Length-prefixed bytes: *start and *length of the content, the cursor moved past it. */
static int read_span(Cursor *c, const unsigned char **start, Py_ssize_t *length)
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

static int take(Cursor *c, Py_ssize_t n, const unsigned char **start)
{
    if (n > c->end - c->p)
        return failed("truncated Avro data: a fixed-size value runs past the end");
    *start = c->p;
    c->p += n;
    return 0;
}

/* Item count of the next array/map block (negative: followed by the block's byte size), bounded
 * by what the remaining bytes can hold so that a corrupt count cannot allocate or loop forever. */
static int read_count(Cursor *c, Py_ssize_t item_size, int64_t *count)
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
    static const Node skip_longs = {OP_INT_LONG_MAP, 0, 0, 0, 0, 0, 0};
    const unsigned char *start = c->p;
    PyObject *skipped = run_iceberg_block(node->op == OP_RAW_INT_BYTES_MAP ? &skip_bytes : &skip_longs, c);
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

/* Appends the raw-deflate stream at in[0:n] to g, like zlib.decompress(in, -15): stops at the
 * stream's end (bytes after it are ignored) and fails on a stream that does not end. */
static const char *inflate_into(z_stream *z, const unsigned char *in, int64_t n, Growing *g)
{
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
}

/* The records of every block of c (decompressed when z is given) appended to g, their count
 * added to *total: NULL, or what is wrong. Runs without the GIL. */
static const char *join_blocks(Cursor *c, const unsigned char *sync, z_stream *z, Growing *g, int64_t *total)
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
    z_stream z;
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
    if (deflate && inflateInit2(&z, -15) != Z_OK)
        error = "zlib could not start a raw deflate stream";
    else
        error = join_blocks(&c, sync->buf, deflate ? &z : NULL, joined, total);
    if (deflate)
        inflateEnd(&z);
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

static PyMethodDef methods[] = {
    {"int_bytes_map", int_bytes_map, METH_O,
     "int_bytes_map(raw) -> dict: the int -> bytes map whose encoded blocks (kept \"raw\") are `raw`."},
    {"int_long_map", int_long_map, METH_O,
     "int_long_map(raw) -> dict: the int -> long map whose encoded blocks (kept \"raw\") are `raw`."},
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
    if (PyType_Ready(&ProgramType) < 0 || PyModule_AddObjectRef(module, "Program", (PyObject *)&ProgramType) < 0)
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
