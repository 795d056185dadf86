/* The Capture attributes, Capture methods and _Entry slots the recorder uses, by index (part of
 * _recorder.c, which includes it once). Each enum follows the order of its tuple in
 * recorder_fields.py, whose names setup() receives and interns: the C code names none of them.
 * A member is the Python name in capitals without its leading underscore, after A_, M_ or E_.
 * Change an enum and its tuple together and raise FIELDS_VERSION here and there: setup()
 * refuses a table of another version or length (and the capture records in Python). */

#define FIELDS_VERSION 1

/* recorder_fields.CAPTURE_ATTRIBUTES */
enum capture_attribute {
    A_BUSY,
    A_LIVE,
    A_IN_OPTIMIZER,
    A_FORWARD_STACK,
    A_PHASES,
    A_OP_INFO,
    A_FILTERED,
    A_VIEWS,
    A_CACHE,
    A_CACHE_LIMIT,
    A_NODE_MODULES,
    A_SEQ,
    A_CURRENT_STEP,
    A_CALLS,
    A_CALL_SITES,
    A_RECORDS,
    A_WAITING_TENSORS,
    A_FLUSH_EVERY,
    A_OPENED,
    A_FRAME_CACHE,
    A_LINES,
    A_LINES_CWD,
    A_COUNT
};

/* recorder_fields.CAPTURE_METHODS */
enum capture_method {
    M_API_CALL,
    M_OPEN,
    M_ENTRY,
    M_BACKWARD_MODULE,
    M_WANTED,
    M_PASS_VIEW,
    M_FLUSH,
    M_PRUNE,
    M_LIBRARY_CODE,
    M_LINE_TEXT,
    M_DESC_OF,
    M_COMPUTE,
    M_OUTPUT_DESCS,
    M_COUNT
};

/* recorder_fields.ENTRY_ATTRIBUTES */
enum entry_attribute {
    E_DTYPE,
    E_SHAPE,
    E_STATS,
    E_SRC,
    E_DATA,
    E_DESC,
    E_UNINITIALISED,
    E_COUNT
};
