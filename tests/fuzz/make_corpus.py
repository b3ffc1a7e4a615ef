#!/usr/bin/env python3
"""Rebuilds the seed corpus tests/fuzz/corpus/<target>/ from files sift itself writes.

    tests/fuzz/make_corpus.py --sift build/sift --fuzz-bin build/tests/fuzz [--out tests/fuzz/corpus]

A 6-user synthetic timeline dataset (`sift data gen`), its TFRecord export (one sample per Example
and prebatched by 4) and the explicit-samples import of that export give the TFRecord, Example,
feature_spec, binary-file and dataset seeds; the job specs are the repository's examples; the
Amazon lines follow model-spec 7.1; the checkpoint, snapshot, embedding and coordinator seeds are
written by the targets themselves (`fuzz_<name> --write-seeds DIR`: genuine files and serialized
requests). The mode byte each target reads first is prepended here (see each *_fuzz.cc).
Deterministic: the same sift gives the same corpus.
"""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile

SEP = b"\n~~sift-fuzz-part~~\n"  # fuzz_util.h kPartSeparator
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def tfrecords(path):
    """The payloads of a TFRecord file (CRCs not checked: sift wrote it)."""
    out, data, off = [], open(path, "rb").read(), 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        out.append(data[off + 12 : off + 12 + n])
        off += 16 + n
    return out


