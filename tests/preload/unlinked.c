/* A C program that does not link hdsm: it finds hdsm_alloc at run time (dlsym), as a plug-in or a
 * program started under LD_PRELOAD=libhdsm_preload.so would, and then reads a file into shared
 * memory with libc's read, pread, readv and fread. libhdsm.so, loaded as the preload library's
 * dependency, comes after libc in such a program's lookup order: the preload library's own
 * definitions of the I/O calls must take them (before, each failed with EFAULT on the new objects,
 * whose host view is not yet readable or writable by the kernel's access). Exit status 0 only when
 * every byte arrived. */
#define _GNU_SOURCE
#include <hdsm/hdsm.h>

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

typedef hdsm_status (*alloc_fn)(size_t, int, void**);

enum { kBytes = 1 << 20 };

static void took_a_fault(int sig) {
  (void)sig;
  static const char message[] = "the program's handler took a fault of shared memory\n";
  if (write(1, message, sizeof message - 1) < 0) _exit(4);
  _exit(3);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 13 + (i >> 12)); }

static int check(const char* call, const unsigned char* p, size_t n, long got) {
  if (got != (long)n) {
    printf("%s returned %ld, not %zu\n", call, got, n);
    return 0;
  }
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(i)) {
      printf("%s: wrong byte at %zu\n", call, i);
      return 0;
    }
  return 1;
}

int main(void) {
  alloc_fn alloc = (alloc_fn)dlsym(RTLD_DEFAULT, "hdsm_alloc");
  if (alloc == NULL) {
    printf("hdsm_alloc not found: run with LD_PRELOAD=libhdsm_preload.so\n");
    return 2;
  }
  const int fd = memfd_create("hdsm-unlinked", MFD_CLOEXEC);
  if (fd < 0) {
    perror("memfd_create");
    return 2;
  }
  unsigned char* data = malloc(kBytes);
  for (size_t i = 0; i < kBytes; ++i) data[i] = pattern(i);
  if (pwrite(fd, data, kBytes, 0) != kBytes) {
    perror("pwrite of the host buffer");
    return 2;
  }
  unsigned char* p[4];
  for (int i = 0; i < 4; ++i)
    if (alloc(kBytes, -1, (void**)&p[i]) != HDSM_SUCCESS) {
      printf("hdsm_alloc failed\n");
      return 2;
    }
  int ok = check("pread", p[0], kBytes, (long)pread(fd, p[0], kBytes, 0));
  lseek(fd, 0, SEEK_SET);
  ok &= check("read", p[1], kBytes, (long)read(fd, p[1], kBytes));
  lseek(fd, 0, SEEK_SET);
  struct iovec v[2] = {{p[2], kBytes / 2}, {p[2] + kBytes / 2, kBytes / 2}};
  ok &= check("readv", p[2], kBytes, (long)readv(fd, v, 2));
  lseek(fd, 0, SEEK_SET);
  FILE* f = fdopen(dup(fd), "r");
  ok &= check("fread", p[3], kBytes, f == NULL ? -1 : (long)fread(p[3], 1, kBytes, f));
  if (f != NULL) fclose(f);
  close(fd);
  free(data);
  /* A handler the program installs for SIGSEGV, with sigaction and with signal, is chained behind
   * hdsm's, as in a program linked with libhdsm: the first writes to new objects fault, and those
   * faults stay hdsm's (before, the handler took them: the program ended with its code 3). */
  struct sigaction mine;
  memset(&mine, 0, sizeof mine);
  mine.sa_handler = took_a_fault;
  sigemptyset(&mine.sa_mask);
  if (sigaction(SIGSEGV, &mine, NULL) != 0) {
    perror("sigaction");
    return 2;
  }
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && signal(SIGSEGV, took_a_fault) == SIG_ERR) {
      perror("signal");
      return 2;
    }
    unsigned char* q = NULL;
    if (alloc(kBytes, -1, (void**)&q) != HDSM_SUCCESS) {
      printf("hdsm_alloc failed\n");
      return 2;
    }
    q[5] = 42;
    if (q[5] != 42) {
      printf("a write to a new object went missing\n");
      ok = 0;
    }
  }
  printf(ok ? "all data correct\n" : "data missing\n");
  return ok ? 0 : 1;
}
