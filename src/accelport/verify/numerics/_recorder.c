/* The per-op path of `accelport dump` in statistics mode, as a CPython extension (compiled
 * at first use by accelport/verify/numerics/recorder.py; Capture._on_op in dump.py is the same path
 * in Python, the reference and the fallback: both must write the same records).
 *
 * Called for every ATen op the dispatch mode sees, it works out the phase and module, runs
 * the op, and writes the record into the capture's pending list: the inputs' descriptions
 * from the cache, the outputs measured by the one-pass statistics kernel (_stats.c, called
 * directly through the function pointers native.py loaded), the user-code line, the call
 * index and the non-tensor arguments. State lives on the Capture object (the same attributes
 * the Python path uses); anything off the common path (a cache miss, an alias, an expand, an
 * uninitialised output, a strided or non-float tensor, device statistics) is handed to the
 * Python method that does it, so each rule exists once.
 *
 * The names of those attributes and methods are not written here: setup() receives them as a
 * versioned table (recorder_fields.py) indexed by the enums of _recorder_fields.h. How one op's
 * tensors, arguments and source line are described is in _recorder_describe.c, included below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define VERSION 2

#include "_recorder_fields.h"

typedef void (*sweep_fn)(const void *, int64_t, double *);
typedef int (*sweep_par_fn)(const void *, int64_t, double *, int);

/* Set once by setup(). */
static PyObject *TensorType, *EntryType, *NotRun, *Strided, *DtypeNames;
static PyObject *GraphTaskId, *AutogradNode, *GradEnabled, *GetNumThreads, *GetCwd;
static PyObject *OpInfoFn, *DtypeNameFn, *JsonStatsFn, *ArgJsonFn;
static PyObject *Dtypes[3];   /* torch.float32, torch.float64, torch.bfloat16 */
static PyObject *One;
static sweep_fn Sweep[3];
static sweep_par_fn SweepPar[3];
static int64_t ParallelMin;
static int OpenMP;

/* Names from the field table setup() receives (recorder_fields.py), by the enums of
 * _recorder_fields.h; NULL until the first setup() that accepts a table. */
static PyObject *Attr[A_COUNT], *Method[M_COUNT], *Slot[E_COUNT];
/* Interned names: torch's tensor and autograd-node API, and the record's keys. */
static PyObject *s_version, *s_is_cpu, *s_dtype, *s_layout, *s_shape, *s_numel, *s_is_contiguous,
    *s_data_ptr, *s_sequence_nr;
static PyObject *k_k, *k_seq, *k_step, *k_phase, *k_op, *k_module, *k_call, *k_line, *k_args,
    *k_in, *k_out, *k_node, *k_t, *k_a, *k_kw, *k_float, *k_dtype, *k_shape, *k_stats, *k_src,
    *k_uninitialised,
    *v_op, *v_backward, *v_forward, *v_optimizer, *v_other, *v_empty;

/* -- small helpers ------------------------------------------------------------------------- */

static int truthy(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *call0(PyObject *obj, PyObject *name) {
    return PyObject_CallMethodNoArgs(obj, name);
}

/* The object a weak reference points to (borrowed; Py_None once it is gone). */
static PyObject *referent(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(ref, &obj) <= 0) {
        PyErr_Clear();
        return Py_None;
    }
    Py_DECREF(obj);  /* the tensor stays alive: the caller holds it */
    return obj;
#else
    return PyWeakref_GetObject(ref);
#endif
}

/* The cached entry of tensor t when it is unchanged since (a borrowed reference), or NULL
 * with no error set. `cache` maps id(t) to (weak reference, version, entry). */
static PyObject *cached(PyObject *cache, PyObject *t, PyObject *version) {
    PyObject *key = PyLong_FromVoidPtr(t);
    if (key == NULL) return NULL;
    PyObject *hit = PyDict_GetItemWithError(cache, key);
    Py_DECREF(key);
    if (hit == NULL || !PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 3) return NULL;
    PyObject *alive = referent(PyTuple_GET_ITEM(hit, 0));
    if (alive != t) return NULL;
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(hit, 1), version, Py_EQ);
    if (same <= 0) {
        if (same < 0) PyErr_Clear();
        return NULL;
    }
    return PyTuple_GET_ITEM(hit, 2);
}

