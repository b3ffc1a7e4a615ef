#!/usr/bin/env python3
"""A synthetic event log as CSV, for measuring `sift data events` on a large file.

  scripts/gen-events-csv.py --out events.csv                      # 10,000,000 events
  scripts/gen-events-csv.py --events 1000000 --out events.csv.gz  # gzip (level 1) by the name

Header `user_id,item_id,category,timestamp`; one row per event, the whole file in time order (ties
in the order generated; `--order user` groups each user's events instead). Tokens look like real
ids: users `u0001234`, items `B00012345` (a bijective scramble of the item's rank, so popular items
are spread over the range), categories `c0042` (each item has one). Timestamps are integer seconds:
each user starts within 3 years of 2017-07-14 and stays active for up to ~2 years (gaps up to 3
days, shorter for heavy users); about one gap in eight is 0 s, so ties are common, as in real logs.

Every user has at least 25 events and the mean is --events / --users (default users: events / 100,
so 100 per user); the counts are heavy-tailed (the largest about 100 x the mean). Item popularity is
skewed (the product of two uniform ranks). Every value is a splitmix64 hash of (seed, stream, index)
in integer arithmetic, so the file is a pure function of the options: byte-identical with numpy
(fast) or without it (plain Python, several times slower). The time taken goes to stderr.
"""
import argparse
import gzip
import os
import sys
import time

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
T0 = 1500000000  # 2017-07-14 02:40 UTC
START_SPAN = 3 * 365 * 86400  # users start within 3 years
MAX_GAP = 3 * 86400  # seconds between a user's consecutive events: 0 .. 3 days, less for users
SPAN = 2 * 365 * 86400  # with so many events that their mean gap would take them beyond ~2 years
MIN_EVENTS = 25
CHUNK = 1 << 20  # rows per write
S_WEIGHT, S_ITEM_A, S_ITEM_B, S_CAT, S_START, S_GAP = range(6)


