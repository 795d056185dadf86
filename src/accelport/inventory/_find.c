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

int ap_find_version(void) { return 1; }

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
