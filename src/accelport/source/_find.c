/* accelport inventory: every occurrence of a few byte strings, in one pass over a file.
 *
 * The Python scanner's pre-filter asks whether a file holds any of a dozen CUDA tokens,
 * and where. One bytes.find per token reads the file a dozen times; this reads it once.
 * A 64 Kibit table of the tokens' first two bytes rejects almost every position with one
 * lookup; only positions that pass are compared.
 *
 * Semantics (fastfind.py keeps a pure-Python twin, and the tests hold them equal): for
 * each needle on its own, the offsets that repeated `data.find(needle, previous + len)`
 * returns; all needles merged in offset order, ties in needle order. Each is written as
 * offset * 32 + needle index. Needles: 1 to 32, each at least 2 bytes long.
 */
#include <stdint.h>
#include <string.h>

int ap_find_version(void) { return 2; }

/* Returns the number written; -1 when more than `cap` would be. With a needle's bit set in
 * `stop_mask`, returns right after writing its first occurrence. */
int64_t ap_find_all(const unsigned char *data, int64_t n, const unsigned char *needles,
                    const int32_t *starts, int32_t count, uint32_t stop_mask,
                    int64_t *out, int64_t cap) {
    uint32_t first[256];
    uint64_t pairs[1024];
    int64_t next[32];
    int64_t found = 0;
    if (count < 1 || count > 32) return -1;
    memset(first, 0, sizeof first);
    memset(pairs, 0, sizeof pairs);
    for (int i = 0; i < count; i++) {
        const unsigned char *needle = needles + starts[i];
        if (starts[i + 1] - starts[i] < 2) return -1;
        unsigned key = (unsigned)needle[0] << 8 | needle[1];
        next[i] = 0;
        first[needle[0]] |= 1u << i;
        pairs[key >> 6] |= 1ull << (key & 63);
    }
    for (int64_t p = 0; p + 1 < n; p++) {
        unsigned key = (unsigned)data[p] << 8 | data[p + 1];
        if (!(pairs[key >> 6] >> (key & 63) & 1)) continue;
        uint32_t candidates = first[data[p]];
        while (candidates) {
            int i = __builtin_ctz(candidates);
            int32_t len = starts[i + 1] - starts[i];
            candidates &= candidates - 1;
            if (p < next[i] || p + len > n || memcmp(data + p, needles + starts[i], (size_t)len) != 0) continue;
            if (found >= cap) return -1;
            out[found++] = p * 32 + i;
            next[i] = p + len;
            if (stop_mask >> i & 1) return found;
        }
    }
    return found;
}

/* ------------------------------------------------------------------ Python scanner helpers
 * Byte-for-byte ports of three functions in inventory/python (their Python versions stay,
 * as the reference and the fallback; the tests hold each pair equal on random input):
 *   ap_string_edges     chunks.string_edges
 *   ap_statement_starts chunks.statement_starts (the loop; Python keeps the None cases)
 *   ap_token_lines      python.code_token_lines (the loop over find_all's marks)
 */

static int is_word(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Offsets where triple-quoted strings open and close, alternating. Returns the count,
 * -1 when more than `cap`, -2 when unsure (a triple quote that may sit in a one-line string). */
int64_t ap_string_edges(const unsigned char *d, int64_t n, int64_t *out, int64_t cap) {
    unsigned char state = 0;
    int64_t resume = 0, k = 0;
    for (int64_t at = 0; at + 2 < n; at++) {
        unsigned char c = d[at];
        if ((c != '"' && c != '\'') || d[at + 1] != c || d[at + 2] != c || at < resume) continue;
        if (!state) {
            int64_t ls = at, hash = -1, dq = 0, sq = 0;
            while (ls > 0 && d[ls - 1] != '\n') ls--;
            for (int64_t i = ls; i < at; i++) {
                if (d[i] == '#' && hash < 0) hash = i;
            }
            if (hash >= 0) {
                int quoted = 0;
                for (int64_t i = ls; i < hash; i++) quoted |= d[i] == '"' || d[i] == '\'';
                if (!quoted) continue; /* in a comment */
            }
            for (int64_t i = ls; i < at; i++) { dq += d[i] == '"'; sq += d[i] == '\''; }
            if ((dq & 1) || (sq & 1)) return -2;
            if (k >= cap) return -1;
            state = c;
            out[k++] = at;
            resume = at + 3;
        } else if (c == state) {
            if (k >= cap) return -1;
            state = 0;
            out[k++] = at + 3;
            resume = at + 3;
        }
    }
    if (state) {
        if (k >= cap) return -1;
        out[k++] = n;
    }
    return k;
}

static int word_is(const unsigned char *w, int64_t len, const char *text) {
    return (int64_t)strlen(text) == len && memcmp(w, text, (size_t)len) == 0;
}

/* 0-based numbers of the lines that start a top-level statement; -1 when more than `cap`. */
int64_t ap_statement_starts(const unsigned char *d, int64_t n, const int64_t *edges, int64_t nedges,
                            int64_t *out, int64_t cap) {
    int64_t k = 0, line = 0, e = 0;
    int decorating = 0;
    for (int64_t s = 0; s < n; s++) {
        if (s > 0) {
            if (d[s - 1] != '\n') continue;
            line++;
        }
        unsigned char c = d[s];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '@')) continue;
        int64_t end = s + 1;
        while (end < n && (is_word(d[end]) || d[end] == '.')) end++;
        while (e < nedges && edges[e] <= s) e++;
        if (e & 1) continue; /* inside a triple-quoted string */
        if (s > 0) {
            int64_t lo = s >= 3 ? s - 3 : 0, j = s - 1;
            while (j > lo && d[j - 1] == '\r') j--;
            if (j > lo && d[j - 1] == '\\') continue; /* after a backslash continuation */
        }
        const unsigned char *w = d + s;
        int64_t len = end - s;
        if (word_is(w, len, "else") || word_is(w, len, "elif") || word_is(w, len, "except") || word_is(w, len, "finally"))
            continue;
        int decorator = c == '@';
        if (decorating && (decorator || word_is(w, len, "def") || word_is(w, len, "async") || word_is(w, len, "class"))) {
            decorating = decorator;
            continue;
        }
        if (k >= cap) return -1;
        out[k++] = line;
        decorating = decorator;
    }
    return k;
}