/* t._version, or NULL with no error set for an inference tensor (which has none). */
static PyObject *version_of(PyObject *t) {
    PyObject *v = PyObject_GetAttr(t, s_version);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_RuntimeError)) PyErr_Clear();
    return v;
}

/* Keep entry for t under `version` (a new key in the cache; prunes when over its limit). */
static int remember(PyObject *cap, PyObject *cache, PyObject *t, PyObject *version, PyObject *entry) {
    PyObject *ref = PyWeakref_NewRef(t, NULL);
    if (ref == NULL) return -1;
    PyObject *item = PyTuple_Pack(3, ref, version, entry);
    Py_DECREF(ref);
    if (item == NULL) return -1;
    PyObject *key = PyLong_FromVoidPtr(t);
    if (key == NULL) { Py_DECREF(item); return -1; }
    int r = PyDict_SetItem(cache, key, item);
    Py_DECREF(key);
    Py_DECREF(item);
    if (r < 0) return -1;
    PyObject *limit = PyObject_GetAttr(cap, Attr[A_CACHE_LIMIT]);
    if (limit == NULL) return -1;
    Py_ssize_t over = PyDict_GET_SIZE(cache) > PyLong_AsSsize_t(limit);
    Py_DECREF(limit);
    if (over) {
        PyObject *r2 = call0(cap, Method[M_PRUNE]);
        if (r2 == NULL) return -1;
        Py_DECREF(r2);
    }
    return 0;
}

/* A new _Entry(dtype, shape, stats, src) (slots set directly, as its __init__ does). */
static PyObject *new_entry(PyObject *dtype, PyObject *shape, PyObject *stats, PyObject *src) {
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) return NULL;
    PyObject *entry = ((PyTypeObject *)EntryType)->tp_new((PyTypeObject *)EntryType, empty, NULL);
    Py_DECREF(empty);
    if (entry == NULL) return NULL;
    if (PyObject_SetAttr(entry, Slot[E_UNINITIALISED], Py_False) < 0 ||
        PyObject_SetAttr(entry, Slot[E_DTYPE], dtype) < 0 || PyObject_SetAttr(entry, Slot[E_SHAPE], shape) < 0 ||
        PyObject_SetAttr(entry, Slot[E_STATS], stats) < 0 || PyObject_SetAttr(entry, Slot[E_SRC], src) < 0 ||
        PyObject_SetAttr(entry, Slot[E_DATA], Py_None) < 0 || PyObject_SetAttr(entry, Slot[E_DESC], Py_None) < 0) {
        Py_DECREF(entry);
        return NULL;
    }
    return entry;
}

static PyObject *dtype_name(PyObject *dtype) {
    PyObject *name = PyDict_GetItemWithError(DtypeNames, dtype);
    if (name != NULL) { Py_INCREF(name); return name; }
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallOneArg(DtypeNameFn, dtype);
}

#include "_recorder_describe.c"

/* -- views: Capture._pass_view ------------------------------------------------------------- */

