/* What this machine charges for the things a database does per request: a system call,
 * the first touch of a fresh 4 KiB page, and a memset over warm memory. Prints figures;
 * asserts nothing. Run by host-costs.sh. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const int calls = 1000000;
    double t = now();
    for (int i = 0; i < calls; i++) syscall(SYS_getppid);
    printf("system call (getppid)      : %.2f us\n", (now() - t) / calls * 1e6);

    const size_t size = 256u << 20;
    t = now();
    char *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    for (size_t o = 0; o < size; o += 4096) p[o] = 1;
    printf("first touch of a 4 KiB page: %.2f us\n", (now() - t) / (size / 4096) * 1e6);

    t = now();
    memset(p, 2, size);
    printf("memset over warm memory    : %.1f GB/s\n", size / (now() - t) / 1e9);
    return 0;
}