/* Is d[a:b] one of the words in (blob, starts, count)? */
static int in_words(const unsigned char *d, int64_t a, int64_t b, const unsigned char *blob,
                    const int32_t *starts, int32_t count) {
    for (int32_t i = 0; i < count; i++) {
        int32_t len = starts[i + 1] - starts[i];
        if (len == b - a && memcmp(d + a, blob + starts[i], (size_t)len) == 0) return 1;
    }
    return 0;
}

/* (PREFIX)_[A-Z0-9_]+ for one of the prefixes, over the whole of d[a:b]. */
static int env_word(const unsigned char *d, int64_t a, int64_t b, const unsigned char *blob,
                    const int32_t *starts, int32_t count) {
    for (int32_t i = 0; i < count; i++) {
        int64_t len = starts[i + 1] - starts[i];
        if (b - a < len + 2 || memcmp(d + a, blob + starts[i], (size_t)len) != 0 || d[a + len] != '_') continue;
        int ok = 1;
        for (int64_t j = a + len + 1; j < b && ok; j++) {
            unsigned char c = d[j];
            ok = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        }
        if (ok) return 1;
    }
    return 0;
}

/* Lines (1-based, increasing) where a mark from ap_find_all stands in code. `import_index`
 * is the needle index of b"import"; keep = whole words that count, packages = CUDA-only
 * package names (they count on import lines), env = environment variable prefixes.
 * edges: from ap_string_edges, or nedges < 0 for none. Returns the count, -1 if over `cap`. */
int64_t ap_token_lines(const unsigned char *d, int64_t n, const int64_t *marks, int64_t nmarks,
                       int32_t import_index,
                       const unsigned char *keep, const int32_t *keep_starts, int32_t nkeep,
                       const unsigned char *pkgs, const int32_t *pkg_starts, int32_t npkgs,
                       const unsigned char *env, const int32_t *env_starts, int32_t nenv,
                       const int64_t *edges, int64_t nedges, int64_t *out, int64_t cap) {
    int64_t k = 0, line = 1, pos = 0, line_start = 0, e = 0, last = 0;
    for (int64_t m = 0; m < nmarks; m++) {
        int64_t start = marks[m] >> 5;
        int32_t index = (int32_t)(marks[m] & 31);
        for (int64_t i = pos; i < start; i++) {
            if (d[i] == '\n') { line++; line_start = i + 1; }
        }
        pos = start;
        if (line == last) continue;
        if (index == import_index) {
            int64_t end = start, i = line_start, found = 0;
            while (end < n && d[end] != '\n') end++;
            while (i < end && (d[i] == ' ' || d[i] == '\t')) i++;
            if (end - i >= 7 && memcmp(d + i, "import", 6) == 0 && (d[i + 6] == ' ' || d[i + 6] == '\t')) found = 1;
            else if (end - i >= 5 && memcmp(d + i, "from", 4) == 0 && (d[i + 4] == ' ' || d[i + 4] == '\t')) found = 1;
            if (!found) continue;
            found = 0;
            for (i = line_start; i < end && !found;) {
                if (!is_word(d[i])) { i++; continue; }
                int64_t a = i;
                while (i < end && is_word(d[i])) i++;
                found = in_words(d, a, i, pkgs, pkg_starts, npkgs) || in_words(d, a, i, keep, keep_starts, nkeep);
            }
            if (!found) continue;
        } else {
            int64_t a = start, b = start;
            while (a > line_start && is_word(d[a - 1])) a--;
            while (b < n && is_word(d[b])) b++;
            if (!in_words(d, a, b, keep, keep_starts, nkeep) && !env_word(d, a, b, env, env_starts, nenv)) continue;
            if (b - a == 4 && (memcmp(d + a, "cuda", 4) == 0 || memcmp(d + a, "CUDA", 4) == 0)) {
                if ((a > 0 && d[a - 1] == '/') || (b < n && d[b] == '/')) continue; /* a path segment */
            }
        }
        int64_t hash = -1;
        for (int64_t i = line_start; i < start; i++) {
            if (d[i] == '#') { hash = i; break; }
        }
        if (hash >= 0) {
            int quoted = 0;
            for (int64_t i = line_start; i < hash; i++) quoted |= d[i] == '"' || d[i] == '\'';
            if (!quoted) continue; /* in a comment */
        }
        if (nedges > 0) {
            while (e < nedges && edges[e] <= start) e++;
            if (e & 1) continue; /* inside a triple-quoted string */
        }
        if (k >= cap) return -1;
        out[k++] = line;
        last = line;
    }
    return k;
}