/* 1: the view's output now has an entry; 0: record the op instead; -1: error. */
static int pass_view(PyObject *cap, PyObject *source, PyObject *result, PyObject *info) {
    int a = is_tensor(source), b = a > 0 ? is_tensor(result) : 0;
    if (a < 0 || b < 0) return -1;
    if (!a || !b) return 0;
    if (PyTuple_GET_ITEM(info, 4) == Py_True) {  /* expand: Python's way */
        PyObject *r = PyObject_CallMethodObjArgs(cap, Method[M_PASS_VIEW], source, result, info, NULL);
        if (r == NULL) return -1;
        int ok = PyObject_IsTrue(r);
        Py_DECREF(r);
        return ok;
    }
    PyObject *version = version_of(source);
    if (version == NULL) return PyErr_Occurred() ? -1 : 0;
    int status = -1;
    PyObject *cache = NULL, *base = NULL, *n1 = NULL, *n2 = NULL, *dtype = NULL, *name = NULL,
             *shape = NULL, *size = NULL, *stats = NULL, *src = NULL, *uninit = NULL, *entry = NULL;
    cache = PyObject_GetAttr(cap, Attr[A_CACHE]);
    if (cache == NULL) goto done;
    base = cached(cache, source, version);
    if (base != NULL) {
        Py_INCREF(base);
    } else {
        if (PyErr_Occurred()) goto done;
        base = PyObject_CallMethodOneArg(cap, Method[M_ENTRY], source);
        if (base == NULL) goto done;
    }
    n1 = call0(result, s_numel);
    n2 = n1 ? call0(source, s_numel) : NULL;
    if (n2 == NULL) goto done;
    int same = PyObject_RichCompareBool(n1, n2, Py_EQ);
    if (same <= 0) { status = same < 0 ? -1 : 0; goto done; }
    dtype = PyObject_GetAttr(result, s_dtype);
    name = dtype ? dtype_name(dtype) : NULL;
    size = name ? PyObject_GetAttr(result, s_shape) : NULL;
    shape = size ? PySequence_List(size) : NULL;
    stats = shape ? PyObject_GetAttr(base, Slot[E_STATS]) : NULL;
    src = stats ? PyObject_GetAttr(base, Slot[E_SRC]) : NULL;
    uninit = src ? PyObject_GetAttr(base, Slot[E_UNINITIALISED]) : NULL;
    entry = uninit ? new_entry(name, shape, stats, src) : NULL;
    if (entry == NULL || PyObject_SetAttr(entry, Slot[E_UNINITIALISED], uninit) < 0) goto done;
    if (PyTuple_GET_ITEM(info, 3) == Py_True) {  /* same element order: the saved bytes too */
        PyObject *data = PyObject_GetAttr(base, Slot[E_DATA]);
        if (data == NULL) goto done;
        int r = PyObject_SetAttr(entry, Slot[E_DATA], data);
        Py_DECREF(data);
        if (r < 0) goto done;
    }
    status = remember(cap, cache, result, version, entry) < 0 ? -1 : 1;
done:
    Py_DECREF(version);
    Py_XDECREF(cache); Py_XDECREF(base); Py_XDECREF(n1); Py_XDECREF(n2); Py_XDECREF(dtype);
    Py_XDECREF(name); Py_XDECREF(size); Py_XDECREF(shape); Py_XDECREF(stats); Py_XDECREF(src);
    Py_XDECREF(uninit); Py_XDECREF(entry);
    return status;
}

/* -- one op: Capture._record_op (statistics mode) ------------------------------------------ */

/* cap.<name> += add; its value before in *before. 0, or -1 on error. */
static int int_attr_add(PyObject *cap, PyObject *name, long add, long *before) {
    PyObject *v = PyObject_GetAttr(cap, name);
    if (v == NULL) return -1;
    long x = PyLong_AsLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *before = x;
    PyObject *n = PyLong_FromLong(x + add);
    if (n == NULL) return -1;
    int r = PyObject_SetAttr(cap, name, n);
    Py_DECREF(n);
    return r;
}

