/* How the recorder describes one op (part of _recorder.c, which includes it once, after its
 * state and small helpers): the tensors among its arguments and in its result, their kernel
 * statistics and shared descriptions, its other arguments as JSON, and the user-code line. */

static int is_tensor(PyObject *v) {
    if (Py_TYPE(v) == (PyTypeObject *)TensorType) return 1;
    return PyObject_IsInstance(v, TensorType);
}

/* Tensors among the arguments (one level into lists and tuples), as dump_ops._tensors_in. */
static PyObject *tensors_in(PyObject *args, PyObject *kwargs) {
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    for (int part = 0; part < 2; part++) {
        PyObject *values;
        if (part == 0) {
            values = args; Py_INCREF(values);
        } else {
            if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) break;
            values = PyDict_Values(kwargs);
            if (values == NULL) goto fail;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
        PyObject **items = PySequence_Fast_ITEMS(values);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = items[i];
            int t = is_tensor(v);
            if (t < 0) { Py_DECREF(values); goto fail; }
            if (t) {
                if (PyList_Append(found, v) < 0) { Py_DECREF(values); goto fail; }
            } else if (PyList_Check(v) || PyTuple_Check(v)) {
                Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
                PyObject **inner = PySequence_Fast_ITEMS(v);
                for (Py_ssize_t j = 0; j < m; j++) {
                    int u = is_tensor(inner[j]);
                    if (u < 0 || (u && PyList_Append(found, inner[j]) < 0)) { Py_DECREF(values); goto fail; }
                }
            }
        }
        Py_DECREF(values);
    }
    return found;
fail:
    Py_DECREF(found);
    return NULL;
}

/* Tensors in an op's result, as dump_ops._tensors_out. */
static PyObject *tensors_out(PyObject *result) {
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    int t = is_tensor(result);
    if (t < 0) goto fail;
    if (t) {
        if (PyList_Append(found, result) < 0) goto fail;
        return found;
    }
    if (PyList_Check(result) || PyTuple_Check(result)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(result);
        PyObject **items = PySequence_Fast_ITEMS(result);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = items[i];
            int u = is_tensor(v);
            if (u < 0) goto fail;
            if (u) {
                if (PyList_Append(found, v) < 0) goto fail;
            } else if (PyList_Check(v) || PyTuple_Check(v)) {
                Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
                PyObject **inner = PySequence_Fast_ITEMS(v);
                for (Py_ssize_t j = 0; j < m; j++) {
                    int w = is_tensor(inner[j]);
                    if (w < 0 || (w && PyList_Append(found, inner[j]) < 0)) goto fail;
                }
            }
        }
    }
    return found;
fail:
    Py_DECREF(found);
    return NULL;
}

/* Is t.<name> (called when `call`) the object `want`? 1, 0, or -1 on error. */
static int is_value(PyObject *t, PyObject *name, int call, PyObject *want) {
    PyObject *v = call ? call0(t, name) : PyObject_GetAttr(t, name);
    if (v == NULL) return -1;
    int same = v == want;
    Py_DECREF(v);
    return same;
}

/* Statistics of a contiguous float32/float64/bfloat16 CPU tensor by the kernel, as
 * _Stats.compute's first path does (same kernel, same _finish arithmetic); Py_None (a new
 * reference) when the tensor is not one of those: the caller asks Python. */
static PyObject *kernel_stats(PyObject *t) {
    int kind = -1;
    int on_cpu = is_value(t, s_is_cpu, 0, Py_True);
    if (on_cpu <= 0 || Sweep[0] == NULL) return on_cpu < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL) return NULL;
    for (int i = 0; i < 3; i++)
        if (dtype == Dtypes[i]) kind = i;
    Py_DECREF(dtype);
    if (kind < 0) Py_RETURN_NONE;
    int strided = is_value(t, s_layout, 0, Strided);
    if (strided <= 0) return strided < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *numel = call0(t, s_numel);
    if (numel == NULL) return NULL;
    long long n = PyLong_AsLongLong(numel);
    Py_DECREF(numel);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= 0) Py_RETURN_NONE;
    int dense = is_value(t, s_is_contiguous, 1, Py_True);
    if (dense <= 0) return dense < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *ptr = call0(t, s_data_ptr);
    if (ptr == NULL) return NULL;
    void *data = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    if (data == NULL && PyErr_Occurred()) return NULL;
    double o[9] = {INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0};
    int done = 0;
    if (n >= ParallelMin && OpenMP && SweepPar[kind] != NULL) {
        PyObject *threads = PyObject_CallNoArgs(GetNumThreads);
        if (threads == NULL) return NULL;
        long k = PyLong_AsLong(threads);
        Py_DECREF(threads);
        if (k == -1 && PyErr_Occurred()) return NULL;
        if (k > 1) {
            Py_BEGIN_ALLOW_THREADS
            SweepPar[kind](data, (int64_t)n, o, (int)k);
            Py_END_ALLOW_THREADS
            done = 1;
        }
    }
    if (!done) {
        Py_BEGIN_ALLOW_THREADS
        Sweep[kind](data, (int64_t)n, o);
        Py_END_ALLOW_THREADS
    }
    /* dump_stats._finish */
    double out[8];
    if (o[8] == 0) {
        out[0] = out[1] = out[2] = out[3] = out[4] = NAN;
        out[5] = o[5]; out[6] = o[6]; out[7] = 0.0;
    } else {
        out[0] = o[0]; out[1] = o[1]; out[2] = o[2] / o[8]; out[3] = sqrt(o[3]);
        out[4] = o[4] / o[8]; out[5] = o[5]; out[6] = o[6]; out[7] = o[7];
    }
    PyObject *list = PyList_New(8);
    if (list == NULL) return NULL;
    for (int i = 0; i < 8; i++) {
        PyObject *f = PyFloat_FromDouble(out[i]);
        if (f == NULL) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, f);
    }
    return list;
}

