"""Ways to make a Raft log record durable, on the filesystem of DIR (default /tmp):
buffered write + fdatasync on a growing file (what the Raft log does) and on fallocate'd space
(unwritten extents), and O_DIRECT|O_DSYNC
writes into a zero-filled preallocated file and into a growing one. 108 KiB records
(a batch of 100 1 KiB documents), one per sync. Prints wall time and system CPU per
record, three rounds; asserts nothing.

What it does not show: each round deletes its file, so the next writes into pages the
kernel has just freed. A log in a running member keeps its pages in the page cache and
takes fresh ones, which on these guests cost about ten times more on first touch; that,
not the sync, was the larger cost (docs/replication.md, "the Raft log leaves the page
cache once synced").

    python3 scripts/measure/log-sync.py [DIR]
"""
import mmap
import os
import resource
import sys
import time

RECORDS = 1500
SIZE = 108 * 1024
BLOCK = 4096
DIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp"


def system_cpu():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def report(label, wall, sys_cpu):
    print(f"{label:<38}: {wall / RECORDS * 1e6:5.0f} us wall  {sys_cpu / RECORDS * 1e6:4.0f} us system")


def fresh(name):
    path = os.path.join(DIR, name)
    if os.path.exists(path):
        os.unlink(path)
    return path


def buffered(fallocated):
    path = fresh("log-sync-buffered.dat")
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    if fallocated:
        os.posix_fallocate(fd, 0, RECORDS * SIZE)
        os.fsync(fd)
    record = b"x" * SIZE
    s0, t0 = system_cpu(), time.perf_counter()
    for _ in range(RECORDS):
        os.write(fd, record)
        os.fdatasync(fd)
    label = "buffered write + fdatasync" + (", fallocated" if fallocated else "")
    report(label, time.perf_counter() - t0, system_cpu() - s0)
    os.close(fd)
    os.unlink(path)


def direct(preallocated):
    path = fresh("log-sync-direct.dat")
    padded = (SIZE + BLOCK - 1) // BLOCK * BLOCK
    if preallocated:
        fd = os.open(path, os.O_CREAT | os.O_RDWR)
        zeros = b"\0" * (1 << 20)
        for _ in range(RECORDS * padded // len(zeros) + 1):
            os.write(fd, zeros)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
    buf = mmap.mmap(-1, padded)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * padded)
    s0, t0 = system_cpu(), time.perf_counter()
    for i in range(RECORDS):
        os.pwritev(fd, [buf], i * padded)
    label = "O_DIRECT|O_DSYNC, " + ("preallocated" if preallocated else "growing file")
    report(label, time.perf_counter() - t0, system_cpu() - s0)
    os.close(fd)
    os.unlink(path)


for _ in range(3):
    buffered(fallocated=False)
    buffered(fallocated=True)
    direct(preallocated=True)
    direct(preallocated=False)