static PyObject *record_op(PyObject *cap, PyObject *args, PyObject *kwargs, PyObject *phase,
                           PyObject *info, PyObject *module, PyObject *node_name, PyObject *result) {
    PyObject *op = PyTuple_GET_ITEM(info, 0);
    int uninitialised = PyTuple_GET_ITEM(info, 1) == Py_True;
    int aliasing = PyTuple_GET_ITEM(info, 2) == Py_True;
    int expand = PyTuple_GET_ITEM(info, 4) == Py_True;
    PyObject *run_op = PyTuple_GET_ITEM(info, 6);
    PyObject *inputs = NULL, *cache = NULL, *in_entries = NULL, *in_desc = NULL, *outputs = NULL,
             *out_desc = NULL, *seq = NULL, *step = NULL, *line = NULL, *calls = NULL,
             *call_key = NULL, *call = NULL, *described = NULL, *record = NULL, *records = NULL;
    Py_XINCREF(result);
    int opened = truthy(cap, Attr[A_OPENED]);
    if (opened < 0) goto fail;
    if (!opened) {
        PyObject *r = call0(cap, Method[M_OPEN]);
        if (r == NULL) goto fail;
        Py_DECREF(r);
    }
    inputs = tensors_in(args, kwargs);
    cache = inputs ? PyObject_GetAttr(cap, Attr[A_CACHE]) : NULL;
    if (cache == NULL) goto fail;
    Py_ssize_t n_in = PyList_GET_SIZE(inputs);
    in_entries = PyList_New(n_in);
    if (in_entries == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyObject *t = PyList_GET_ITEM(inputs, i);
        PyObject *version = version_of(t);
        PyObject *entry = NULL;
        if (version != NULL) {
            entry = cached(cache, t, version);
            Py_DECREF(version);
            Py_XINCREF(entry);
        }
        if (entry == NULL) {
            if (PyErr_Occurred()) goto fail;
            entry = PyObject_CallMethodOneArg(cap, Method[M_ENTRY], t);
            if (entry == NULL) goto fail;
        }
        PyList_SET_ITEM(in_entries, i, entry);
    }
    long seq_value;
    if (int_attr_add(cap, Attr[A_SEQ], 1, &seq_value) < 0) goto fail;
    seq = PyLong_FromLong(seq_value);
    step = seq ? PyObject_GetAttr(cap, Attr[A_CURRENT_STEP]) : NULL;
    in_desc = step ? PyList_New(n_in) : NULL;
    if (in_desc == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyObject *d = desc_of(cap, PyList_GET_ITEM(in_entries, i));
        if (d == NULL) goto fail;
        PyList_SET_ITEM(in_desc, i, d);
    }
    if (result == NotRun) {
        Py_DECREF(result);
        result = PyObject_Call(run_op, args, kwargs);
        if (result == NULL) goto fail;
    }
    outputs = tensors_out(result);
    if (outputs == NULL) goto fail;
    Py_ssize_t n_out = PyList_GET_SIZE(outputs);
    out_desc = PyList_New(n_out);
    if (out_desc == NULL) goto fail;
    int python_outputs = uninitialised || (aliasing && n_in > 0) || (expand && n_in > 0);
    if (python_outputs) {
        /* An alias, an expand or uninitialised memory: Python's rules for the outputs. */
        Py_DECREF(out_desc);
        out_desc = PyObject_CallMethodObjArgs(cap, Method[M_OUTPUT_DESCS], outputs, inputs, in_entries, seq, info, NULL);
        if (out_desc == NULL) goto fail;
        if (!PyList_Check(out_desc)) {
            PyErr_SetString(PyExc_TypeError, "_output_descs must return a list");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n_out && !python_outputs; i++) {
        PyObject *t = PyList_GET_ITEM(outputs, i);
        PyObject *desc = NULL;
        {
            int mutated = 0;
            for (Py_ssize_t j = 0; j < n_in; j++)
                if (PyList_GET_ITEM(inputs, j) == t) { mutated = 1; break; }
            PyObject *stats = kernel_stats(t);
            if (stats == NULL) goto fail;
            if (stats == Py_None) {
                Py_DECREF(stats);
                stats = PyObject_CallMethodOneArg(cap, Method[M_COMPUTE], t);
                if (stats == NULL) goto fail;
            }
            PyObject *dtype = PyObject_GetAttr(t, s_dtype);
            PyObject *name = dtype ? dtype_name(dtype) : NULL;
            PyObject *size = name ? PyObject_GetAttr(t, s_shape) : NULL;
            PyObject *shape = size ? PySequence_List(size) : NULL;
            PyObject *entry = shape ? new_entry(name, shape, stats, seq) : NULL;
            Py_XDECREF(dtype); Py_XDECREF(name); Py_XDECREF(size); Py_XDECREF(shape); Py_DECREF(stats);
            if (entry == NULL) goto fail;
            PyObject *version = version_of(t);
            int r = 0;
            if (version != NULL) {
                if (mutated) {  /* torch bumps the counter once the op returns */
                    PyObject *next = PyNumber_Add(version, One);
                    Py_DECREF(version);
                    version = next;
                }
                r = version == NULL ? -1 : remember(cap, cache, t, version, entry);
                Py_XDECREF(version);
            } else if (PyErr_Occurred()) {
                r = -1;
            }
            desc = r < 0 ? NULL : desc_of(cap, entry);
            Py_DECREF(entry);
            if (desc == NULL) goto fail;
        }
        PyList_SET_ITEM(out_desc, i, desc);
    }
    if (phase == v_backward) {
        PyObject *sites = PyObject_GetAttr(cap, Attr[A_CALL_SITES]);
        if (sites == NULL) goto fail;
        line = PyDict_GetItemWithError(sites, module);
        Py_XINCREF(line);
        Py_DECREF(sites);
        if (line == NULL) {
            if (PyErr_Occurred()) goto fail;
            line = Py_None;
            Py_INCREF(line);
        }
    } else {
        line = user_line(cap);
        if (line == NULL) goto fail;
    }
    calls = PyObject_GetAttr(cap, Attr[A_CALLS]);
    call_key = calls ? PyTuple_Pack(3, phase, module, op) : NULL;
    if (call_key == NULL) goto fail;
    call = PyDict_GetItemWithError(calls, call_key);
    if (call == NULL && PyErr_Occurred()) goto fail;
    long call_value = call == NULL ? 0 : PyLong_AsLong(call);
    call = PyLong_FromLong(call_value);
    PyObject *next_call = call ? PyLong_FromLong(call_value + 1) : NULL;
    if (next_call == NULL || PyDict_SetItem(calls, call_key, next_call) < 0) { Py_XDECREF(next_call); goto fail; }
    Py_DECREF(next_call);
    described = describe_args(args, kwargs);
    record = described ? PyDict_New() : NULL;
    if (record == NULL || PyDict_SetItem(record, k_k, v_op) < 0 || PyDict_SetItem(record, k_seq, seq) < 0 ||
        PyDict_SetItem(record, k_step, step) < 0 || PyDict_SetItem(record, k_phase, phase) < 0 ||
        PyDict_SetItem(record, k_op, op) < 0 || PyDict_SetItem(record, k_module, module) < 0 ||
        PyDict_SetItem(record, k_call, call) < 0 || PyDict_SetItem(record, k_line, line) < 0 ||
        PyDict_SetItem(record, k_args, described) < 0 || PyDict_SetItem(record, k_in, in_desc) < 0 ||
        PyDict_SetItem(record, k_out, out_desc) < 0 ||
        (node_name != Py_None && PyDict_SetItem(record, k_node, node_name) < 0))
        goto fail;
    records = PyObject_GetAttr(cap, Attr[A_RECORDS]);
    if (records == NULL || PyList_Append(records, record) < 0) goto fail;
    long waiting;
    if (int_attr_add(cap, Attr[A_WAITING_TENSORS], (long)(n_in + n_out), &waiting) < 0) goto fail;
    PyObject *every = PyObject_GetAttr(cap, Attr[A_FLUSH_EVERY]);
    if (every == NULL) goto fail;
    long flush_every = PyLong_AsLong(every);
    Py_DECREF(every);
    if (waiting + n_in + n_out >= flush_every) {
        PyObject *r = call0(cap, Method[M_FLUSH]);
        if (r == NULL) goto fail;
        Py_DECREF(r);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(inputs); Py_XDECREF(cache); Py_XDECREF(in_entries); Py_XDECREF(in_desc);
    Py_XDECREF(outputs); Py_XDECREF(out_desc); Py_XDECREF(seq); Py_XDECREF(step); Py_XDECREF(line);
    Py_XDECREF(calls); Py_XDECREF(call_key); Py_XDECREF(call); Py_XDECREF(described);
    Py_XDECREF(record); Py_XDECREF(records);
    return result;
}

/* -- the dispatch mode's entry: Capture._on_op --------------------------------------------- */

static PyObject *on_op(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 4) {
        PyErr_SetString(PyExc_TypeError, "on_op(capture, func, args, kwargs)");
        return NULL;
    }
    if (Attr[A_BUSY] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "on_op: setup() has not been given a field table");
        return NULL;
    }
    PyObject *cap = argv[0], *func = argv[1], *args = argv[2], *kwargs = argv[3];
    if (!PyTuple_Check(args) || !PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "on_op: args must be a tuple and kwargs a dict");
        return NULL;
    }
    int busy = truthy(cap, Attr[A_BUSY]);
    int live = busy == 0 ? truthy(cap, Attr[A_LIVE]) : 0;
    if (busy < 0 || live < 0) return NULL;
    if (busy || !live) return PyObject_Call(func, args, kwargs);
    PyObject *phase, *module = NULL, *node_name = Py_None, *known = NULL;
    PyObject *task = PyObject_CallNoArgs(GraphTaskId);
    if (task == NULL) return NULL;
    long task_id = PyLong_AsLong(task);
    Py_DECREF(task);
    if (task_id == -1 && PyErr_Occurred()) return NULL;
    if (task_id != -1) {
        phase = v_backward;
        PyObject *node = PyObject_CallNoArgs(AutogradNode);
        if (node == NULL) return NULL;
        if (node == Py_None) {
            module = v_empty;
            Py_INCREF(module);
        } else {
            PyObject *number = call0(node, s_sequence_nr);
            PyObject *table = number ? PyObject_GetAttr(cap, Attr[A_NODE_MODULES]) : NULL;
            if (table != NULL) {
                known = PyDict_GetItemWithError(table, number);
                Py_XINCREF(known);
            }
            Py_XDECREF(table);
            Py_XDECREF(number);
            if (known == NULL) {
                if (PyErr_Occurred()) { Py_DECREF(node); return NULL; }
                known = PyObject_CallMethodOneArg(cap, Method[M_BACKWARD_MODULE], node);
            }
            if (known == NULL) { Py_DECREF(node); return NULL; }
            module = PyTuple_GET_ITEM(known, 0);
            node_name = PyTuple_GET_ITEM(known, 1);
            Py_INCREF(module);
        }
        Py_DECREF(node);
    } else {
        int optimizer = truthy(cap, Attr[A_IN_OPTIMIZER]);
        PyObject *stack = optimizer >= 0 ? PyObject_GetAttr(cap, Attr[A_FORWARD_STACK]) : NULL;
        if (stack == NULL) return NULL;
        Py_ssize_t depth = PyList_Check(stack) ? PyList_GET_SIZE(stack) : 0;
        if (optimizer) {
            phase = v_optimizer;
        } else if (depth) {
            phase = v_forward;
        } else {
            PyObject *grad = PyObject_CallNoArgs(GradEnabled);
            if (grad == NULL) { Py_DECREF(stack); return NULL; }
            phase = grad == Py_True ? v_forward : v_other;
            Py_DECREF(grad);
        }
        if (depth) {
            module = PyList_GET_ITEM(stack, depth - 1);
            Py_INCREF(module);
        } else if (phase != v_forward) {
            /* Outside every module: the torch call the user made (clip_grad_norm_, SGD.step). */
            module = call0(cap, Method[M_API_CALL]);
            if (module == NULL) { Py_DECREF(stack); return NULL; }
        } else {
            module = v_empty;
            Py_INCREF(module);
        }
        Py_DECREF(stack);
    }
    PyObject *result = NULL;
    PyObject *phases = PyObject_GetAttr(cap, Attr[A_PHASES]);
    if (phases == NULL) goto out;
    int wanted_phase = PySequence_Contains(phases, phase);
    Py_DECREF(phases);
    if (wanted_phase < 0) goto out;
    if (!wanted_phase) { result = PyObject_Call(func, args, kwargs); goto out; }
    PyObject *table = PyObject_GetAttr(cap, Attr[A_OP_INFO]);
    if (table == NULL) goto out;
    PyObject *key = PyLong_FromVoidPtr(func);
    PyObject *info = key ? PyDict_GetItemWithError(table, key) : NULL;
    Py_XINCREF(info);
    if (info == NULL && key != NULL && !PyErr_Occurred()) {
        info = PyObject_CallOneArg(OpInfoFn, func);
        if (info != NULL && PyDict_SetItem(table, key, info) < 0) Py_CLEAR(info);
    }
    Py_XDECREF(key);
    Py_DECREF(table);
    if (info == NULL) goto out;
    if (info == Py_None) {  /* not numeric */
        Py_DECREF(info);
        result = PyObject_Call(func, args, kwargs);
        goto out;
    }
    int filtered = truthy(cap, Attr[A_FILTERED]);
    if (filtered < 0) { Py_DECREF(info); goto out; }
    if (filtered) {
        PyObject *ok = PyObject_CallMethodObjArgs(cap, Method[M_WANTED], module, PyTuple_GET_ITEM(info, 0), NULL);
        int wanted = ok == NULL ? -1 : PyObject_IsTrue(ok);
        Py_XDECREF(ok);
        if (wanted <= 0) {
            Py_DECREF(info);
            if (wanted == 0) result = PyObject_Call(func, args, kwargs);
            goto out;
        }
    }
    if (PyObject_SetAttr(cap, Attr[A_BUSY], Py_True) < 0) { Py_DECREF(info); goto out; }
    int views = truthy(cap, Attr[A_VIEWS]);
    if (views >= 0 && PyTuple_GET_ITEM(info, 5) == Py_True && !views) {
        PyObject *run = PyObject_Call(PyTuple_GET_ITEM(info, 6), args, kwargs);
        if (run != NULL) {
            int passed = pass_view(cap, PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0) : Py_None, run, info);
            if (passed > 0) {
                result = run;
            } else if (passed == 0) {
                result = record_op(cap, args, kwargs, phase, info, module, node_name, run);
                Py_DECREF(run);
            } else {
                Py_DECREF(run);
            }
        }
    } else if (views >= 0) {
        result = record_op(cap, args, kwargs, phase, info, module, node_name, NotRun);
    }
    Py_DECREF(info);
    /* Always clear the flag, keeping an error raised above. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyObject_SetAttr(cap, Attr[A_BUSY], Py_False) < 0) {
        Py_XDECREF(et); Py_XDECREF(ev); Py_XDECREF(tb);
        Py_CLEAR(result);
    } else {
        PyErr_Restore(et, ev, tb);
    }
out:
    Py_XDECREF(module);
    Py_XDECREF(known);
    return result;
}

/* -- setup --------------------------------------------------------------------------------- */