/* entry.desc, built the way Capture._new_desc/_desc_of build it when missing (a new reference). */
static PyObject *desc_of(PyObject *cap, PyObject *entry) {
    PyObject *desc = PyObject_GetAttr(entry, Slot[E_DESC]);
    if (desc == NULL || desc != Py_None) return desc;
    Py_DECREF(desc);
    PyObject *stats = PyObject_GetAttr(entry, Slot[E_STATS]);
    PyObject *data = stats ? PyObject_GetAttr(entry, Slot[E_DATA]) : NULL;
    if (data == NULL) { Py_XDECREF(stats); return NULL; }
    int plain = PyList_CheckExact(stats) && data == Py_None;
    Py_DECREF(data);
    if (!plain) {  /* device statistics (an index), none, or saved data: Python's way */
        Py_DECREF(stats);
        return PyObject_CallMethodOneArg(cap, Method[M_DESC_OF], entry);
    }
    /* _json_stats: the list itself when its sum is finite. */
    double sum = 0.0;
    Py_ssize_t n = PyList_GET_SIZE(stats);
    int numbers = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(stats, i);
        if (!PyFloat_CheckExact(v)) { numbers = 0; break; }
        sum += PyFloat_AS_DOUBLE(v);
    }
    PyObject *json;
    if (numbers && isfinite(sum)) {
        json = stats;  /* the reference taken above */
    } else {
        json = PyObject_CallOneArg(JsonStatsFn, stats);
        Py_DECREF(stats);
        if (json == NULL) return NULL;
    }
    PyObject *dtype = PyObject_GetAttr(entry, Slot[E_DTYPE]);
    PyObject *shape = dtype ? PyObject_GetAttr(entry, Slot[E_SHAPE]) : NULL;
    PyObject *src = shape ? PyObject_GetAttr(entry, Slot[E_SRC]) : NULL;
    PyObject *uninit = src ? PyObject_GetAttr(entry, Slot[E_UNINITIALISED]) : NULL;
    desc = uninit ? PyDict_New() : NULL;
    int bad = desc == NULL || PyDict_SetItem(desc, k_dtype, dtype) < 0 ||
              PyDict_SetItem(desc, k_shape, shape) < 0 || PyDict_SetItem(desc, k_stats, json) < 0 ||
              (src != Py_None && PyDict_SetItem(desc, k_src, src) < 0) ||
              (PyObject_IsTrue(uninit) == 1 && PyDict_SetItem(desc, k_uninitialised, Py_True) < 0) ||
              PyObject_SetAttr(entry, Slot[E_DESC], desc) < 0;
    Py_XDECREF(dtype); Py_XDECREF(shape); Py_XDECREF(src); Py_XDECREF(uninit); Py_DECREF(json);
    if (bad) { Py_XDECREF(desc); return NULL; }
    return desc;
}

/* -- arguments: dump_ops._describe_args ---------------------------------------------------- */

static int plain_arg(PyObject *v) {
    return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyUnicode_CheckExact(v);
}

static PyObject *arg_json(PyObject *v, Py_ssize_t *counter);

static PyObject *tensor_ref(Py_ssize_t *counter) {
    PyObject *index = PyLong_FromSsize_t((*counter)++);
    if (index == NULL) return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL || PyDict_SetItem(d, k_t, index) < 0) { Py_XDECREF(d); Py_DECREF(index); return NULL; }
    Py_DECREF(index);
    return d;
}

static PyObject *one_arg(PyObject *v, Py_ssize_t *counter) {
    if (plain_arg(v)) { Py_INCREF(v); return v; }
    if (Py_TYPE(v) == (PyTypeObject *)TensorType) return tensor_ref(counter);
    return arg_json(v, counter);
}