def mix(z):
    """splitmix64's finaliser of z + golden (Python ints, mod 2**64)."""
    z = (z + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream_base(seed, stream):
    return mix(((seed & 0xFFFFFFFFFFFFFF) << 8) | stream)


def item_token_number(rank):
    return (rank * 7919 + 12345) % 100000000  # 7919 is prime: a bijection of 0..10^8-1


def user_counts(n_events, n_users, seed):
    """Events per user: MIN_EVENTS + a share of the rest by a heavy-tailed weight, summing to
    n_events exactly. Integer arithmetic only (so numpy and plain Python agree)."""
    b = stream_base(seed, S_WEIGHT)
    weights = [1000000 // (mix((b + u) & MASK) % 1000 + 1) for u in range(n_users)]
    extra = n_events - MIN_EVENTS * n_users
    total = sum(weights)
    counts = [MIN_EVENTS + extra * w // total for w in weights]
    for u in range(n_events - sum(counts)):  # the remainder, one each to the first users
        counts[u] += 1
    return counts


def max_gaps(counts):
    """A user's gaps are uniform in 0 .. max_gap - 1 (7 in 8 of them): about SPAN in all at most."""
    return [max(60, min(MAX_GAP, SPAN * 16 // (7 * c))) for c in counts]


def category_of_items(n_items, n_categories, seed):
    b = stream_base(seed, S_CAT)
    return [mix((b + i) & MASK) % n_categories for i in range(n_items)]


class Rows:
    """The events in generation order (users in order, each user's events in time order)."""

    def __init__(self, args):
        self.args = args
        self.counts = user_counts(args.events, args.users, args.seed)
        self.cats = category_of_items(args.items, args.categories, args.seed)


def generate_numpy(args, np, out):
    rows = Rows(args)
    n, n_items = args.events, args.items
    counts = np.array(rows.counts, dtype=np.int64)
    maxgap = np.array(max_gaps(rows.counts), dtype=np.uint64)
    cats = np.array(rows.cats, dtype=np.int64)
    user = np.repeat(np.arange(args.users, dtype=np.int64), counts)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    idx = np.arange(n, dtype=np.uint64)

    def hashes(stream, index):
        with np.errstate(over="ignore"):
            z = index + np.uint64(stream_base(args.seed, stream)) + np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return z ^ (z >> np.uint64(31))

    ni = np.uint64(n_items)
    rank = ((hashes(S_ITEM_A, idx) % ni) * (hashes(S_ITEM_B, idx) % ni) // ni).astype(np.int64)
    del idx
    start = T0 + (hashes(S_START, np.arange(args.users, dtype=np.uint64))
                  % np.uint64(START_SPAN)).astype(np.int64)
    g = hashes(S_GAP, np.arange(n, dtype=np.uint64))
    gap = np.where((g >> np.uint64(61)) == 0, 0, g % maxgap[user]).astype(np.int64)
    del g
    gap[first] = 0  # a user's first event is at their start
    ts = np.cumsum(gap)
    ts += start[user] - ts[first][user]
    del gap
    if args.order == "time":
        order = np.argsort(ts, kind="stable")
        user, rank, ts = user[order], rank[order], ts[order]
        del order
    item_num = (rank * 7919 + 12345) % 100000000
    cat = cats[rank]

    # Fixed-width fields: u%07d , B%08d , c%04d , %010d \n = 8+1+9+1+5+1+10+1 = 36 bytes a row
    widths = [("u", 7), ("B", 8), ("c", 4), ("", 10)]
    row_len = sum(len(p) + w for p, w in widths) + len(widths)
    out.write(b"user_id,item_id,category,timestamp\n")
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        buf = np.empty((hi - lo, row_len), dtype=np.uint8)
        col = 0
        for (prefix, width), values in zip(widths, (user, item_num, cat, ts)):
            for ch in prefix.encode():
                buf[:, col] = ch
                col += 1
            v = values[lo:hi].copy()
            for k in range(width - 1, -1, -1):
                buf[:, col + k] = 48 + v % 10
                v //= 10
            col += width
            buf[:, col] = ord(",") if col < row_len - 1 else ord("\n")
            col += 1
        out.write(buf.tobytes())


def generate_python(args, out):
    from array import array
    rows = Rows(args)
    n, n_items = args.events, args.items
    b_a = stream_base(args.seed, S_ITEM_A)
    b_b = stream_base(args.seed, S_ITEM_B)
    b_s = stream_base(args.seed, S_START)
    b_g = stream_base(args.seed, S_GAP)
    user, rank, ts = array("q", bytes(8 * n)), array("q", bytes(8 * n)), array("q", bytes(8 * n))
    i = 0
    for u, (c, maxgap) in enumerate(zip(rows.counts, max_gaps(rows.counts))):
        t = T0 + mix((b_s + u) & MASK) % START_SPAN
        for k in range(c):
            if k:
                g = mix((b_g + i) & MASK)
                t += 0 if (g >> 61) == 0 else g % maxgap
            user[i] = u
            a, b = mix((b_a + i) & MASK) % n_items, mix((b_b + i) & MASK) % n_items
            rank[i] = a * b // n_items
            ts[i] = t
            i += 1
    order = sorted(range(n), key=ts.__getitem__) if args.order == "time" else range(n)
    cats = rows.cats
    out.write(b"user_id,item_id,category,timestamp\n")
    lines = []
    for j in order:
        r = rank[j]
        lines.append(f"u{user[j]:07d},B{item_token_number(r):08d},c{cats[r]:04d},{ts[j]:010d}\n")
        if len(lines) == CHUNK:
            out.write("".join(lines).encode())
            lines = []
    out.write("".join(lines).encode())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000, help="rows (default 10,000,000)")
    p.add_argument("--users", type=int, default=0, help="users (default: events / 100)")
    p.add_argument("--items", type=int, default=0, help="items (default: max(1000, events / 50))")
    p.add_argument("--categories", type=int, default=1000, help="categories (default 1000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--order", choices=("time", "user"), default="time",
                   help="time: the whole log by time (default); user: grouped by user")
    p.add_argument("--out", required=True, help="output file (.gz: gzip level 1); - for stdout")
    p.add_argument("--no-numpy", action="store_true", help="plain Python even if numpy is there")
    args = p.parse_args()
    args.users = args.users or max(1, args.events // 100)
    args.items = args.items or max(1000, args.events // 50)
    if args.events < MIN_EVENTS * args.users:
        p.error(f"--events {args.events} < {MIN_EVENTS} x --users {args.users}: every user has at "
                f"least {MIN_EVENTS} events")
    if not (1 <= args.users <= 10_000_000 and 1 <= args.items <= 100_000_000
            and 1 <= args.categories <= 10_000):
        p.error("--users <= 10^7, --items <= 10^8, --categories <= 10^4 (the tokens' widths)")
    np = None
    if not args.no_numpy:
        try:
            import numpy as np
        except ImportError:
            print("gen-events-csv: no numpy here; plain Python (slower, same file)",
                  file=sys.stderr)
    began = time.monotonic()
    if args.out == "-":
        out, path = sys.stdout.buffer, None
    else:
        path = args.out
        # a new or regular file is written beside it and renamed (never half a file under its
        # name); anything else (/dev/null, a pipe) directly
        tmp = path + ".tmp" if not os.path.exists(path) or os.path.isfile(path) else path
        out = gzip.open(tmp, "wb", compresslevel=1) if path.endswith(".gz") else open(tmp, "wb")
    with out:
        if np is not None:
            generate_numpy(args, np, out)
        else:
            generate_python(args, out)
    if path and tmp != path:
        os.replace(tmp, path)
    took = time.monotonic() - began
    where = path or "stdout"
    size = f", {os.path.getsize(path) / 1e6:.1f} MB" if path and os.path.isfile(path) else ""
    print(f"wrote {where}: {args.events} events, {args.users} users, {args.items} items, "
          f"{args.categories} categories{size}, {took:.1f} s "
          f"({'numpy' if np is not None else 'plain Python'})", file=sys.stderr)


if __name__ == "__main__":
    main()