/* Intern the names of the field table (recorder_fields.table()) into Attr, Method and Slot:
 * refused, with nothing changed, unless its version and the length of each tuple are the ones
 * _recorder_fields.h was written for. */
static int take_fields(PyObject *table) {
    static PyObject **const arrays[3] = {Attr, Method, Slot};
    static const Py_ssize_t counts[3] = {A_COUNT, M_COUNT, E_COUNT};
    static const char *what[3] = {"attributes", "methods", "entry attributes"};
    if (!PyTuple_Check(table) || PyTuple_GET_SIZE(table) != 4) {
        PyErr_SetString(PyExc_TypeError, "setup: fields must be (version, attributes, methods, entry attributes)");
        return -1;
    }
    long version = PyLong_AsLong(PyTuple_GET_ITEM(table, 0));
    if (version == -1 && PyErr_Occurred()) return -1;
    if (version != FIELDS_VERSION) {
        PyErr_Format(PyExc_ValueError, "setup: field table version %ld; this recorder reads version %d",
                     version, FIELDS_VERSION);
        return -1;
    }
    PyObject *names[A_COUNT + M_COUNT + E_COUNT];
    Py_ssize_t taken = 0;
    for (int part = 0; part < 3; part++) {
        PyObject *tuple = PyTuple_GET_ITEM(table, part + 1);
        if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != counts[part]) {
            PyErr_Format(PyExc_ValueError, "setup: the field table's %s are not a tuple of %zd names",
                         what[part], counts[part]);
            goto fail;
        }
        for (Py_ssize_t i = 0; i < counts[part]; i++) {
            PyObject *name = PyTuple_GET_ITEM(tuple, i);
            if (!PyUnicode_CheckExact(name)) {
                PyErr_SetString(PyExc_TypeError, "setup: field names must be strings");
                goto fail;
            }
            Py_INCREF(name);
            PyUnicode_InternInPlace(&name);
            names[taken++] = name;
        }
    }
    taken = 0;
    for (int part = 0; part < 3; part++)
        for (Py_ssize_t i = 0; i < counts[part]; i++) Py_XSETREF(arrays[part][i], names[taken++]);
    return 0;