static PyObject *arg_json(PyObject *v, Py_ssize_t *counter) {
    int t = is_tensor(v);
    if (t < 0) return NULL;
    if (t) return tensor_ref(counter);
    if (PyBool_Check(v) || PyLong_Check(v) || PyUnicode_Check(v)) { Py_INCREF(v); return v; }
    if (PyFloat_Check(v)) {
        if (isfinite(PyFloat_AS_DOUBLE(v))) { Py_INCREF(v); return v; }
        PyObject *text = PyObject_Repr(v);
        if (text == NULL) return NULL;
        PyObject *d = PyDict_New();
        if (d == NULL || PyDict_SetItem(d, k_float, text) < 0) { Py_XDECREF(d); Py_DECREF(text); return NULL; }
        Py_DECREF(text);
        return d;
    }
    if (PyList_Check(v) || PyTuple_Check(v)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        PyObject **items = PySequence_Fast_ITEMS(v);
        PyObject *out = PyList_New(n);
        if (out == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = plain_arg(items[i]) ? (Py_INCREF(items[i]), items[i]) : arg_json(items[i], counter);
            if (x == NULL) { Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(out, i, x);
        }
        return out;
    }
    /* dtypes, devices, layouts, memory formats and anything else: Python's rule. */
    PyObject *index = PyLong_FromSsize_t(*counter);
    if (index == NULL) return NULL;
    PyObject *pair = PyObject_CallFunctionObjArgs(ArgJsonFn, v, index, NULL);
    Py_DECREF(index);
    if (pair == NULL) return NULL;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        Py_DECREF(pair);
        PyErr_SetString(PyExc_TypeError, "arg_json: expected (json, next index)");
        return NULL;
    }
    *counter = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 1));
    PyObject *json = PyTuple_GET_ITEM(pair, 0);
    Py_INCREF(json);
    Py_DECREF(pair);
    return json;
}

static PyObject *describe_args(PyObject *args, PyObject *kwargs) {
    Py_ssize_t counter = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *positional = PyList_New(n);
    if (positional == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = one_arg(PyTuple_GET_ITEM(args, i), &counter);
        if (x == NULL) { Py_DECREF(positional); return NULL; }
        PyList_SET_ITEM(positional, i, x);
    }
    PyObject *out = PyDict_New();
    if (out == NULL || PyDict_SetItem(out, k_a, positional) < 0) goto fail;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyObject *named = PyDict_New();
        if (named == NULL) goto fail;
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            PyObject *x = plain_arg(value) ? (Py_INCREF(value), value) : arg_json(value, &counter);
            if (x == NULL || PyDict_SetItem(named, key, x) < 0) { Py_XDECREF(x); Py_DECREF(named); goto fail; }
            Py_DECREF(x);
        }
        int r = PyDict_SetItem(out, k_kw, named);
        Py_DECREF(named);
        if (r < 0) goto fail;
    }
    Py_DECREF(positional);
    return out;
fail:
    Py_DECREF(positional);
    Py_XDECREF(out);
    return NULL;
}

/* -- the user-code line: Capture._user_line ------------------------------------------------ */

static PyObject *user_line(PyObject *cap) {
    PyObject *frames = PyObject_GetAttr(cap, Attr[A_FRAME_CACHE]);
    if (frames == NULL) return NULL;
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    PyObject *line = NULL;
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        PyObject *library = PyDict_GetItemWithError(frames, (PyObject *)code);
        int is_library;
        if (library != NULL) {
            is_library = PyObject_IsTrue(library);
        } else if (PyErr_Occurred()) {
            is_library = -1;
        } else {
            PyObject *r = PyObject_CallMethodOneArg(cap, Method[M_LIBRARY_CODE], (PyObject *)code);
            is_library = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
        }
        if (is_library < 0) { Py_DECREF(code); goto done; }
        if (!is_library) {
            /* The path is relative to the working directory: a chdir starts the table again. */
            PyObject *cwd = PyObject_CallNoArgs(GetCwd);
            PyObject *known = cwd ? PyObject_GetAttr(cap, Attr[A_LINES_CWD]) : NULL;
            PyObject *lines = known ? PyObject_GetAttr(cap, Attr[A_LINES]) : NULL;
            int ok = lines != NULL && PyDict_Check(lines);
            if (ok) {
                int same = PyObject_RichCompareBool(cwd, known, Py_EQ);
                if (same < 0) {
                    ok = 0;
                } else if (!same) {
                    ok = PyObject_SetAttr(cap, Attr[A_LINES_CWD], cwd) == 0;
                    if (ok) PyDict_Clear(lines);
                }
            }
            if (ok) {
                int number = PyFrame_GetLineNumber(frame);
                PyObject *where = Py_BuildValue("(Oi)", (PyObject *)code, number);
                if (where != NULL) {
                    line = PyDict_GetItemWithError(lines, where);
                    if (line != NULL) {
                        Py_INCREF(line);
                    } else if (!PyErr_Occurred()) {
                        {
                        PyObject *lineno = PyLong_FromLong(number);
                        line = lineno ? PyObject_CallMethodObjArgs(cap, Method[M_LINE_TEXT], (PyObject *)code, lineno, NULL) : NULL;
                        Py_XDECREF(lineno);
                    }
                    }
                    Py_DECREF(where);
                }
            } else if (lines != NULL && !PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "_lines must be a dict");
            }
            Py_XDECREF(cwd); Py_XDECREF(known); Py_XDECREF(lines);
            Py_DECREF(code);
            goto done;
        }
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    line = Py_None;
    Py_INCREF(line);
done:
    Py_XDECREF(frame);
    Py_DECREF(frames);
    return line;
}