def shrink_samples(path, keep):
    """A samples file with its first `keep` records, header counts and CRCs rewritten."""
    data = open(path, "rb").read()
    header = bytearray(data[:64])
    n, history, shapes = struct.unpack_from("<QQQ", header, 32)
    record = 4 * (2 + (shapes >> 32) + (shapes & 0xFFFFFFFF) * (1 + 2 * history))
    payload = data[64 : 64 + keep * record]
    struct.pack_into("<Q", header, 16, len(payload))
    struct.pack_into("<I", header, 24, crc32c(payload))
    struct.pack_into("<Q", header, 32, keep)
    struct.pack_into("<I", header, 60, crc32c(bytes(header[:60])))
    return bytes(header) + payload


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sift", required=True)
    ap.add_argument("--fuzz-bin", required=True, help="directory of the fuzz_<name> binaries")
    ap.add_argument("--out", default=os.path.join(REPO, "tests/fuzz/corpus"))
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="sift-corpus-")
    run = lambda *args: subprocess.run([a.sift, *args, "--threads", "1"], check=True,
                                       stdout=subprocess.DEVNULL)
    tl, tf, tfp, sm = (os.path.join(tmp, d) for d in ("tl", "tf", "tfp", "sm"))
    run("data", "gen", "--preset", "tiny", "--users", "6", "--items", "30", "--categories", "8",
        "--max-events", "8", "--seed", "1", "--out", tl)
    run("data", "convert", tl, "--to", "tfrecord", "--out", tf, "--train-parts", "1",
        "--test-parts", "1")
    run("data", "convert", tl, "--to", "tfrecord", "--out", tfp, "--prebatch", "4",
        "--train-parts", "1", "--test-parts", "1")
    run("data", "convert", tf, "--from", "tfrecord", "--out", sm)
    read = lambda *p: open(os.path.join(*p), "rb").read()

    # TFRecord framing: mode 0 = the file as is, mode 1 = payloads framed by the target.
    test_part = read(tf, "test/part_0.tfrecord")
    write(a.out, "tfrecord", "test-part-0", b"\x00" + test_part)
    write(a.out, "tfrecord", "test-part-0-truncated", b"\x00" + test_part[:-100])
    write(a.out, "tfrecord", "test-prebatch-4", b"\x00" + read(tfp, "test/part_0.tfrecord"))
    payloads = tfrecords(os.path.join(tf, "train/part_0.tfrecord"))[:3]
    write(a.out, "tfrecord", "framed-3", b"\x01\x00\x00\x00\x00\x00" + SEP.join(payloads))
    write(a.out, "tfrecord", "framed-empty", b"\x01\x00\x00\x00\x00\x00")

    # Examples: layout 0 is history 100 with room for the dataset's ids.
    for i, p in enumerate(payloads[:2]):
        write(a.out, "tf_example", "train-%d" % i, b"\x00" + p)
    write(a.out, "tf_example", "prebatch-4", b"\x00" + tfrecords(
        os.path.join(tfp, "train/part_0.tfrecord"))[0])

    # feature_spec.yaml: timeline, tfrecord and samples flavours.
    for name, d in (("timeline", tl), ("tfrecord", tf), ("samples", sm)):
        write(a.out, "feature_spec", name + ".yaml", read(d, "feature_spec.yaml"))

    # Job specs: the deploy examples and the example.
    for rel in ("deploy/k8s/base/job.yaml", "deploy/k8s/overlays/cpu-large/job.yaml",
                "deploy/k8s/overlays/cuda/job.yaml"):
        write(a.out, "job_spec", rel.replace("/", "_"), read(REPO, rel))
    write(a.out, "job_spec", "issue-5.yaml", b"""dataset: /data/amazon            # a sift dataset
model: {type: dien, embedding_dim: 16}
training: {epochs: 3, batch_size: 131072, lr: 0.01, optimizer: adam, sparse_optimizer: adam,
           staleness: 1, seed: 1, order: shuffled}
cluster: {servers: 2, workers: 2, backend: cpu}
checkpoint: {dir: /ckpt/job1, every_steps: 0, every_epoch: true}
results_dir: /results/job1
""")

    # Amazon lines (model-spec 7.1): metadata as Python literals, reviews as JSON.
    meta = [
        b"{'asin': '0001048791', 'salesRank': {'Books': 6334800}, 'imUrl': "
        b"'http://ecx.images-amazon.com/images/I/51MKP0T4DBL.jpg', 'categories': [['Books']], "
        b"'title': 'The Crucible: Performed by Stuart Pankin, Jerome Dempsey &amp; Cast'}",
        b"{'asin': 'B00K', 'categories': [['Books', 'Literature & Fiction', \"Children's\"], "
        b"['Kindle Store']], 'price': 7.99, 'related': {'also_bought': ['B01', 'B02']}}",
        b"{'asin': u'caf\\xe9', 'categories': (('Books', 'Fiction'),), 'n': 0x1F, 'f': 1e-3, "
        b"'t': (1, None, True), 's': {1, 2}}",
        b"{'asin': 'empty', 'categories': [[]]}",
    ]
    reviews = [
        b'{"reviewerID": "A2SUAM1J3GNN3B", "asin": "0000013714", "reviewerName": "J. McDonald", '
        b'"helpful": [2, 3], "reviewText": "I bought this for my husband.", "overall": 5.0, '
        b'"summary": "Heavenly Highway Hymns", "unixReviewTime": 1252800000, '
        b'"reviewTime": "09 13, 2009"}',
        b'{"reviewerID": "u\\u00e9", "asin": "i2", "unixReviewTime": 1300000000}',
    ]
    for i, line in enumerate(meta):
        write(a.out, "py_literal", "meta-%d" % i, line)
    write(a.out, "py_literal", "nested", b"[(1, -2.5, 'a' 'b', b'\\x00', {'k': [None]})]")
    write(a.out, "amazon_lines", "reviews", b"\x00\x00" + b"\n".join(reviews) + b"\n")
    write(a.out, "amazon_lines", "meta", b"\x00\x00" + b"\r\n".join(meta) + b"\n\n")
    write(a.out, "amazon_lines", "reviews-gzip", b"\x01\x00" + b"\n".join(reviews + meta))

    # Binary files: mode bits 0-2 repair the header, 3 verifies, 4 reads a samples file.
    events, users = read(tl, "events.bin"), read(tl, "users.bin")
    train_small = shrink_samples(os.path.join(sm, "train.samples.bin"), 2)
    test_small = shrink_samples(os.path.join(sm, "test.samples.bin"), 1)
    write(a.out, "binary_file", "events", b"\x08" + events)
    write(a.out, "binary_file", "users", b"\x07" + users)
    write(a.out, "binary_file", "samples", b"\x18" + train_small)

    # Dataset directories: spec, events, users, train samples, test samples.
    write(a.out, "dataset", "timeline", b"\x08" + SEP.join(
        [read(tl, "feature_spec.yaml"), events, users, b"", b""]))
    write(a.out, "dataset", "samples", b"\x08" + SEP.join(
        [read(sm, "feature_spec.yaml"), b"", b"", train_small, test_small]))
    write(a.out, "dataset", "timeline-long-negatives", b"\x17" + SEP.join(
        [read(tl, "feature_spec.yaml"), events, users, b"", b""]))

    # Targets that write their own seeds (genuine files, serialized requests).
    for target in ("checkpoint_manifest", "snapshot", "embedding_shard", "coordinator"):
        d = os.path.join(a.out, target)
        subprocess.run([os.path.join(a.fuzz_bin, "fuzz_" + target), "--write-seeds", d],
                       check=True)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