fail:
    while (taken > 0) Py_DECREF(names[--taken]);
    return -1;
}

static PyObject *setup(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "setup(dict)");
        return NULL;
    }
    /* First: a table this source does not match changes nothing. */
    PyObject *fields = PyDict_GetItemString(config, "fields");
    if (fields == NULL) {
        PyErr_SetString(PyExc_KeyError, "setup: fields missing");
        return NULL;
    }
    if (take_fields(fields) < 0) return NULL;
#define TAKE(var, name)                                                                        \
    do {                                                                                       \
        PyObject *v_ = PyDict_GetItemString(config, name);                                     \
        if (v_ == NULL) {                                                                      \
            PyErr_Format(PyExc_KeyError, "setup: %s missing", name);                           \
            return NULL;                                                                       \
        }                                                                                      \
        Py_INCREF(v_);                                                                         \
        Py_XSETREF(var, v_);                                                                   \
    } while (0)
    TAKE(TensorType, "tensor"); TAKE(EntryType, "entry"); TAKE(NotRun, "not_run");
    TAKE(Strided, "strided"); TAKE(DtypeNames, "dtype_names"); TAKE(GraphTaskId, "graph_task_id");
    TAKE(AutogradNode, "autograd_node"); TAKE(GradEnabled, "grad_enabled");
    TAKE(GetNumThreads, "num_threads"); TAKE(GetCwd, "getcwd"); TAKE(OpInfoFn, "op_info");
    TAKE(DtypeNameFn, "dtype_name"); TAKE(JsonStatsFn, "json_stats"); TAKE(ArgJsonFn, "arg_json");
    TAKE(Dtypes[0], "float32"); TAKE(Dtypes[1], "float64"); TAKE(Dtypes[2], "bfloat16");
#undef TAKE
    if (!PyType_Check(EntryType) || !PyType_Check(TensorType)) {
        PyErr_SetString(PyExc_TypeError, "setup: entry and tensor must be types");
        return NULL;
    }
    /* Kernel addresses (0: none; the Python compute is used). */
    static const char *names[3][2] = {{"sweep_float32", "par_float32"}, {"sweep_float64", "par_float64"},
                                      {"sweep_bfloat16", "par_bfloat16"}};
    for (int i = 0; i < 3; i++) {
        PyObject *a = PyDict_GetItemString(config, names[i][0]);
        PyObject *b = PyDict_GetItemString(config, names[i][1]);
        Sweep[i] = a ? (sweep_fn)PyLong_AsVoidPtr(a) : NULL;
        SweepPar[i] = b ? (sweep_par_fn)PyLong_AsVoidPtr(b) : NULL;
        if (PyErr_Occurred()) return NULL;
    }
    if (Sweep[0] == NULL || Sweep[1] == NULL || Sweep[2] == NULL) Sweep[0] = Sweep[1] = Sweep[2] = NULL;
    PyObject *pmin = PyDict_GetItemString(config, "parallel_min");
    PyObject *omp = PyDict_GetItemString(config, "openmp");
    ParallelMin = pmin ? PyLong_AsLongLong(pmin) : INT64_MAX;
    OpenMP = omp ? PyObject_IsTrue(omp) : 0;
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *version(PyObject *self, PyObject *unused) { return PyLong_FromLong(VERSION); }

/* For tests: the statistics the kernel path gives a tensor (None: not its kind). */
static PyObject *stats_of(PyObject *self, PyObject *t) { return kernel_stats(t); }

/* For tests: dump_ops._describe_args. */
static PyObject *args_of(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2 || !PyTuple_Check(argv[0]) || !PyDict_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "describe_args(tuple, dict)");
        return NULL;
    }
    return describe_args(argv[0], argv[1]);
}

static PyMethodDef methods[] = {
    {"on_op", (PyCFunction)(void (*)(void))on_op, METH_FASTCALL, "Capture._on_op, in C."},
    {"setup", setup, METH_O, "Types, functions, kernel addresses and the field table the recorder uses."},
    {"version", version, METH_NOARGS, "The source's version."},
    {"stats_of", stats_of, METH_O, "Kernel statistics of a tensor (tests)."},
    {"describe_args", (PyCFunction)(void (*)(void))args_of, METH_FASTCALL, "dump_ops._describe_args (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_recorder", NULL, -1, methods};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__recorder(void) {
    INTERN(s_version, "_version"); INTERN(s_is_cpu, "is_cpu"); INTERN(s_dtype, "dtype");
    INTERN(s_layout, "layout"); INTERN(s_shape, "shape"); INTERN(s_numel, "numel");
    INTERN(s_is_contiguous, "is_contiguous"); INTERN(s_data_ptr, "data_ptr");
    INTERN(s_sequence_nr, "_sequence_nr");
    INTERN(k_k, "k"); INTERN(k_seq, "seq"); INTERN(k_step, "step"); INTERN(k_phase, "phase");
    INTERN(k_op, "op"); INTERN(k_module, "module"); INTERN(k_call, "call"); INTERN(k_line, "line");
    INTERN(k_args, "args"); INTERN(k_in, "in"); INTERN(k_out, "out"); INTERN(k_node, "node");
    INTERN(k_t, "t"); INTERN(k_a, "a"); INTERN(k_kw, "kw"); INTERN(k_float, "float");
    INTERN(k_dtype, "dtype"); INTERN(k_shape, "shape"); INTERN(k_stats, "stats"); INTERN(k_src, "src");
    INTERN(k_uninitialised, "uninitialised");
    INTERN(v_op, "op"); INTERN(v_backward, "backward"); INTERN(v_forward, "forward");
    INTERN(v_optimizer, "optimizer"); INTERN(v_other, "other"); INTERN(v_empty, "");
    if ((One = PyLong_FromLong(1)) == NULL) return NULL;
    return PyModule_Create(&module_def);
}
